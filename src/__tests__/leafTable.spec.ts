import { renderLeafTable, renderRuleSource } from '../panels/diagnoses/view';
import { leafRows, keyPath } from '../panels/diagnoses/leafTable';
import { Diagnosis } from '../protocol';

const base = {
  id: 'd1',
  severity: 'error' as const,
  headline: 'h',
  graph: { nodes: [], edges: [] },
  fixes: []
};

type Traits = NonNullable<Diagnosis['traits']>;

/**
 * A kind's traits as the registry sends them (base/kinds.py Kind.traits): a
 * bwd rule's returned cotangent, wrong in `wrong`.
 */
function traitsOf(wrong: Traits['wrong'], other: Partial<Traits> = {}): Traits {
  return {
    role: 'bwd',
    subject: 'rule',
    wrong,
    channel: 'returned',
    silent: false,
    structural: wrong === 'structure',
    ...other
  };
}

describe('keyPath', () => {
  it('spells a path as jax.tree_util.keystr does', () => {
    expect(
      keyPath([
        { kind: 'index', key: 1 },
        { kind: 'key', key: 'w' },
        { kind: 'attr', key: 'x' },
        { kind: 'key', key: 2 },
        { kind: 'flat', key: 0 },
        { kind: 'other', key: '[(1, 2)]' }
      ])
    ).toBe("[1]['w'].x[2][<flat index 0>][(1, 2)]");
    // What Python's keystr writes for these dict keys.
    const spelled: [string, string][] = [
      ["it's", `["it's"]`],
      ['a"b', `['a"b']`],
      ['x\\y\n', "['x\\\\y\\n']"],
      ['q\x07\x85z', "['q\\x07\\x85z']"],
      [`both'"`, `['both\\'"']`],
      ['é', "['é']"]
    ];
    for (const [key, text] of spelled) {
      expect(keyPath([{ kind: 'key', key }])).toBe(text);
    }
  });
});

describe('leafRows', () => {
  it('gives one row for a type mismatch', () => {
    expect(
      leafRows({
        traits: traitsOf('type'),
        path: '[1]',
        expected: 'float32[5,3]',
        got: 'float32[3,5]'
      })
    ).toEqual([
      {
        path: '[1]',
        expected: 'float32[5,3]',
        got: 'float32[3,5]',
        status: 'mismatch'
      }
    ]);
  });

  it('marks missing and extra leaves for structure kinds, from the leaves as data', () => {
    const rows = leafRows({
      traits: traitsOf('structure'),
      path: "[1]['b']",
      expected: 'a tree the panel never parses',
      got: 'another one',
      leaves: [
        {
          path: [{ kind: 'index', key: 0 }],
          argument: 'x',
          expected: 'float32[3]',
          got: 'float32[3]'
        },
        {
          path: [
            { kind: 'index', key: 1 },
            { kind: 'key', key: 'w' }
          ],
          argument: "p['w']",
          expected: 'float32[2]',
          got: 'float32[3]'
        },
        {
          path: [
            { kind: 'index', key: 1 },
            { kind: 'key', key: 'b' }
          ],
          argument: "p['b']",
          expected: 'float32[2]',
          got: 'missing'
        },
        {
          path: [
            { kind: 'index', key: 1 },
            { kind: 'key', key: 'scale' }
          ],
          argument: null,
          expected: 'missing',
          got: 'float32[]'
        }
      ]
    });
    expect(rows).toEqual([
      { path: 'x', expected: 'float32[3]', got: 'float32[3]', status: 'same' },
      {
        path: "p['w']",
        expected: 'float32[2]',
        got: 'float32[3]',
        status: 'mismatch'
      },
      {
        path: "p['b']",
        expected: 'float32[2]',
        got: '(missing)',
        status: 'missing'
      },
      {
        path: "[1]['scale']",
        expected: '(absent)',
        got: 'float32[]',
        status: 'extra'
      }
    ]);
  });

  it('adds the two trees as text when only the containers differ', () => {
    const leaf = (i: number) => ({
      path: [{ kind: 'index' as const, key: i }],
      expected: 'float32[]',
      got: 'float32[]'
    });
    const rows = leafRows({
      traits: traitsOf('structure', { role: 'fwd' }),
      expected: 'PyTreeDef((*, *))',
      got: 'PyTreeDef([*, *])',
      leaves: [leaf(0), leaf(1)]
    });
    expect(rows.map(r => r.status)).toEqual(['same', 'same', 'mismatch']);
    expect(rows[2]).toMatchObject({
      expected: 'PyTreeDef((*, *))',
      got: 'PyTreeDef([*, *])'
    });
  });

  it('names the one row by the input as the user would type it', () => {
    expect(
      leafRows({
        traits: traitsOf('type', { subject: 'input', channel: 'accumulated' }),
        path: 'args[0]',
        argument: 'x',
        expected: 'float32[3]',
        got: 'float32[4]'
      })[0].path
    ).toBe('x');
  });

  it('shows a diagnosis read from the message as its text, in one row', () => {
    expect(
      leafRows({
        traits: traitsOf('structure'),
        path: '',
        expected: 'PyTreeDef((*, *))',
        got: 'PyTreeDef(*)'
      })
    ).toEqual([
      {
        path: '(output)',
        expected: 'PyTreeDef((*, *))',
        got: 'PyTreeDef(*)',
        status: 'mismatch'
      }
    ]);
  });
});

describe('renderLeafTable', () => {
  it('puts the stable hooks on every row and never parses kernel text as HTML', () => {
    const d: Diagnosis = {
      ...base,
      kind: 'bwd_type',
      path: '[<b>1</b>]',
      expected: 'float32[5,3]',
      got: '<img src=x onerror=alert(1)>'
    };
    const table = renderLeafTable(d);
    const row = table.querySelector('tbody tr')!;
    expect(row.getAttribute('data-vjpviz-path')).toBe('[<b>1</b>]');
    expect(row.getAttribute('data-vjpviz-expected')).toBe('float32[5,3]');
    expect(row.getAttribute('data-vjpviz-got')).toBe(
      '<img src=x onerror=alert(1)>'
    );
    expect(table.querySelector('img, b')).toBeNull();
    expect(row.lastElementChild!.textContent).toBe(
      '<img src=x onerror=alert(1)>'
    );
  });
});

describe('renderRuleSource', () => {
  it('marks the bad return line', () => {
    const pre = renderRuleSource({
      ...base,
      kind: 'bwd_type',
      rule_source_text: 'def bwd(res, g):\n  x = res\n  return g.T,\n',
      rule_source_start: 10,
      rule_source_bad_line: 12
    })!;
    const lines = Array.from(pre.querySelectorAll('.jp-Vjpviz-line'));
    expect(lines).toHaveLength(3);
    expect(lines.map(l => l.classList.contains('jp-mod-bad'))).toEqual([
      false,
      false,
      true
    ]);
    expect(lines[2].textContent).toContain('return g.T,');
    expect(lines[2].getAttribute('title')).toContain('this return');
  });

  it('says when the marked line raised rather than returned', () => {
    const pre = renderRuleSource({
      ...base,
      kind: 'bwd_type',
      rule_source_text:
        "def bwd(res, g):\n  m_g['w'][...] = g.T\n  return m_g,\n",
      rule_source_start: 10,
      rule_source_bad_line: 11,
      raised_at: 'cell.py:11'
    })!;
    const bad = pre.querySelector('.jp-Vjpviz-line.jp-mod-bad')!;
    expect(bad.textContent).toContain("m_g['w'][...] = g.T");
    expect(bad.getAttribute('title')).toContain('raised here');
  });
});

describe('leafRows reads the traits, never the kind', () => {
  const leaf = (i: number) => ({
    path: [{ kind: 'index' as const, key: i }],
    expected: 'float32[]',
    got: 'float32[]'
  });
  const valueError = {
    name: 'x',
    ok: false,
    max_abs: 1,
    max_rel: 1,
    got_zero: false,
    reference_at: 1,
    got_at: 2
  };

  it('gives a kind the panel never heard of the rows its traits call for', () => {
    const later = {
      kind: 'a_kind_added_later',
      traits: traitsOf('value', { role: null, subject: 'output' }),
      leaf_errors: [valueError]
    };
    expect(leafRows(later).map(r => r.path)).toEqual(['x']);
    const structural = {
      kind: 'another_kind',
      traits: traitsOf('structure', { channel: 'passed' }),
      expected: 'PyTreeDef((*, *))',
      got: 'PyTreeDef([*, *])',
      leaves: [leaf(0), leaf(1)]
    };
    expect(leafRows(structural).map(r => r.status)).toEqual([
      'same',
      'same',
      'mismatch'
    ]);
  });

  it('reads a type mismatch as its leaves, whatever the name says', () => {
    const named = {
      kind: 'bwd_value_structure',
      traits: traitsOf('type'),
      leaf_errors: [valueError],
      leaves: [leaf(0), leaf(1)]
    };
    expect(leafRows(named).map(r => r.status)).toEqual(['same', 'same']);
  });
});

describe('leafRows of a value kind', () => {
  it('shows the reference beside the rule, leaf by leaf', () => {
    const rows = leafRows({
      traits: traitsOf('value', { silent: true }),
      path: '[0]',
      expected: "the primal's derivative (autodiff)",
      got: 'the gradient of `x` differs',
      leaf_errors: [
        {
          name: 'x',
          ok: false,
          max_abs: 0.84,
          max_rel: 0.31,
          where: [2, 1],
          got_zero: false,
          reference_at: 0.84,
          got_at: 1.68,
          scale: 2.7
        },
        {
          name: "p['w']",
          ok: false,
          max_abs: 1.5,
          max_rel: 1,
          where: [0],
          got_zero: true,
          reference_at: 1.5,
          got_at: 0,
          scale: 1.5
        }
      ]
    });
    expect(rows).toEqual([
      {
        path: 'x',
        expected: 'reference 0.84 at [2, 1]',
        got: 'rule 1.68 at [2, 1]; max abs error 0.84, rel 0.31',
        status: 'mismatch'
      },
      {
        path: "p['w']",
        expected: 'reference 1.5 at [0]',
        got: 'zero (the reference reaches 1.5)',
        status: 'mismatch'
      }
    ]);
  });
});
