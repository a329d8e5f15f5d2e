import { GraphView } from '../graphView';
import { IGraphRequests } from '../tokens';
import { View } from '../protocol';

/** A graphviz SVG as render/dot.py draws it: a box in a cluster, and the graph's caption. */
function svgWith(caption: string[]): string {
  const text = (y: number, t: string) =>
    `<text text-anchor="middle" x="100" y="${y}">${t}</text>`;
  return (
    '<svg xmlns="http://www.w3.org/2000/svg" width="200pt" height="120pt" viewBox="0 0 200 120">' +
    '<g id="graph0" class="graph" transform="translate(4 116)"><title>vjpviz</title>' +
    '<polygon fill="white" points="-4,4 -4,-116 196,-116 196,4 -4,4"/>' +
    caption.map((t, i) => text(-20 + 12 * i, t)).join('') +
    '<g id="clust1" class="cluster"><title>cluster_n1</title>' +
    '<text x="20" y="-90">layer 0–29 of 48 ×30</text></g>' +
    '<g id="n0" class="node vjpviz-node"><title>n0</title><text x="50" y="-60">tanh</text></g>' +
    '</g></svg>'
  );
}

function requestsFor(svg: string): IGraphRequests {
  const view = async (): Promise<View> => ({ svg, expanded: [] });
  return {
    view,
    expand: view,
    collapse: view,
    search: async () => ({ matches: [], view: await view() })
  };
}

async function shown(svg: string): Promise<GraphView> {
  const graph = new GraphView();
  await graph.load([], null, requestsFor(svg));
  return graph;
}

describe('the graph view', () => {
  it('shows the graph caption (what is folded) as text beside the SVG, not in it', async () => {
    const graph = await shown(
      svgWith([
        '41 boxes for 2105 nodes;',
        '1 collapsed (expand to see inside)'
      ])
    );
    const note = graph.node.querySelector('.jp-Vjpviz-graphNote')!;
    expect(note.textContent).toBe(
      '41 boxes for 2105 nodes; 1 collapsed (expand to see inside)'
    );
    expect(note.closest('.jp-Vjpviz-viewport')).toBeNull();
    const root = graph.node.querySelector('.jp-Vjpviz-svg g.graph')!;
    expect(
      Array.from(root.children).filter(c => c.localName === 'text')
    ).toEqual([]);
    // The labels of clusters and boxes stay drawn.
    const labels = Array.from(root.querySelectorAll('text')).map(
      t => t.textContent
    );
    expect(labels).toEqual(['layer 0–29 of 48 ×30', 'tanh']);
  });

  it('has no note for a graph without a caption, and drops the last one', async () => {
    const graph = await shown(
      svgWith(['2 boxes for 9 nodes; 1 collapsed (expand to see inside)'])
    );
    await graph.load([], null, requestsFor(svgWith([])));
    expect(graph.node.querySelector('.jp-Vjpviz-graphNote')!.textContent).toBe(
      ''
    );
  });
});
