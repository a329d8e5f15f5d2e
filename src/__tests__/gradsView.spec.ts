// vv.grads reports through the real channels into the model (no DOM there), and the
// panel's section drawn from them: names stay text, the graph comes with the push.
import { Kernel } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';

import { GradsView, cutNode, depthPlot } from '../panels/grads/view';
import { MAX_GRADS } from '../panels/grads/model';
import { GradReport } from '../protocol';
import {
  FakeKernel,
  answerHistory,
  forbidDom,
  kernelWithControl,
  modelOnKernel,
  reply
} from './fakes';

const HOSTILE = "['<img src=x onerror=alert(1)>']";
const SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="20pt" height="20pt" viewBox="0 0 20 20">' +
  '<g id="n3" class="node vjpviz-node"><title>n3</title><text>stop_gradient</text></g></svg>';

function report(
  id = 'g1',
  headline = `vjpviz grads of loss: 1 leaf`
): GradReport {
  return {
    id,
    function: 'loss',
    headline,
    healthy: false,
    judged: true,
    note: null,
    zero: [
      {
        path: `${HOSTILE}['kernel']`,
        reason: 'stopped',
        source: 'model.py:31',
        op: 'stop_gradient',
        node: 'n3'
      },
      {
        path: "['lora_a']",
        reason: 'zero_factor',
        source: 'model.py:12',
        op: 'dot_general',
        node: 'n5',
        factor: "['lora_b']"
      }
    ],
    partly_zero: [
      {
        path: "['emb']",
        units: 'rows',
        fraction: 0.875,
        reason: 'not gathered',
        alarm: false
      }
    ],
    layers: [
      {
        name: '[0]',
        grad_norm: 2e-9,
        param_norm: 8,
        ratio: 2.5e-10,
        flag: 'vanishing',
        why: "‖g‖ 31x below the next block's"
      },
      {
        name: '[1]',
        grad_norm: 6e-8,
        param_norm: 8,
        ratio: 7.5e-9,
        flag: null,
        why: null
      },
      {
        name: HOSTILE,
        grad_norm: 1e-6,
        param_norm: null,
        ratio: null,
        flag: null,
        why: null
      }
    ],
    graph: { nodes: [], edges: [] }
  } as unknown as GradReport;
}

const push = (r: GradReport, view = true): JSONObject =>
  ({
    v: 1,
    type: 'grads',
    grads: r,
    ...(view ? { view: { svg: SVG, expanded: [], failed_node: 'n3' } } : {})
  }) as unknown as JSONObject;

describe('the model keeps vv.grads reports', () => {
  forbidDom();

  it('keeps each report once per kernel, the newest MAX_GRADS, and forgets them on a restart', () => {
    const { kernel, model } = modelOnKernel();
    let changes = 0;
    model.grads.changed.connect(() => changes++);
    const comm = kernel.open(push(report('g1')));
    for (let k = 2; k <= MAX_GRADS + 2; k++) {
      comm.receive(push(report(`g${k}`)));
    }
    expect(model.grads.items.map(r => r.id)).toEqual(
      Array.from({ length: MAX_GRADS }, (_, k) => `g${k + 3}`)
    );
    expect(changes).toBe(MAX_GRADS + 2);
    model.follow({ kernelId: 'k2' });
    expect(model.grads.items).toEqual([]);
    model.follow({ kernelId: 'k1' });
    kernel.statusChanged.emit('restarting');
    expect(model.grads.items).toEqual([]);
  });

  it("answers the report's graph from its push, and asks the kernel by the report's id for any other view", async () => {
    const { kernel, model } = modelOnKernel();
    const comm = kernel.open(push(report('g4')));
    const requests = model.graphRequests('g4')!;
    expect((await requests.view({ expanded: [], collapsed: [] })).svg).toBe(
      SVG
    );
    expect(comm.sent).toEqual([]);
    void requests.expand('n3', { expanded: [], collapsed: [] });
    expect(comm.sent[0]).toMatchObject({
      op: 'expand',
      args: { report_id: 'g4', node: 'n3' }
    });
  });

  it('asks for the reports after the watches once the history is loaded (a panel opened late)', async () => {
    const { kernel, control, opened } = kernelWithControl();
    const { model } = modelOnKernel(kernel);
    await answerHistory(control, opened);
    reply(control, { watches: [] });
    await new Promise(r => setTimeout(r, 0));
    expect(control.sent[1]).toMatchObject({ op: 'grads', args: {} });
    reply(control, { reports: [report('g9')] } as unknown as JSONObject);
    await new Promise(r => setTimeout(r, 0));
    expect(model.grads.items.map(r => r.id)).toEqual(['g9']);
  });

  it('drops a grads push that breaks the schema', () => {
    const { kernel, model } = modelOnKernel();
    jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    kernel.open(
      push({
        ...report(),
        zero: [{ path: 'x', reason: 'bored' }]
      } as unknown as GradReport)
    );
    expect(model.grads.items).toEqual([]);
  });
});

describe('a report that asks to be seen', () => {
  forbidDom();

  it('announces every vv.grads push (the panel shows itself for it)', () => {
    const { kernel, model } = modelOnKernel();
    const arrived: string[] = [];
    model.grads.arrived.connect((_, { kernelId, item }) =>
      arrived.push(`${kernelId}:${item.id}`)
    );
    const comm = kernel.open(push(report('g1')));
    comm.receive(push(report('g2')));
    expect(arrived).toEqual(['k1:g1', 'k1:g2']);
  });
});

describe('GradsView', () => {
  it('names a cell as IPython does and goes to it; paths break only between keys', async () => {
    const { kernel, model } = modelOnKernel();
    const went: unknown[] = [];
    const view = new GradsView(model.grads, model, place => went.push(place));
    const cell = { text: 'Cell In[2], line 7', cell: 2, line: 7 };
    kernel.open(
      push({
        ...report(),
        places: { 'model.py:31': cell }
      } as GradReport)
    );
    await view.drawn;
    const [first, second] = Array.from(
      view.node.querySelectorAll('.jp-Vjpviz-gradsZero tbody tr')
    );
    const button = first.querySelector('button.jp-Vjpviz-place') as HTMLElement;
    expect(button.textContent).toBe('Cell In[2], line 7');
    button.click();
    expect(went).toEqual([cell]);
    // A file the kernel sent no place for is shown as it is, not a link.
    expect(second.querySelector('button')).toBeNull();
    expect(second.lastElementChild!.textContent).toBe('model.py:12');
    const path = first.querySelector('.jp-Vjpviz-leafPath')!;
    expect(path.querySelectorAll('wbr')).toHaveLength(1);
    expect(path.textContent).toBe(`${HOSTILE}['kernel']`);
  });

  it('shows the newest report: its cut leaves, units and flagged blocks, names as text', async () => {
    const { kernel, model } = modelOnKernel();
    const view = new GradsView(model.grads, model);
    expect(view.isHidden).toBe(true);
    expect(view.node.querySelector('.jp-Vjpviz-graph')).toBeNull();
    kernel.open(push(report()));
    await view.drawn;
    const node = view.node;
    expect(view.isHidden).toBe(false);
    const rows = (selector: string) =>
      Array.from(node.querySelectorAll(`${selector} tbody tr`), tr =>
        Array.from(tr.querySelectorAll('td'), td => td.textContent)
      );
    expect(rows('.jp-Vjpviz-gradsZero')).toEqual([
      [`${HOSTILE}['kernel']`, 'stopped', 'stop_gradient', 'model.py:31'],
      [
        "['lora_a']",
        'zero_factor',
        "dot_general (['lora_b'] all zero)",
        'model.py:12'
      ]
    ]);
    expect(rows('.jp-Vjpviz-gradsPartly')).toEqual([
      ["['emb']", '88% of rows', 'not gathered (no alarm)']
    ]);
    expect(node.querySelectorAll('.jp-Vjpviz-depthDot')).toHaveLength(3);
    expect(
      node.querySelectorAll('.jp-Vjpviz-depthDot.jp-mod-flagged')
    ).toHaveLength(1);
    expect(node.querySelector('.jp-Vjpviz-gradsFlag')!.textContent).toBe(
      "✖ [0] vanishing: ‖g‖ 31x below the next block's"
    );
    expect(node.querySelector('img')).toBeNull();
    expect(node.textContent).toContain(HOSTILE);
    // The graph came drawn with the push: shown without a request.
    expect(node.querySelector('.jp-Vjpviz-canvas svg')).not.toBeNull();
  });

  it('lists the kept reports, shows the one picked, and the next push again', async () => {
    const { kernel, model } = modelOnKernel();
    const view = new GradsView(model.grads, model);
    const comm = kernel.open(push(report('g1', 'first')));
    comm.receive(push(report('g2', 'second')));
    const pick = () => view.node.querySelector('select') as HTMLSelectElement;
    expect(Array.from(pick().options, o => o.textContent)).toEqual([
      'second',
      'first'
    ]);
    expect(pick().value).toBe('g2');
    pick().value = 'g1';
    pick().dispatchEvent(new Event('change'));
    expect(pick().value).toBe('g1');
    comm.receive(push(report('g3', 'third')));
    expect(pick().value).toBe('g3');
  });

  it("draws another kernel's report of the same id afresh", async () => {
    const { kernel, channels, model } = modelOnKernel();
    const view = new GradsView(model.grads, model);
    kernel.open(push(report('g1', 'here')));
    await view.drawn;
    const other = Object.assign(new FakeKernel(), { id: 'k2' });
    channels.attach(other as unknown as Kernel.IKernelConnection);
    const comm = other.open(
      push({ ...report('g1', 'there'), zero: [] }, false)
    );
    model.follow({ kernelId: 'k2' });
    expect(view.node.querySelector('h4')!.textContent).toBe('there');
    expect(view.node.querySelector('.jp-Vjpviz-gradsZero')).toBeNull();
    // Its graph is asked of k2 (no view came with its push), not kept from k1's.
    expect(view.node.querySelector('.jp-Vjpviz-canvas svg')).toBeNull();
    expect(comm.sent[0]).toMatchObject({
      op: 'view',
      args: { report_id: 'g1' }
    });
  });
});

describe('depthPlot and cutNode', () => {
  it('needs two blocks with a gradient; a report with no cut centres on nothing', () => {
    const [first] = report().layers;
    expect(depthPlot([first])).toBeNull();
    expect(depthPlot([first, { ...first, grad_norm: 0 }])).toBeNull();
    expect(cutNode(report())).toBe('n3');
    expect(cutNode({ ...report(), zero: [] })).toBeNull();
  });
});
