/**
 * Finding a function's definition in cell source and replacing it: pure text
 * functions (the notebook side lives in panel.ts).
 */

export interface ISpan {
  readonly start: number;
  readonly end: number;
}

/**
 * The names of the top-level `def`s in `code`, in order.
 */
export function definedNames(code: string): string[] {
  const names: string[] = [];
  const re = /^(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(/gm;
  let m;
  while ((m = re.exec(code))) {
    names.push(m[1]);
  }
  return names;
}

/**
 * The character span of `def name(...)`, its decorators and body in `source`,
 * or null. The body ends at the first non-blank line indented no deeper
 * than the `def`.
 */
export function findFunction(source: string, name: string): ISpan | null {
  const lines = source.split('\n');
  const offsets: number[] = [];
  let pos = 0;
  for (const line of lines) {
    offsets.push(pos);
    pos += line.length + 1;
  }
  const defRe = new RegExp(`^(\\s*)(?:async\\s+)?def\\s+${escape(name)}\\s*\\(`);
  const at = lines.findIndex(l => defRe.test(l));
  if (at < 0) {
    return null;
  }
  const indent = defRe.exec(lines[at])![1].length;
  let first = at;
  while (
    first > 0 &&
    lines[first - 1].trim().startsWith('@') &&
    indentOf(lines[first - 1]) === indent
  ) {
    first--;
  }
  // The signature may span lines: skip to the line ending the header.
  let last = at;
  let depth = 0;
  for (let i = at; i < lines.length; i++) {
    for (const c of stripStrings(lines[i])) {
      if (c === '(' || c === '[' || c === '{') {
        depth++;
      } else if (c === ')' || c === ']' || c === '}') {
        depth--;
      }
    }
    last = i;
    if (depth <= 0 && /:\s*(#.*)?$/.test(lines[i].replace(/\s+$/, ''))) {
      break;
    }
  }
  // A one-line def (`def f(x): return x`) has no body lines.
  if (!/:\s*(#.*)?$/.test(lines[last].replace(/\s+$/, ''))) {
    return { start: offsets[first], end: offsets[last] + lines[last].length };
  }
  let end = last;
  for (let i = last + 1; i < lines.length; i++) {
    if (lines[i].trim() === '') {
      continue;
    }
    if (indentOf(lines[i]) <= indent) {
      break;
    }
    end = i;
  }
  return { start: offsets[first], end: offsets[end] + lines[end].length };
}

/**
 * `source` with every function `code` defines replaced by `code`'s version
 * (re-indented to where it was). Returns the edits as [start, end, text],
 * last first, so applying them in order keeps the offsets valid; empty when
 * nothing matched.
 */
export function replacementEdits(
  source: string,
  code: string
): [number, number, string][] {
  const names = definedNames(code);
  const edits: [number, number, string][] = [];
  for (const name of names) {
    const target = findFunction(source, name);
    const replacement = findFunction(code, name);
    if (!target || !replacement) {
      continue;
    }
    const indent = ' '.repeat(indentOf(source.slice(target.start).split('\n')[0]));
    const text = code
      .slice(replacement.start, replacement.end)
      .split('\n')
      .map(l => (l.trim() ? indent + l : l))
      .join('\n');
    edits.push([target.start, target.end, text]);
  }
  return edits.sort((a, b) => b[0] - a[0]);
}

/**
 * Apply edits from `replacementEdits` to a string.
 */
export function applyEdits(
  source: string,
  edits: [number, number, string][]
): string {
  let out = source;
  for (const [start, end, text] of edits) {
    out = out.slice(0, start) + text + out.slice(end);
  }
  return out;
}

function indentOf(line: string): number {
  return line.length - line.replace(/^\s+/, '').length;
}

function stripStrings(line: string): string {
  return line.replace(/(['"])(?:\\.|(?!\1).)*\1/g, '').replace(/#.*$/, '');
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
