// vv.watch's series through the real channels into the model (no DOM there),
// and the panel's plot drawn from it: names stay text, the vv.nans button asks.
import { JSONObject } from '@lumino/coreutils';

import { WatchSeries } from '../protocol';
import { WatchPlot } from '../panels/watches/plot';
import { blockEvents } from '../panels/watches/events';
import {
  body,
  answerHistory,
  forbidDom,
  kernelWithControl,
  modelOnKernel,
  reply
} from './fakes';

const HOSTILE = "['<img src=x onerror=alert(1)>']";

function series(id = 'w1', steps = 6): WatchSeries {
  return {
    id,
    steps,
    stayed: 3,
    points: [0, 1, 2, 3, 4, 5],
    lines: [
      { group: "['Dense_0']", norms: [2, 1.5, 1, 0.5, 0.4, null] },
      { group: HOSTILE, norms: [0.3, 0.2, 0.1, 0, 0, 0] }
    ],
    events: [
      {
        step: 3,
        path: HOSTILE,
        leaves: 2,
        kind: 'stayed_zero',
        text: `step 3: ${HOSTILE} (2 leaves): no gradient, for 3+ steps`
      },
      {
        step: 5,
        path: "['Dense_0']['kernel']",
        leaves: 1,
        kind: 'first_nonfinite',
        text: "step 5: ['Dense_0']['kernel']: non-finite"
      }
    ],
    kept_steps: [5]
  };
}

const push = (s: WatchSeries): JSONObject =>
  ({ v: 1, type: 'watch', watch: s }) as unknown as JSONObject;

describe('the model keeps watches', () => {
  forbidDom();

  it('keeps each watch once, the newest push of it, per kernel', () => {
    const { kernel, model } = modelOnKernel();
    let changes = 0;
    model.watches.changed.connect(() => changes++);
    const comm = kernel.open(push(series('w1', 6)));
    comm.receive(push(series('w2', 6)));
    comm.receive(push({ ...series('w1', 7) }));
    expect(model.watches.items.map(w => [w.id, w.steps])).toEqual([
      ['w1', 7],
      ['w2', 6]
    ]);
    expect(changes).toBe(3);
    model.follow({ kernelId: 'k2' });
    expect(model.watches.items).toEqual([]);
    model.follow({ kernelId: 'k1' });
    kernel.statusChanged.emit('restarting');
    expect(model.watches.items).toEqual([]);
  });

  it('asks for the watches once the history is loaded (a panel opened late)', async () => {
    const { kernel, control, opened } = kernelWithControl();
    const { model } = modelOnKernel(kernel);
    await answerHistory(control, opened);
    expect(control.sent[0]).toMatchObject({ op: 'watch', args: {} });
    reply(control, { watches: [series('w3')] } as unknown as JSONObject);
    await new Promise(r => setTimeout(r, 0));
    expect(model.watches.items.map(w => w.id)).toEqual(['w3']);
  });

  it('drops a watch push that breaks the schema', () => {
    const { kernel, model } = modelOnKernel();
    jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    kernel.open(push({ ...series(), points: 'all' } as unknown as WatchSeries));
    expect(model.watches.items).toEqual([]);
  });

  it('asks for the series and runs vv.nans on a step, its diagnosis selected', async () => {
    const { kernel, model } = modelOnKernel();
    const comm = kernel.open(push(series()));
    const refreshed = model.watches.refresh();
    expect(comm.sent[comm.sent.length - 1]).toMatchObject({
      op: 'watch',
      args: {}
    });
    reply(comm, { watches: [series('w1', 9)] } as unknown as JSONObject);
    await refreshed;
    expect(model.watches.items[0].steps).toBe(9);

    const ran = model.watches.nans('w1', 5);
    expect(comm.sent[comm.sent.length - 1]).toMatchObject({
      op: 'watch_nans',
      args: { watch_id: 'w1', step: 5 }
    });
    reply(comm, { summary: 'sqrt at 0', diagnosis: body(4) });
    expect(await ran).toBe('sqrt at 0');
    expect(model.diagnoses.current?.id).toBe('d4');
  });
});

describe("a watch's first event", () => {
  forbidDom();

  it('is announced once (the panel shows itself), not every push after', () => {
    const { kernel, model } = modelOnKernel();
    const arrived: number[] = [];
    model.watches.arrived.connect((_, { item }) => arrived.push(item.steps));
    const quiet = { ...series('w1', 2), events: [] };
    const comm = kernel.open(push(quiet));
    comm.receive(push(series('w1', 6)));
    comm.receive(push(series('w1', 7)));
    expect(arrived).toEqual([6]);
  });
});

describe('WatchPlot', () => {
  it('draws one line per layer and lists the events, names as text', () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    expect(plot.isHidden).toBe(true);
    kernel.open(push(series()));
    const node = plot.node;
    expect(plot.isHidden).toBe(false);
    expect(node.querySelectorAll('path.jp-Vjpviz-watchLine')).toHaveLength(2);
    expect(node.querySelectorAll('line.jp-Vjpviz-watchMark')).toHaveLength(2);
    // A non-finite norm breaks its line: two M pens would mean a gap; this one ends there.
    const first = node.querySelector('path')!.getAttribute('d')!;
    expect(first.match(/[ML]/g)).toEqual(['M', 'L', 'L', 'L', 'L']);
    const items = Array.from(node.querySelectorAll('li'), li =>
      li.firstChild!.textContent!.trim()
    );
    // One line per event, as the kernel words it, under its block (in the lines' order).
    expect(items).toEqual([
      "step 5: ['Dense_0']['kernel']: non-finite",
      `step 3: ${HOSTILE} (2 leaves): no gradient, for 3+ steps`
    ]);
    const blocks = Array.from(
      node.querySelectorAll('.jp-Vjpviz-watchBlockName'),
      b => b.textContent
    );
    expect(blocks).toEqual(["['Dense_0']", HOSTILE]);
    expect(node.querySelector('.jp-Vjpviz-watchUnchecked')).toBeNull();
    expect(node.querySelector('img')).toBeNull();
    expect(node.textContent).toContain(HOSTILE);
    expect(node.querySelectorAll('button.jp-Vjpviz-watchNans')).toHaveLength(1);
  });

  it("tables the step's logs at the last step drawn, names as text", () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    kernel.open(push(series()));
    expect(plot.node.querySelectorAll('.jp-Vjpviz-watchLogs tr')).toHaveLength(
      0
    );
    const nan = [1, 1, 1, 1, 1, null];
    kernel.open(
      push({
        ...series(),
        logs: [
          {
            name: 'gnorm',
            mean: [1, 2, 3, 4, 5, 6],
            min: nan,
            max: [1, 2, 3, 4, 5, 6.5]
          },
          { name: HOSTILE, mean: nan, min: nan, max: nan }
        ]
      })
    );
    const rows = Array.from(
      plot.node.querySelectorAll('.jp-Vjpviz-watchLogs tr'),
      tr => Array.from(tr.children, c => c.textContent)
    );
    expect(rows).toEqual([
      ['log, step 5', 'mean', 'min', 'max'],
      ['gnorm', '6.000', 'non-finite', '6.500'],
      [HOSTILE, 'non-finite', 'non-finite', 'non-finite']
    ]);
    expect(plot.node.querySelector('img')).toBeNull();
  });

  it("says on the button whether the kernel keeps that step's arguments", () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    const button = () =>
      plot.node.querySelector('button.jp-Vjpviz-watchNans') as HTMLElement;
    kernel.open(push(series()));
    expect(button().title).toBe("run vv.nans on step 5's call in the kernel");
    expect(button().textContent).toBe('vv.nans on step 5');
    expect((button() as HTMLButtonElement).disabled).toBe(false);
    kernel.open(push({ ...series(), kept_steps: [2, 9] }));
    expect(button().textContent).toBe('step 5 not kept');
    expect((button() as HTMLButtonElement).disabled).toBe(true);
    expect(button().title).toContain('(it keeps steps 2, 9)');
    expect(button().title).toContain('keep_first_nonfinite=True');
  });

  it("runs vv.nans from a non-finite event's button and says what it found", async () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    const comm = kernel.open(push(series()));
    (
      plot.node.querySelector('button.jp-Vjpviz-watchNans') as HTMLElement
    ).click();
    expect(comm.sent[comm.sent.length - 1]).toMatchObject({
      op: 'watch_nans',
      args: { watch_id: 'w1', step: 5 }
    });
    comm.receive({
      v: 1,
      type: 'reply',
      request_id: comm.sent[comm.sent.length - 1].request_id,
      ok: false,
      error: `step 5's arguments are no longer kept <b>x</b>`
    });
    await new Promise(resolve => setTimeout(resolve, 0));
    const status = plot.node.querySelector('.jp-Vjpviz-watchNansStatus')!;
    expect(status.textContent).toContain('<b>x</b>');
    expect(status.querySelector('b')).toBeNull();
  });
});

describe("the events per block under a watch's plot", () => {
  // Two layers drawn as lines, the backward flow over them: layers[1]'s output
  // cotangent goes non-finite at step 5, layers[0]'s vanishes from step 4.
  const flowing = (): WatchSeries => ({
    ...series(),
    lines: [
      { group: "['layers'][0]", norms: [1, 1, 1, 1, 0, null] },
      { group: "['layers'][1]", norms: [1, 1, 1, 1, 1, null] }
    ],
    events: [
      {
        step: 5,
        path: "['layers'][1]",
        leaves: 2,
        kind: 'first_nonfinite',
        text: "step 5: ['layers'][1] (2 leaves): non-finite"
      },
      {
        step: 4,
        path: "['layers'][0]['w']",
        leaves: 1,
        kind: 'first_zero',
        text: "step 4: ['layers'][0]['w']: no gradient"
      }
    ],
    flow: {
      blocks: ["['layers'][0]", "['layers'][1]", HOSTILE],
      norm: [
        [1, 1, 1, 1, 0, 0],
        [2, 2, 2, 2, 2, null],
        [3, 3, 3, 3, 3, 3]
      ],
      finite_fraction: [
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 0.5],
        [1, 1, 1, 1, 1, 1]
      ],
      note: null
    }
  });

  it("files the kernel's and the flow's events under each block, in step order", () => {
    const [nonfinite, zero] = flowing().events;
    expect(blockEvents(flowing())).toEqual([
      {
        block: "['layers'][0]",
        line: 0,
        events: [
          zero,
          {
            step: 4,
            kind: 'cotangent_zero',
            text: "step 4: ['layers'][0]'s output cotangent vanished (all zero)"
          }
        ]
      },
      {
        block: "['layers'][1]",
        line: 1,
        events: [
          nonfinite,
          {
            step: 5,
            kind: 'cotangent_nonfinite',
            text: "step 5: ['layers'][1]'s output cotangent went non-finite"
          }
        ]
      }
    ]);
    // A flow that could not be tapped adds no event (and no all-clear: flow.ts says why).
    const untapped = flowing();
    untapped.flow = {
      blocks: [],
      norm: [],
      finite_fraction: [],
      note: 'no grad'
    };
    expect(blockEvents(untapped).map(b => b.events.length)).toEqual([1, 1]);
  });

  it('files an event under its own line, not one its path merely starts with', () => {
    const tenth = "['layers'][10]['w']";
    const s = {
      ...flowing(),
      flow: undefined,
      events: [{ ...flowing().events[1], path: tenth, text: tenth }]
    };
    expect(blockEvents(s).map(b => [b.block, b.line])).toEqual([[tenth, null]]);
  });

  it('draws them under the plot and legend, each block under its colour', () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    kernel.open(push(flowing()));
    const section = plot.node.querySelector('.jp-Vjpviz-watchSeries')!;
    const order = Array.from(section.children, c => c.className);
    expect(order.indexOf('jp-Vjpviz-watchEvents')).toBe(
      order.indexOf('jp-Vjpviz-watchLegend') + 1
    );
    const parts = Array.from(
      section.querySelectorAll('.jp-Vjpviz-watchBlockEvents'),
      part => [
        part.querySelector('.jp-Vjpviz-watchBlockName')!.textContent,
        part.querySelectorAll('.jp-Vjpviz-watchSwatch').length,
        Array.from(part.querySelectorAll('li'), li => li.className)
      ]
    );
    expect(parts).toEqual([
      [
        "['layers'][0]",
        1,
        [
          'jp-Vjpviz-watchEvent jp-mod-first_zero',
          'jp-Vjpviz-watchEvent jp-mod-cotangent_zero'
        ]
      ],
      [
        "['layers'][1]",
        1,
        [
          'jp-Vjpviz-watchEvent jp-mod-first_nonfinite',
          'jp-Vjpviz-watchEvent jp-mod-cotangent_nonfinite'
        ]
      ]
    ]);
    expect(section.querySelectorAll('button.jp-Vjpviz-watchNans')).toHaveLength(
      1
    );
  });

  it('says a watch that stopped checking could not check, and why', () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    kernel.open(push({ ...series(), unchecked: 'could not trace <b>it</b>' }));
    const note = plot.node.querySelector('.jp-Vjpviz-watchUnchecked')!;
    expect(note.textContent).toBe('could not check: could not trace <b>it</b>');
    expect(note.querySelector('b')).toBeNull();
  });
});
