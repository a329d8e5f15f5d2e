// vv.watch(step, flow=True)'s backward flow in the panel: the chain from the loss to
// the input at the step the slider picks, each block coloured by its cotangent gain,
// a non-finite one marked, the kernel's "could not check" said; names stay text.
import { JSONObject } from '@lumino/coreutils';

import { WatchSeries } from '../protocol';
import { chain, gainColour } from '../panels/watches/flow';
import { WatchPlot } from '../panels/watches/plot';
import { modelOnKernel } from './fakes';

const HOSTILE = "['<img src=x onerror=alert(1)>']";

function series(flow: WatchSeries['flow']): WatchSeries {
  return {
    id: 'w1',
    steps: 3,
    stayed: 3,
    points: [0, 1, 2],
    lines: [{ group: '.layers[0]', norms: [1, 1, 1] }],
    events: [],
    kept_steps: [2],
    flow
  };
}

const FLOW = {
  blocks: ['.layers[0]', HOSTILE, '.out'],
  norm: [
    [4, 40, null],
    [2, 2, 1],
    [1, 1, 1]
  ],
  finite_fraction: [
    [1, 1, 0.5],
    [1, 1, 1],
    [1, 1, 1]
  ],
  note: null
};

const push = (s: WatchSeries): JSONObject =>
  ({ v: 1, type: 'watch', watch: s }) as unknown as JSONObject;

describe('the backward flow', () => {
  it('chains the blocks from the loss to the input with their gains', () => {
    expect(chain(FLOW, 1)).toEqual([
      { block: '.out', norm: 1, gain: null, finite: true },
      { block: HOSTILE, norm: 2, gain: 2, finite: true },
      { block: '.layers[0]', norm: 40, gain: 20, finite: true }
    ]);
    const bad = chain(FLOW, 2)[2];
    expect(bad).toEqual({
      block: '.layers[0]',
      norm: null,
      gain: null,
      finite: false
    });
    expect(gainColour(bad)).toBe('rgb(214, 39, 40)');
    // a decade or more of growth is full orange, of shrinking full blue; none is grey
    expect(gainColour(chain(FLOW, 1)[2])).toBe('rgba(255, 127, 14, 0.85)');
    expect(gainColour({ ...chain(FLOW, 1)[2], gain: 0.01 })).toBe(
      'rgba(31, 119, 180, 0.85)'
    );
    expect(gainColour(chain(FLOW, 1)[0])).toBe('rgba(127, 127, 127, 0.25)');
  });

  it('draws the chain at the step the slider picks, kept across pushes', () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    const comm = kernel.open(push(series(FLOW)));
    const links = () =>
      Array.from(plot.node.querySelectorAll('.jp-Vjpviz-flowLink'), li => [
        li.querySelector('.jp-Vjpviz-flowBlock')?.textContent ?? li.textContent,
        li.classList.contains('jp-mod-nonfinite')
      ]);
    expect(links()).toEqual([
      ['loss', false],
      ['.out', false],
      [HOSTILE, false],
      ['.layers[0]', true]
    ]);
    expect(plot.node.querySelector('img')).toBeNull();
    const slider = plot.node.querySelector(
      'input.jp-Vjpviz-flowStep'
    ) as HTMLInputElement;
    expect(slider.max).toBe('2');
    slider.value = '1';
    slider.dispatchEvent(new Event('input'));
    expect(links()[3]).toEqual(['.layers[0]', false]);
    expect(
      plot.node.querySelector('.jp-Vjpviz-flowStepLabel')!.textContent
    ).toBe(' step 1');
    comm.receive(push({ ...series(FLOW), steps: 4 }));
    const again = plot.node.querySelector(
      'input.jp-Vjpviz-flowStep'
    ) as HTMLInputElement;
    expect(again.value).toBe('1');
  });

  it('says could not check where the kernel could not tap the step, nothing without flow', () => {
    const { kernel, model } = modelOnKernel();
    const plot = new WatchPlot(model.watches);
    kernel.open(
      push(
        series({
          blocks: [],
          norm: [],
          finite_fraction: [],
          note: 'needs JAX 0.12.1'
        })
      )
    );
    expect(plot.node.querySelector('.jp-Vjpviz-flowNote')!.textContent).toBe(
      'could not check: needs JAX 0.12.1'
    );
    kernel.open(push(series(undefined)));
    expect(
      plot.node.querySelector('.jp-Vjpviz-watchFlow')!.childElementCount
    ).toBe(0);
  });
});
