/**
 * vv.grads in the panel: a report's headline, the leaves with no gradient (why, and the
 * user's line that cut it), the units with none, the gradient norm per block against
 * depth (log scale, flagged blocks marked ✖ and listed with why), and the report's graph,
 * each edge coloured by its measured cotangent norm. Every name the kernel sends (a
 * pytree path, a line, a scope) is set as text.
 */
import { Panel, Widget } from '@lumino/widgets';

import { GraphView } from '../../graphView';
import { placeElement, placeOf } from '../../places';
import { GradLayer, GradReport, Place } from '../../protocol';
import { label, svgElement, titled } from '../../svgElements';
import { IGradsModel, IVjpviz } from '../../tokens';

const WIDTH = 320;
const HEIGHT = 110;
const MARGIN = { left: 40, right: 8, top: 8, bottom: 18 };

/**
 * The node a report's graph centres on: its first cut's.
 */
export function cutNode(report: GradReport): string | null {
  return report.zero.find(z => z.node)?.node ?? null;
}

/**
 * The panel's section of vv.grads reports of the followed kernel: the newest
 * shown, an older one picked from a list.
 */
export class GradsView extends Panel {
  constructor(
    private readonly _model: IGradsModel,
    private readonly _graphs: Pick<IVjpviz, 'graphRequests'>,
    private readonly _goTo: (place: Place) => void = () => undefined
  ) {
    super();
    this.addClass('jp-Vjpviz-grads');
    this._summary = new Widget();
    this._summary.addClass('jp-Vjpviz-gradsSummary');
    this.addWidget(this._summary);
    _model.changed.connect(this._render, this);
    this._render();
  }

  /**
   * Resolves once the report shown last has its graph drawn.
   */
  get drawn(): Promise<void> {
    return this._drawn;
  }

  /**
   * Show another of the kept reports.
   */
  select(id: string): void {
    this._selected = id;
    this._render();
  }

  private _render(): void {
    const reports = this._model.items;
    this.setHidden(!reports.length);
    // By identity, not id: another kernel (or this one restarted) counts from g1 again.
    const newest = reports[reports.length - 1] ?? null;
    if (newest !== this._newest) {
      this._newest = newest; // a new report: show it
      this._selected = null;
    }
    const shown = reports.find(r => r.id === this._selected) ?? newest;
    const node = this._summary.node;
    node.textContent = '';
    if (!shown) {
      return;
    }
    node.append(this._picker(reports, shown), ...summary(shown, this._goTo));
    if (shown !== this._graphOf) {
      this._graphOf = shown;
      this._drawn = this._graphView().load(
        shown.graph.nodes ?? [],
        cutNode(shown),
        this._graphs.graphRequests(shown.id),
        shown.places
      );
    }
  }

  /**
   * The report's graph view, made with the first report: a panel without reports has
   * one graph, the diagnosis's.
   */
  private _graphView(): GraphView {
    if (!this._graph) {
      this._graph = new GraphView();
      this.addWidget(this._graph);
    }
    return this._graph;
  }

  private _picker(
    reports: readonly GradReport[],
    shown: GradReport
  ): HTMLElement {
    const h = document.createElement('h4');
    h.className = 'jp-Vjpviz-gradsHeadline';
    if (reports.length < 2) {
      h.textContent = shown.headline;
      return h;
    }
    const select = document.createElement('select');
    select.className = 'jp-Vjpviz-gradsPick jp-mod-styled';
    select.setAttribute('aria-label', 'vv.grads report shown');
    for (const r of [...reports].reverse()) {
      const option = document.createElement('option');
      option.value = r.id;
      option.textContent = r.headline;
      option.selected = r.id === shown.id;
      select.append(option);
    }
    select.onchange = () => this.select(select.value);
    h.append(select);
    return h;
  }

  private _summary: Widget;
  private _graph: GraphView | null = null;
  private _selected: string | null = null;
  private _newest: GradReport | null = null;
  private _graphOf: GradReport | null = null;
  private _drawn: Promise<void> = Promise.resolve();
}

/**
 * What a report says, as elements: its note, the zero and partly zero leaves (the
 * line that cut one a link to its cell), the depth plot and the flagged blocks.
 */
function summary(r: GradReport, goTo: (place: Place) => void): HTMLElement[] {
  const parts: HTMLElement[] = [];
  if (r.note) {
    parts.push(paragraph(`note: ${r.note}`, 'jp-Vjpviz-gradsNote'));
  }
  if (r.zero.length) {
    parts.push(
      table(
        'jp-Vjpviz-gradsZero',
        ['leaf', 'reason', 'cut at', 'line'],
        r.zero.map(z => [
          leafPath(z.path),
          z.reason,
          (z.op ?? '') + (z.factor ? ` (${z.factor} all zero)` : ''),
          z.source ? placeElement(placeOf(r.places, z.source)!, goTo) : ''
        ])
      )
    );
  }
  if (r.partly_zero.length) {
    parts.push(
      table(
        'jp-Vjpviz-gradsPartly',
        ['leaf', 'no gradient', 'reason'],
        r.partly_zero.map(p => [
          leafPath(p.path),
          `${Math.round(p.fraction * 100)}% of ${p.units}`,
          p.alarm ? p.reason : `${p.reason} (no alarm)`
        ])
      )
    );
  }
  const plot = depthPlot(r.layers);
  if (plot) {
    const figure = document.createElement('figure');
    figure.className = 'jp-Vjpviz-gradsDepth';
    figure.append(plot);
    parts.push(figure);
  }
  for (const layer of r.layers.filter(l => l.flag)) {
    parts.push(
      paragraph(
        `✖ ${layer.name} ${layer.flag}: ${layer.why ?? ''}`,
        'jp-Vjpviz-gradsFlag'
      )
    );
  }
  return parts;
}

/**
 * A leaf's path that a narrow panel breaks only between its keys (`['params']`,
 * `.layers[2]`): a `<wbr>` before each, the keys themselves text.
 */
export function leafPath(path: string): HTMLElement {
  const code = document.createElement('span');
  code.className = 'jp-Vjpviz-leafPath';
  path.split(/(?=[[.])/).forEach((key, i) => {
    if (i) {
      code.append(document.createElement('wbr'));
    }
    code.append(key);
  });
  return code;
}

function paragraph(text: string, className: string): HTMLElement {
  const p = document.createElement('p');
  p.className = className;
  p.textContent = text;
  return p;
}

function table(
  className: string,
  header: string[],
  rows: (string | HTMLElement)[][]
): HTMLElement {
  const t = document.createElement('table');
  t.className = `jp-Vjpviz-gradsTable ${className}`;
  const head = t.createTHead().insertRow();
  for (const h of header) {
    const th = document.createElement('th');
    th.textContent = h;
    head.append(th);
  }
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const cell of row) {
      tr.insertCell().append(cell); // a string is appended as text
    }
  }
  return t;
}

/**
 * The gradient norm per block against depth, log scale, each block a dot titled with
 * its name and norms, a flagged one marked ✖ (colour is never the only cue); null
 * under two blocks with a gradient.
 */
export function depthPlot(layers: readonly GradLayer[]): SVGSVGElement | null {
  const shown = layers.filter(
    (l): l is GradLayer & { grad_norm: number } =>
      l.grad_norm !== null && l.grad_norm > 0
  );
  if (shown.length < 2) {
    return null;
  }
  const logs = shown.map(l => Math.log10(l.grad_norm));
  const top = Math.max(...logs);
  const bottom = Math.min(...logs);
  const x = (k: number) =>
    MARGIN.left +
    (k / (shown.length - 1)) * (WIDTH - MARGIN.left - MARGIN.right);
  const y = (v: number) =>
    MARGIN.top +
    ((top - v) / (top - bottom || 1)) * (HEIGHT - MARGIN.top - MARGIN.bottom);
  const root = svgElement('svg', {
    width: WIDTH,
    height: HEIGHT,
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: 'jp-Vjpviz-depthPlot'
  });
  const axes = svgElement('g', { 'font-size': 9 });
  axes.append(
    label(`‖g‖ 1e${Math.round(top)}`, MARGIN.left - 3, y(top) + 3, 'end'),
    label(`1e${Math.round(bottom)}`, MARGIN.left - 3, y(bottom) + 3, 'end'),
    label('depth →', MARGIN.left, HEIGHT - 4, 'start')
  );
  root.append(axes);
  root.append(
    svgElement('polyline', {
      points: logs
        .map((v, k) => `${x(k).toFixed(1)},${y(v).toFixed(1)}`)
        .join(' '),
      fill: 'none',
      stroke: 'currentColor',
      'stroke-opacity': 0.6
    })
  );
  shown.forEach((l, k) => {
    const cx = x(k);
    const cy = y(logs[k]);
    const ratio = l.ratio === null ? '' : `  ‖g‖/‖w‖ ${l.ratio.toPrecision(3)}`;
    const dot = svgElement('circle', {
      cx: cx.toFixed(1),
      cy: cy.toFixed(1),
      r: 3,
      class: `jp-Vjpviz-depthDot${l.flag ? ' jp-mod-flagged' : ''}`
    });
    root.append(
      titled(
        dot,
        `${l.name}: ‖g‖ ${l.grad_norm.toPrecision(3)}  ‖w‖ ` +
          `${l.param_norm === null ? '-' : l.param_norm.toPrecision(3)}${ratio}` +
          (l.flag ? `  ✖ ${l.flag}` : '')
      )
    );
    if (l.flag) {
      root.append(label('✖', cx + 4, cy - 4, 'start'));
    }
  });
  return root;
}
