import { renderDiff, renderRuleSource } from '../diagnosisView';
import { diffRows, treeLeaves } from '../diff';
import { Diagnosis } from '../protocol';

const base = {
  id: 'd1',
  severity: 'error' as const,
  headline: 'h',
  graph: { nodes: [], edges: [] },
  fixes: []
};

describe('treeLeaves', () => {
  it('reads str(PyTreeDef)', () => {
    expect(treeLeaves('PyTreeDef((*, *))')).toEqual(['[0]', '[1]']);
    expect(treeLeaves("PyTreeDef(({'a': *, 'b': [*, *]}, None, *))")).toEqual([
      "[0]['a']",
      "[0]['b'][0]",
      "[0]['b'][1]",
      '[2]'
    ]);
    expect(treeLeaves('PyTreeDef(*)')).toEqual(['']);
    expect(treeLeaves('PyTreeDef((*,))')).toEqual(['[0]']);
    expect(treeLeaves('PyTreeDef(Point(x=*, y=*))')).toEqual(['.x', '.y']);
    expect(
      treeLeaves('PyTreeDef(CustomNode(Params[(1, 2)], [*, (*, *)]))')
    ).toEqual(['[0]', '[1][0]', '[1][1]']);
  });

  it('gives up on what it does not understand', () => {
    expect(treeLeaves('float32[3]')).toBeNull();
    expect(treeLeaves('PyTreeDef((*, *)')).toBeNull();
  });
});

describe('diffRows', () => {
  it('gives one row for a type mismatch', () => {
    expect(
      diffRows({
        kind: 'bwd_type',
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

  it('marks missing and extra leaves for structure kinds', () => {
    const rows = diffRows({
      kind: 'bwd_structure',
      path: '',
      expected: "PyTreeDef((*, {'w': *, 'b': *}))",
      got: "PyTreeDef((*, {'w': *, 'scale': *}))"
    });
    expect(rows.map(r => [r.path, r.status])).toEqual([
      ['[0]', 'same'],
      ["[1]['w']", 'same'],
      ["[1]['b']", 'missing'],
      ["[1]['scale']", 'extra']
    ]);
  });

  it('falls back to the two trees when only the containers differ', () => {
    const rows = diffRows({
      kind: 'fwd_structure',
      expected: 'PyTreeDef((*, *))',
      got: 'PyTreeDef([*, *])'
    });
    expect(rows[rows.length - 1]).toMatchObject({
      status: 'mismatch',
      expected: 'PyTreeDef((*, *))',
      got: 'PyTreeDef([*, *])'
    });
  });
});

describe('renderDiff', () => {
  it('puts the stable hooks on every row and never parses kernel text as HTML', () => {
    const d: Diagnosis = {
      ...base,
      kind: 'bwd_type',
      path: '[<b>1</b>]',
      expected: 'float32[5,3]',
      got: '<img src=x onerror=alert(1)>'
    };
    const table = renderDiff(d);
    const row = table.querySelector('tbody tr')!;
    expect(row.getAttribute('data-vjpviz-path')).toBe('[<b>1</b>]');
    expect(row.getAttribute('data-vjpviz-expected')).toBe('float32[5,3]');
    expect(row.getAttribute('data-vjpviz-got')).toBe(
      '<img src=x onerror=alert(1)>'
    );
    expect(table.querySelector('img, b')).toBeNull();
    expect(row.lastElementChild!.textContent).toBe('<img src=x onerror=alert(1)>');
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
  });
});

describe('diffRows of a bwd_value', () => {
  it('shows the reference beside the rule, leaf by leaf', () => {
    const rows = diffRows({
      kind: 'bwd_value',
      path: '[0]',
      expected: "the primal's derivative (autodiff)",
      got: 'the gradient of `x` differs',
      leaf_errors: [
        { name: 'x', ok: false, max_abs: 0.84, max_rel: 0.31, where: [2, 1], got_zero: false,
          reference_at: 0.84, got_at: 1.68, scale: 2.7 },
        { name: "p['w']", ok: false, max_abs: 1.5, max_rel: 1, where: [0], got_zero: true,
          reference_at: 1.5, got_at: 0, scale: 1.5 }
      ]
    });
    expect(rows).toEqual([
      { path: 'x', expected: 'reference 0.84 at [2, 1]',
        got: 'rule 1.68 at [2, 1]; max abs error 0.84, rel 0.31', status: 'mismatch' },
      { path: "p['w']", expected: 'reference 1.5 at [0]',
        got: 'zero (the reference reaches 1.5)', status: 'mismatch' }
    ]);
  });
});
