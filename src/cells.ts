/**
 * Finding a rule's definition in cell source and replacing it: pure text
 * functions (the notebook side lives in panel.ts). The kernel says where the
 * definition is (the diagnosis's rule_source_text, rule_source_start and
 * rule_source_end, read from the file the cell ran as); nothing here parses Python.
 */

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
