/**
 * The expected-vs-got diff of a diagnosis as rows, pytree-aware for the
 * structure kinds (`PyTreeDef(...)` strings are parsed into leaf paths).
 */
import type { LeafError } from './protocol';

export type RowStatus = 'mismatch' | 'same' | 'missing' | 'extra';

export interface IDiffRow {
  readonly path: string;
  readonly expected: string;
  readonly got: string;
  readonly status: RowStatus;
}

/**
 * The leaf paths of a `str(PyTreeDef)`, in jax.tree_util.keystr spelling
 * (`[0]`, `['a']`, `.x`), or null when the text is not understood.
 */
export function treeLeaves(text: string): string[] | null {
  let s = text.trim();
  const wrapped = /^PyTreeDef\(([\s\S]*)\)$/.exec(s);
  if (wrapped) {
    s = wrapped[1];
  }
  const leaves: string[] = [];
  let i = 0;
  const ws = () => {
    while (i < s.length && /\s/.test(s[i])) {
      i++;
    }
  };
  const expect = (c: string) => {
    ws();
    if (s[i] !== c) {
      throw new Error(`expected ${c} at ${i}`);
    }
    i++;
  };
  const key = (): string => {
    ws();
    const quote = s[i];
    if (quote === "'" || quote === '"') {
      const end = s.indexOf(quote, i + 1);
      if (end < 0) {
        throw new Error('unterminated key');
      }
      const k = s.slice(i, end + 1);
      i = end + 1;
      return `[${k}]`;
    }
    const m = /^[^:,}]+/.exec(s.slice(i));
    if (!m) {
      throw new Error('bad key');
    }
    i += m[0].length;
    return `[${m[0].trim()}]`;
  };
  const seq = (close: string, path: string) => {
    let n = 0;
    ws();
    if (s[i] === close) {
      i++;
      return;
    }
    for (;;) {
      node(`${path}[${n++}]`);
      ws();
      if (s[i] === ',') {
        i++;
        ws();
        if (s[i] === close) {
          i++;
          return;
        }
        continue;
      }
      expect(close);
      return;
    }
  };
  const node = (path: string): void => {
    ws();
    const c = s[i];
    if (c === '*') {
      i++;
      leaves.push(path);
    } else if (c === '(') {
      i++;
      seq(')', path);
    } else if (c === '[') {
      i++;
      seq(']', path);
    } else if (c === '{') {
      i++;
      ws();
      if (s[i] === '}') {
        i++;
        return;
      }
      for (;;) {
        const k = key();
        expect(':');
        node(path + k);
        ws();
        if (s[i] === ',') {
          i++;
          continue;
        }
        expect('}');
        return;
      }
    } else if (s.startsWith('None', i)) {
      i += 4;
    } else {
      const m = /^([A-Za-z_][\w.]*)/.exec(s.slice(i));
      if (!m) {
        throw new Error(`unexpected ${c} at ${i}`);
      }
      i += m[1].length;
      ws();
      if (m[1] === 'CustomNode') {
        // CustomNode(Name[aux], [children])
        expect('(');
        let depth = 0;
        while (i < s.length) {
          if (s[i] === '[') {
            depth++;
          } else if (s[i] === ']') {
            depth--;
          } else if (s[i] === ',' && depth === 0) {
            break;
          }
          i++;
        }
        expect(',');
        expect('[');
        seq(']', path);
        expect(')');
        return;
      }
      // NamedTuple(x=*, y=*)
      expect('(');
      ws();
      if (s[i] === ')') {
        i++;
        return;
      }
      for (;;) {
        ws();
        const f = /^([A-Za-z_]\w*)\s*=/.exec(s.slice(i));
        if (!f) {
          throw new Error('bad field');
        }
        i += f[0].length;
        node(`${path}.${f[1]}`);
        ws();
        if (s[i] === ',') {
          i++;
          continue;
        }
        expect(')');
        return;
      }
    }
  };
  try {
    node('');
    ws();
    if (i !== s.length) {
      return null;
    }
  } catch {
    return null;
  }
  return leaves;
}

const num = (x: number | null | undefined): string =>
  x === null || x === undefined ? '∞' : Number(x.toPrecision(4)).toString();

/**
 * A value row: the reference beside the rule's value where they differ most.
 * Kernel numbers are untrusted like its text: only ever shown as text.
 */
function valueRow(l: LeafError): IDiffRow {
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
 * The diff rows of a diagnosis.
 */
export function diffRows(d: {
  kind: string;
  path?: string | null;
  expected?: string | null;
  got?: string | null;
  leaf_errors?: readonly LeafError[] | null;
}): IDiffRow[] {
  if (d.kind === 'bwd_value' && Array.isArray(d.leaf_errors) && d.leaf_errors.length) {
    return d.leaf_errors.map(valueRow);
  }
  const expected = d.expected ?? '';
  const got = d.got ?? '';
  if (d.kind.endsWith('_structure')) {
    const want = treeLeaves(expected);
    const have = treeLeaves(got);
    if (want && have) {
      const prefix = d.path ?? '';
      const haveSet = new Set(have);
      const wantSet = new Set(want);
      const rows: IDiffRow[] = want.map(p => ({
        path: prefix + (p || '(root)'),
        expected: 'leaf',
        got: haveSet.has(p) ? 'leaf' : '(missing)',
        status: haveSet.has(p) ? 'same' : 'missing'
      }));
      for (const p of have) {
        if (!wantSet.has(p)) {
          rows.push({
            path: prefix + (p || '(root)'),
            expected: '(absent)',
            got: 'leaf',
            status: 'extra'
          });
        }
      }
      if (rows.every(r => r.status === 'same')) {
        // Same leaves, different containers: show the two trees.
        rows.push({
          path: prefix || '(root)',
          expected,
          got,
          status: 'mismatch'
        });
      }
      return rows;
    }
  }
  if (!expected && !got) {
    return [];
  }
  return [
    {
      path: d.path || '(output)',
      expected,
      got,
      status: expected === got ? 'same' : 'mismatch'
    }
  ];
}
