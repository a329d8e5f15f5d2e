/**
 * vv.watch in the panel: each watch's gradient norms against its steps (one
 * line per layer, log scale), its events marked on the plot and listed per
 * block under it (events.ts), a non-finite one with a button that runs vv.nans
 * on that step in the kernel, the backward flow (vv.watch(step, flow=True),
 * flow.ts), and the gradient logs the step returned (vv.watch(step, logs=...))
 * as a table of their last drawn step; a watch that stopped checking says why.
 * Drawn as SVG elements from numbers; every name (a pytree path, a log's key)
 * is set as text.
 */
import { Widget } from '@lumino/widgets';

import { WatchSeries } from '../../protocol';
import { label, svgElement as svg, titled } from '../../svgElements';
import { IWatchesModel } from '../../tokens';
import { blockEvents } from './events';
import { flowView } from './flow';

const WIDTH = 320;
const HEIGHT = 140;
const MARGIN = { left: 40, right: 8, top: 8, bottom: 18 };
const COLOURS = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf'
];

/**
 * The panel's section of vv.watch plots, one per watch of the followed kernel.
 */
export class WatchPlot extends Widget {
  private readonly _flowAt = new Map<string, number>(); // where each slider was left

  constructor(private readonly _model: IWatchesModel) {
    super();
    this.addClass('jp-Vjpviz-watch');
    _model.changed.connect(this.render, this);
    this.render();
  }

  /**
   * Draw the model's watches (hidden when there are none).
   */
  render(): void {
    const watches = this._model.items;
    this.node.textContent = '';
    this.setHidden(!watches.length);
    for (const series of watches) {
      this.node.append(this._section(series));
    }
  }

  private _section(series: WatchSeries): HTMLElement {
    const section = document.createElement('section');
    section.className = 'jp-Vjpviz-watchSeries';
    const h = document.createElement('h4');
    h.textContent = `vv.watch ${series.id}: ${series.steps} step${series.steps === 1 ? '' : 's'}`;
    const refresh = document.createElement('button');
    refresh.className = 'jp-Vjpviz-watchRefresh';
    refresh.textContent = 'Refresh';
    refresh.onclick = () => void this._model.refresh();
    h.append(' ', refresh);
    section.append(h);
    if (series.unchecked !== undefined) {
      const note = document.createElement('p');
      note.className = 'jp-Vjpviz-watchUnchecked';
      note.textContent = `could not check: ${series.unchecked}`;
      section.append(note);
    }
    section.append(
      plot(series),
      legend(series),
      this._events(series),
      flowView(series, this._flowAt.get(series.id), at =>
        this._flowAt.set(series.id, at)
      ),
      logs(series)
    );
    return section;
  }

  /**
   * The events per block (events.ts), each block under its line's colour.
   */
  private _events(series: WatchSeries): HTMLElement {
    const node = document.createElement('div');
    node.className = 'jp-Vjpviz-watchEvents';
    for (const block of blockEvents(series)) {
      const part = document.createElement('div');
      part.className = 'jp-Vjpviz-watchBlockEvents';
      const name = document.createElement('span');
      name.className = 'jp-Vjpviz-watchBlockName';
      if (block.line !== null) {
        name.append(swatch(block.line));
      }
      name.append(block.block);
      const list = document.createElement('ul');
      for (const e of block.events) {
        const li = document.createElement('li');
        li.className = `jp-Vjpviz-watchEvent jp-mod-${e.kind}`;
        li.textContent = e.text; // the kernel words it (watch.py BlockEvent)
        if (e.kind === 'first_nonfinite') {
          li.append(' ', this._nansButton(series, e.step));
        }
        list.append(li);
      }
      part.append(name, list);
      node.append(part);
    }
    return node;
  }

  private _nansButton(series: WatchSeries, step: number): HTMLElement {
    const button = document.createElement('button');
    button.className = 'jp-Vjpviz-watchNans';
    const kept = series.kept_steps.includes(step);
    button.textContent = kept
      ? `vv.nans on step ${step}`
      : `step ${step} not kept`;
    button.disabled = !kept;
    button.title = kept
      ? `run vv.nans on step ${step}'s call in the kernel`
      : `the kernel did not keep step ${step}'s arguments (it keeps steps ` +
        `${series.kept_steps.join(', ') || 'none'}): vv.watch(step, ` +
        'keep_first_nonfinite=True) keeps the first non-finite one for sure';
    const status = document.createElement('span');
    status.className = 'jp-Vjpviz-watchNansStatus';
    button.onclick = async () => {
      button.disabled = true;
      status.textContent = ' running vv.nans…';
      try {
        status.textContent = ` ${await this._model.nans(series.id, step)}`;
      } catch (error) {
        status.textContent = ` ${(error as Error).message}`;
      } finally {
        button.disabled = false;
      }
    };
    const both = document.createElement('span');
    both.append(button, status);
    return both;
  }
}

/**
 * The norms against the steps, log scale: a zero is drawn on the floor (a
 * decade below the smallest norm), a non-finite one breaks its line; each
 * event is a vertical mark at its step.
 */
function plot(series: WatchSeries): SVGSVGElement {
  const root = svg('svg', {
    width: WIDTH,
    height: HEIGHT,
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: 'jp-Vjpviz-watchPlot'
  });
  const positive = ([] as number[]).concat(
    ...series.lines.map(l =>
      l.norms.filter((n): n is number => n !== null && n > 0)
    )
  );
  const top = Math.log10(Math.max(...positive, 1));
  const floor = Math.log10(Math.min(...positive, 1)) - 1;
  const last = Math.max(series.steps - 1, 1);
  const x = (step: number) =>
    MARGIN.left + (step / last) * (WIDTH - MARGIN.left - MARGIN.right);
  const y = (norm: number) =>
    MARGIN.top +
    ((top - (norm > 0 ? Math.log10(norm) : floor)) / (top - floor || 1)) *
      (HEIGHT - MARGIN.top - MARGIN.bottom);
  root.append(axes(top, floor, series.steps, y));
  for (const e of series.events) {
    const at = x(e.step).toFixed(1);
    root.append(
      titled(
        svg('line', {
          x1: at,
          x2: at,
          y1: MARGIN.top,
          y2: HEIGHT - MARGIN.bottom,
          class: `jp-Vjpviz-watchMark jp-mod-${e.kind}`
        }),
        e.text
      )
    );
  }
  series.lines.forEach((line, i) => {
    let d = '';
    let pen = 'M';
    line.norms.forEach((norm, k) => {
      if (norm === null) {
        pen = 'M';
        return;
      }
      d += `${pen}${x(series.points[k]).toFixed(1)},${y(norm).toFixed(1)}`;
      pen = 'L';
    });
    root.append(
      titled(
        svg('path', {
          d,
          fill: 'none',
          stroke: COLOURS[i % COLOURS.length],
          'stroke-width': 1.5,
          class: 'jp-Vjpviz-watchLine'
        }),
        line.group
      )
    );
  });
  return root;
}

function axes(
  top: number,
  floor: number,
  steps: number,
  y: (norm: number) => number
): SVGGElement {
  const g = svg('g', { class: 'jp-Vjpviz-watchAxes', 'font-size': 9 });
  g.append(
    label(`1e${Math.round(top)}`, MARGIN.left - 3, y(10 ** top) + 3, 'end'),
    label('0', MARGIN.left - 3, y(0) + 3, 'end'),
    label('step 0', MARGIN.left, HEIGHT - 4, 'start'),
    label(`${Math.max(steps - 1, 0)}`, WIDTH - MARGIN.right, HEIGHT - 4, 'end'),
    svg('rect', {
      x: MARGIN.left,
      y: MARGIN.top,
      width: WIDTH - MARGIN.left - MARGIN.right,
      height: HEIGHT - MARGIN.top - MARGIN.bottom,
      fill: 'none',
      stroke: 'currentColor',
      'stroke-opacity': 0.3
    })
  );
  return g;
}

/**
 * Each log's mean, min and max at the last step drawn, one row per log (an
 * empty node without logs); a non-finite value reads "non-finite".
 */
function logs(series: WatchSeries): HTMLElement {
  const table = document.createElement('table');
  table.className = 'jp-Vjpviz-watchLogs';
  const found = series.logs ?? [];
  const at = series.points.length - 1;
  if (!found.length || at < 0) {
    return table;
  }
  const row = (cells: string[], tag: 'th' | 'td') => {
    const tr = document.createElement('tr');
    for (const text of cells) {
      const cell = document.createElement(tag);
      cell.textContent = text;
      tr.append(cell);
    }
    return tr;
  };
  const shown = (v: number | null) =>
    v === null ? 'non-finite' : v.toPrecision(4);
  table.append(
    row([`log, step ${series.points[at]}`, 'mean', 'min', 'max'], 'th'),
    ...found.map(l =>
      row([l.name, shown(l.mean[at]), shown(l.min[at]), shown(l.max[at])], 'td')
    )
  );
  return table;
}

function legend(series: WatchSeries): HTMLElement {
  const list = document.createElement('div');
  list.className = 'jp-Vjpviz-watchLegend';
  series.lines.forEach((line, i) => {
    const item = document.createElement('span');
    item.className = 'jp-Vjpviz-watchLegendItem';
    item.append(swatch(i), line.group);
    list.append(item);
  });
  return list;
}

function swatch(line: number): HTMLElement {
  const node = document.createElement('span');
  node.className = 'jp-Vjpviz-watchSwatch';
  node.style.background = COLOURS[line % COLOURS.length];
  return node;
}
