/**
 * The notebook's cells, the one place the VJP debugger edits them: finding a
 * rule's definition in a cell, writing a fix in its place (after the kernel
 * took it), and revealing it. The kernel says where the definition is (the
 * diagnosis's rule_source_text, rule_source_start and rule_source_end, read
 * from the file the cell ran as); nothing here parses Python.
 */
import type { Notebook } from '@jupyterlab/notebook';

import type { IApplied } from './panels/diagnoses/fixEditor';
import type { ApplyResult, Place } from './protocol';

type Cell = Notebook['widgets'][number];

export interface ISpan {
  readonly start: number;
  readonly end: number;
}

/**
 * Where the kernel found the rule's definition.
 */
export interface IDefinition {
  readonly rule_source_text?: string | null;
  readonly rule_source_start?: number | null;
  readonly rule_source_end?: number | null;
}

/**
 * The character span of the rule's definition in a cell's `source`, or null
 * when the cell does not hold it as it ran. A cell runs as a file of its own
 * lines, so the definition is at the kernel's line numbers; a cell edited
 * since (lines added above) still holds the same text elsewhere.
 */
export function definitionSpan(source: string, d: IDefinition): ISpan | null {
  const lines = (d.rule_source_text ?? '').replace(/\n$/, '').split('\n');
  if (!lines.join('')) {
    return null;
  }
  const cell = source.split('\n');
  const offsets = lineOffsets(cell);
  const at = (first: number): ISpan => ({
    start: offsets[first],
    end: offsets[first + lines.length - 1] + lines[lines.length - 1].length
  });
  const holds = (first: number) =>
    lines.every((line, i) => cell[first + i] === line);
  const named = (d.rule_source_start ?? 0) - 1;
  const expectedEnd = (d.rule_source_end ?? 0) - 1;
  if (named >= 0 && expectedEnd - named === lines.length - 1 && holds(named)) {
    return at(named);
  }
  const moved = cell.findIndex((_, first) => holds(first));
  return moved >= 0 ? at(moved) : null;
}

/**
 * The edit putting `code` (a dedented rule) in place of the definition in
 * `source`, re-indented to where it was, as [start, end, text]; null when the
 * cell does not hold the definition.
 */
export function definitionEdit(
  source: string,
  d: IDefinition,
  code: string
): [number, number, string] | null {
  const span = definitionSpan(source, d);
  if (!span) {
    return null;
  }
  const indent = /^[ \t]*/.exec(source.slice(span.start))![0];
  const text = code
    .replace(/\n+$/, '')
    .split('\n')
    .map(l => (l.trim() ? indent + l : l))
    .join('\n');
  return [span.start, span.end, text];
}

function lineOffsets(lines: string[]): number[] {
  const offsets: number[] = [];
  let pos = 0;
  for (const line of lines) {
    offsets.push(pos);
    pos += line.length + 1;
  }
  return offsets;
}

/**
 * The notebook followed, as the one handler of its cells.
 */
export class NotebookCells {
  /**
   * The notebook whose cells are edited (the active one), or null.
   */
  notebook: { readonly content: Notebook; activate?(): void } | null = null;

  /**
   * Put `code` in place of the rule's definition, in the cell that holds it
   * as it ran, through the shared model (undoable); says what it did.
   */
  write(rule: IDefinition, code: string): string {
    const cell = this._find(rule);
    const source = cell?.model.sharedModel.getSource();
    const edit =
      source === undefined ? null : definitionEdit(source, rule, code);
    if (!cell || !edit) {
      return 'No cell of this notebook holds the rule as it ran.';
    }
    const [start, end, text] = edit;
    cell.model.sharedModel.updateSource(start, end, text);
    this._reveal(cell);
    return 'Applied to the cell that defines the rule.';
  }

  /**
   * Make the cell that defines the rule active, scrolled to, and focus the notebook.
   */
  jumpTo(rule: IDefinition): void {
    const cell = this._find(rule);
    if (cell) {
      this._reveal(cell);
      this.notebook?.activate?.();
    }
  }

  /**
   * Make the cell a place names (by its execution count, as IPython names it) active,
   * its cursor on the place's line, and focus the notebook; false when no cell of
   * this notebook ran with that count (re-run since, or another notebook's).
   */
  goTo(place: Place): boolean {
    const cell = (this.notebook?.content.widgets ?? []).find(
      c =>
        c.model.type === 'code' &&
        place.cell !== null &&
        (c.model as { executionCount?: number | null }).executionCount ===
          place.cell
    );
    if (!cell) {
      return false;
    }
    this._reveal(cell);
    this.notebook?.activate?.();
    if (place.line !== null) {
      cell.editor?.setCursorPosition({ line: place.line - 1, column: 0 });
    }
    return true;
  }

  private _find(rule: IDefinition): Cell | null {
    for (const cell of this.notebook?.content.widgets ?? []) {
      if (
        cell.model.type === 'code' &&
        definitionSpan(cell.model.sharedModel.getSource(), rule)
      ) {
        return cell;
      }
    }
    return null;
  }

  private _reveal(cell: Cell): void {
    const notebook = this.notebook?.content;
    const index = notebook ? notebook.widgets.indexOf(cell) : -1;
    if (notebook && index >= 0) {
      notebook.activeCellIndex = index;
      void notebook.scrollToCell(cell);
    }
  }
}

/**
 * Apply a fix: the kernel rebinds the rule (it verifies first), then the
 * defining cell takes the same text. A kernel that cannot take it still gets
 * the cell written (re-running the cell applies it); a fix that still fails
 * is written nowhere.
 */
export async function applyFix(
  kernelApply: (code: string) => Promise<ApplyResult>,
  cells: NotebookCells,
  rule: IDefinition,
  code: string
): Promise<IApplied> {
  let result: ApplyResult;
  try {
    result = await kernelApply(code);
  } catch (error) {
    const note = ` The kernel could not apply it (${(error as Error).message}); re-run the cell.`;
    return { message: cells.write(rule, code) + note };
  }
  if (!result.applied && result.problems?.length) {
    const first = result.problems[0] as { headline?: string };
    throw new Error(`the fix still fails: ${first.headline ?? 'see Verify'}`);
  }
  const patch = result.applied ? null : (result.patch ?? null);
  const kernelNote = result.applied
    ? ' The kernel now uses the fixed rule.'
    : patch
      ? ` The rule lives in ${result.path ?? 'a file'}; the kernel left it unchanged: make this change there.`
      : '';
  return { message: cells.write(rule, code) + kernelNote, patch };
}
