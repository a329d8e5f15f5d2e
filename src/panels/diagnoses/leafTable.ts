/**
 * The expected-vs-got table of a diagnosis as rows, from the leaves the kernel
 * sends as data (key paths, each side's type or `missing`): no tree's text is
 * parsed here.
 */
import type {
  Diagnosis,
  DiagnosisLeaf,
  KeyEntry,
  LeafError
} from '../../protocol';

export type RowStatus = 'mismatch' | 'same' | 'missing' | 'extra';

export interface ILeafRow {
  readonly path: string;
  readonly expected: string;
  readonly got: string;
  readonly status: RowStatus;
}

const ESCAPES: Record<string, string> = {
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t'
};

/**
 * A Python string literal as `repr` writes it (how `keystr` spells a dict key).
 */
function pyRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  const escaped = Array.from(s, c => {
    const code = c.codePointAt(0)!;
    if (c === '\\' || c === quote) {
      return '\\' + c;
    }
    if (ESCAPES[c]) {
      return ESCAPES[c];
    }
    return code < 0x20 || (code >= 0x7f && code < 0xa0)
      ? `\\x${code.toString(16).padStart(2, '0')}`
      : c;
  });
  return quote + escaped.join('') + quote;
}

/**
 * A key path as `jax.tree_util.keystr` spells it (`[0]`, `['w']`, `.x`).
 */
export function keyPath(path: readonly KeyEntry[]): string {
  return path
    .map(k => {
      switch (k.kind) {
        case 'index':
          return `[${k.key}]`;
        case 'key':
          return typeof k.key === 'number'
            ? `[${k.key}]`
            : `[${pyRepr(k.key)}]`;
        case 'attr':
          return `.${k.key}`;
        case 'flat':
          return `[<flat index ${k.key}>]`;
        default:
          return String(k.key);
      }
    })
    .join('');
}

const MISSING = 'missing';

function rowOfLeaf(l: DiagnosisLeaf): ILeafRow {
  const expected = l.expected ?? '';
  const got = l.got ?? '';
  const status: RowStatus =
    expected === MISSING
      ? 'extra'
      : got === MISSING
        ? 'missing'
        : expected === got
          ? 'same'
          : 'mismatch';
  return {
    path: l.argument || keyPath(l.path) || '(root)',
    expected: expected === MISSING ? '(absent)' : expected,
    got: got === MISSING ? '(missing)' : got,
    status
  };
}

const num = (x: number | null | undefined): string =>
  x === null || x === undefined ? '∞' : Number(x.toPrecision(4)).toString();

/**
 * A value row: the reference beside the rule's value where they differ most.
 * Kernel numbers are untrusted like its text: only ever shown as text.
 */
function valueRow(l: LeafError): ILeafRow {
  const error = `max abs error ${num(l.max_abs)}, rel ${num(l.max_rel)}`;
  const perElement = l.reference_at !== l.got_at;
  const at = perElement ? ` at [${(l.where ?? []).map(num).join(', ')}]` : '';
  return {
    path: l.name,
    expected: perElement
      ? `reference ${num(l.reference_at)}${at}`
      : `finite differences along random directions, up to ${num(l.scale)}`,
    got: l.got_zero
      ? `zero (the reference reaches ${num(l.scale)})`
      : perElement
        ? `rule ${num(l.got_at)}${at}; ${error}`
        : error,
    status: 'mismatch'
  };
}

/**
 * The expected-vs-got rows of a diagnosis. Its kind's traits say how to read
 * it (a kind is never named here): values compared leaf by leaf, or two
 * pytree structures.
 */
export function leafRows(d: {
  traits?: Diagnosis['traits'];
  path?: string | null;
  argument?: string | null;
  expected?: string | null;
  got?: string | null;
  leaf_errors?: readonly LeafError[] | null;
  leaves?: readonly DiagnosisLeaf[] | null;
}): ILeafRow[] {
  if (
    d.traits?.wrong === 'value' &&
    Array.isArray(d.leaf_errors) &&
    d.leaf_errors.length
  ) {
    return d.leaf_errors.map(valueRow);
  }
  const expected = d.expected ?? '';
  const got = d.got ?? '';
  if (Array.isArray(d.leaves) && d.leaves.length) {
    const rows = d.leaves.map(rowOfLeaf);
    if (d.traits?.structural && rows.every(r => r.status === 'same')) {
      // Same leaves, different containers: the two trees, as the kernel wrote them.
      rows.push({
        path: d.path || '(root)',
        expected,
        got,
        status: 'mismatch'
      });
    }
    return rows;
  }
  // Read from JAX's message: no leaves, only its text.
  if (!expected && !got) {
    return [];
  }
  return [
    {
      path: d.argument || d.path || '(output)',
      expected,
      got,
      status: expected === got ? 'same' : 'mismatch'
    }
  ];
}
