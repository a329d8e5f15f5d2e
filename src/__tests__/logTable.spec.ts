import { logValues, renderLogTable } from '../panels/diagnoses/logTable';
import { Diagnosis, LogLeaf } from '../protocol';

const base = {
  id: 'd1',
  severity: 'warning' as const,
  headline: 'h',
  graph: { nodes: [], edges: [] },
  fixes: []
} as unknown as Diagnosis;

function leaf(other: Partial<LogLeaf>): LogLeaf {
  return {
    name: 'gnorm',
    shape: [],
    dtype: 'float32',
    stacked: [],
    traced: false,
    min: '3',
    max: '3',
    mean: '3',
    first: ['3'],
    slices: [],
    ...other
  };
}

describe('renderLogTable', () => {
  it('shows nothing for a rule that logged nothing', () => {
    expect(renderLogTable(base)).toBeNull();
  });

  it('shows each log beside the cotangents, stacking labelled', () => {
    const logs = [
      leaf({}),
      leaf({
        name: "stats['cos']",
        shape: [4, 3],
        stacked: ['axis 0: per iteration'],
        min: '<b>0</b>',
        first: ['1', '2', '3', '4', '5', '6'],
        slices: ['0.5', '0.6', '0.7', '0.8']
      })
    ];
    const table = renderLogTable({ ...base, logs })!;
    const rows = Array.from(table.tBodies[0].rows).map(r =>
      Array.from(r.cells).map(c => c.textContent)
    );
    expect(rows).toEqual([
      ['gnorm', 'float32[]', '', '3'],
      [
        "stats['cos']",
        'float32[4,3]',
        'axis 0: per iteration',
        'means 0.5, 0.6, 0.7, 0.8; min <b>0</b>, max 3, mean 3'
      ]
    ]);
    expect(table.querySelector('b')).toBeNull(); // kernel text is never HTML
  });

  it('says a log traced under jit has its type alone', () => {
    expect(logValues(leaf({ traced: true, first: [] }))).toMatch(/traced/);
  });
});
