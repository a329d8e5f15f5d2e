import { Widget } from '@lumino/widgets';
import panzoom, { PanZoom } from 'panzoom';

import { mark } from './marks';
import { placeOf } from './places';
import { GraphNode, Places, View } from './protocol';
import { sanitizeSvg } from './sanitize';
import { IGraphRequests, IViewState } from './tokens';

const MIN_SCALE = 0.02;
const MAX_SCALE = 8;
/** Below this the failing node is zoomed to READABLE_SCALE when centred on. */
const LEGIBLE_SCALE = 0.6;
const READABLE_SCALE = 1;
/** Fit never blows a tiny graph up past this. */
const MAX_FIT_SCALE = 1.5;
/** Screen pixels left around the graph by fit. */
const FIT_PADDING = 12;
/** Marks the legend's frame, boxes and edges (left out of fit and of the keyboard). */
const LEGEND_CLASS = 'vjpviz-legend';

/**
 * The forward graph as sanitized SVG with pan/zoom (panzoom), node details,
 * expand/collapse, search, fit and centre-on-failure. In the sidebar it can
 * hand the graph to a main-area view (`openInMain`).
 */
export class GraphView extends Widget {
  constructor(options: { openInMain?: () => void } = {}) {
    super();
    this.addClass('jp-Vjpviz-graph');
    const bar = document.createElement('div');
    bar.className = 'jp-Vjpviz-graphBar';
    this._search = document.createElement('input');
    this._search.type = 'search';
    this._search.placeholder = 'Search nodes';
    this._search.className = 'jp-Vjpviz-search jp-mod-styled';
    this._search.setAttribute('aria-label', 'Search graph nodes');
    this._search.addEventListener('keydown', e => {
      if (e.key === 'Enter') {
        void this._runSearch();
      }
    });
    bar.appendChild(this._search);
    bar.appendChild(this._button('Fit', 'fit', () => this.fit()));
    bar.appendChild(
      this._button('Centre on failure', 'centre', () => this.centreOnFailure())
    );
    this._expandButton = this._button('Expand', 'expand', () =>
      this._expandSelected()
    );
    this._collapseButton = this._button('Collapse', 'collapse', () =>
      this._collapseSelected()
    );
    bar.append(this._expandButton, this._collapseButton);
    if (options.openInMain) {
      bar.appendChild(
        this._button('Open in main area', 'open-main', options.openInMain)
      );
    }
    this._status = document.createElement('span');
    this._status.className = 'jp-Vjpviz-graphStatus';
    bar.appendChild(this._status);
    this.node.appendChild(bar);

    this._note = document.createElement('p');
    this._note.className = 'jp-Vjpviz-graphNote';
    this.node.appendChild(this._note);

    this._viewport = document.createElement('div');
    this._viewport.className = 'jp-Vjpviz-viewport';
    this._viewport.tabIndex = 0;
    this._viewport.setAttribute('aria-label', 'Forward graph');
    this.node.appendChild(this._viewport);
    this._canvas = document.createElement('div');
    this._canvas.className = 'jp-Vjpviz-canvas';
    this._viewport.appendChild(this._canvas);
    this._panzoom = panzoom(this._canvas, {
      minZoom: MIN_SCALE,
      maxZoom: MAX_SCALE,
      smoothScroll: false,
      // Double-click expands and collapses: no zoom, and the event goes on.
      zoomDoubleClickSpeed: 1,
      onDoubleClick: () => false
    });
    this._panzoom.on('panstart', () => (this._dragged = true));
    this._panzoom.on('panend', () =>
      setTimeout(() => (this._dragged = false), 0)
    );

    this._details = document.createElement('div');
    this._details.className = 'jp-Vjpviz-nodeDetails';
    this.node.appendChild(this._details);

    this._viewport.addEventListener('click', this._onClick);
    this._viewport.addEventListener('dblclick', this._onDblClick);
    this._viewport.addEventListener('keydown', this._onKey);
    if (typeof ResizeObserver !== 'undefined') {
      // A graph drawn while the sidebar was collapsed is fitted once it shows.
      this._resizeObserver = new ResizeObserver(() => {
        if (this._pendingFit) {
          this.fit();
        }
      });
      this._resizeObserver.observe(this._viewport);
    }
  }

  dispose(): void {
    this._resizeObserver?.disconnect();
    this._resizeObserver = null;
    this._panzoom.dispose();
    super.dispose();
  }

  /**
   * Show the graph of a diagnosis (asks the kernel for the default view).
   */
  async load(
    nodes: readonly GraphNode[],
    failed: string | null,
    requests: IGraphRequests | null,
    places?: Places
  ): Promise<void> {
    this._nodes = new Map(nodes.map(n => [n.id, n]));
    this._places = places;
    this._failed = failed;
    this._requests = requests;
    this._state = { expanded: [], collapsed: [] };
    this._details.textContent = '';
    this.node.dataset.vjpvizGraph = 'loading';
    this._canvas.textContent = '';
    this._note.textContent = '';
    this._svg = null;
    this._updateButtons();
    if (!requests) {
      this._setStatus('Graph unavailable: no connection to the kernel.');
      return;
    }
    this._setStatus('Loading graph…');
    await this._show(() => requests.view(this._state), true);
  }

  /**
   * Scale the graph to fit the viewport: the graph's own nodes, edges and
   * frames, not the legend (which would shrink a small graph to a thumbnail).
   * While the viewport has no size (a collapsed sidebar) the fit waits for it.
   */
  fit(): void {
    const box = this._viewport.getBoundingClientRect();
    if (!this._svg || box.width === 0 || box.height === 0) {
      this._pendingFit = !!this._svg;
      return;
    }
    this._pendingFit = false;
    const c = this._contentBox();
    const pad = Math.min(FIT_PADDING, box.width / 8, box.height / 8);
    const scale = Math.min(
      (box.width - 2 * pad) / c.w,
      (box.height - 2 * pad) / c.h,
      MAX_FIT_SCALE
    );
    this._showAt(c.x + c.w / 2, c.y + c.h / 2, scale);
  }

  /**
   * Put the failing node in the middle of the viewport, at a readable scale.
   */
  centreOnFailure(): void {
    const el = this._canvas.querySelector('.vjpviz-node-failed');
    if (el) {
      this._centreOn(
        el,
        this.scale < LEGIBLE_SCALE ? READABLE_SCALE : this.scale
      );
    }
  }

  /**
   * The zoom the view is drawn at (1: the SVG's own pixels).
   */
  get scale(): number {
    return this._panzoom.getTransform().scale;
  }

  /**
   * Ask the kernel to open a box (a folded group or a call) in place.
   */
  expand(id: string): Promise<void> {
    return this._change(`Expanding ${id}…`, r => r.expand(id, this._state));
  }

  /**
   * Ask the kernel to fold an opened body back into its box.
   */
  collapse(id: string): Promise<void> {
    return this._change(`Collapsing ${id}…`, r => r.collapse(id, this._state));
  }

  /**
   * Show the view a request returns, saying what is being asked meanwhile.
   */
  private _change(
    status: string,
    ask: (requests: IGraphRequests) => Promise<View>
  ): Promise<void> {
    const requests = this._requests;
    if (!requests) {
      return Promise.resolve();
    }
    this._setStatus(status);
    return this._show(() => ask(requests), false);
  }

  private _button(
    label: string,
    action: string,
    onClick: () => void
  ): HTMLButtonElement {
    const b = document.createElement('button');
    b.className = 'jp-Button jp-mod-styled jp-mod-reject jp-Vjpviz-small';
    b.textContent = label;
    b.dataset.vjpvizAction = action;
    b.addEventListener('click', onClick);
    return b;
  }

  private _setStatus(text: string): void {
    this._status.textContent = text;
  }

  private async _show(
    get: () => Promise<View>,
    centre: boolean
  ): Promise<void> {
    const token = ++this._token;
    let view: View;
    try {
      mark('vjpviz:graph-requested');
      view = await get();
      mark('vjpviz:graph-received');
    } catch (error) {
      if (token === this._token) {
        this._setStatus(`Graph unavailable: ${(error as Error).message}`);
        this.node.dataset.vjpvizGraph = 'error';
      }
      return;
    }
    if (token !== this._token) {
      return;
    }
    this._render(view);
    if (centre) {
      this.fit();
      if (this.scale < 0.5) {
        this.centreOnFailure();
      }
    }
    mark('vjpviz:graph-shown');
  }

  private _render(view: View): void {
    const svg = typeof view.svg === 'string' ? sanitizeSvg(view.svg) : null;
    this._canvas.textContent = '';
    if (!svg) {
      this._setStatus('The kernel sent a graph that is not SVG.');
      return;
    }
    this._state = {
      expanded: Array.isArray(view.expanded) ? [...view.expanded] : [],
      collapsed: Array.isArray(view.collapsed) ? [...view.collapsed] : []
    };
    const failed = view.failed_node ?? this._failed;
    // Size in CSS px from the viewBox; transforms do the zooming.
    const vb = svg
      .getAttribute('viewBox')
      ?.split(/[\s,]+/)
      .map(Number);
    if (vb && vb.length === 4 && vb.every(n => isFinite(n))) {
      this._natural = { w: vb[2], h: vb[3] };
    } else {
      this._natural = {
        w: parseFloat(svg.getAttribute('width') ?? '') || 400,
        h: parseFloat(svg.getAttribute('height') ?? '') || 300
      };
    }
    svg.setAttribute('width', String(this._natural.w));
    svg.setAttribute('height', String(this._natural.h));
    svg.classList.add('jp-Vjpviz-svg');
    this._note.textContent = takeCaption(svg);
    markLegend(svg);
    for (const g of Array.from(svg.querySelectorAll('g.node'))) {
      if (g.classList.contains(LEGEND_CLASS)) {
        continue;
      }
      const id = nodeId(g);
      if (!id) {
        continue;
      }
      g.setAttribute('data-vjpviz-node', id);
      g.setAttribute('tabindex', '0');
      const info = this._nodes.get(id);
      if (info?.n_eqns && !this._state.expanded.includes(id)) {
        g.classList.add('vjpviz-expandable');
      }
      if (g.classList.contains('vjpviz-cluster')) {
        g.classList.add('vjpviz-expandable');
      }
      if (id === failed) {
        g.classList.add('vjpviz-node-failed');
      }
    }
    for (const g of Array.from(svg.querySelectorAll('g.cluster'))) {
      const id = g.getAttribute('id') ?? '';
      if (id.startsWith('body:')) {
        g.setAttribute('data-vjpviz-body', id.slice(5));
      }
    }
    this._svg = svg;
    this._canvas.appendChild(svg);
    this._updateButtons();
    this.node.dataset.vjpvizGraph = 'ready';
    const parts = [];
    if (view.total !== undefined) {
      parts.push(
        `${view.total} nodes` +
          (view.boxes !== undefined ? ` in ${view.boxes} boxes` : '')
      );
    }
    parts.push(
      'double-click ▸ to expand, a dashed frame to collapse; drag to pan, wheel to zoom'
    );
    this._setStatus(parts.join(' · '));
  }

  /**
   * The box of the graph without its legend, in the SVG's own (unscaled)
   * pixels; the whole SVG when there is nothing else to measure.
   */
  private _contentBox(): { x: number; y: number; w: number; h: number } {
    const whole = { x: 0, y: 0, w: this._natural.w, h: this._natural.h };
    const svg = this._svg;
    if (!svg) {
      return whole;
    }
    const origin = svg.getBoundingClientRect();
    // The zoom drawn now (panzoom applies its transform on the next frame).
    const scale = origin.width / this._natural.w || 1;
    let x0 = Infinity;
    let y0 = Infinity;
    let x1 = -Infinity;
    let y1 = -Infinity;
    for (const el of Array.from(
      svg.querySelectorAll('g.node, g.edge, g.cluster')
    )) {
      if (el.classList.contains(LEGEND_CLASS)) {
        continue;
      }
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) {
        continue;
      }
      x0 = Math.min(x0, r.left);
      y0 = Math.min(y0, r.top);
      x1 = Math.max(x1, r.right);
      y1 = Math.max(y1, r.bottom);
    }
    if (!(x1 > x0 && y1 > y0)) {
      return whole;
    }
    return {
      x: (x0 - origin.left) / scale,
      y: (y0 - origin.top) / scale,
      w: (x1 - x0) / scale,
      h: (y1 - y0) / scale
    };
  }

  /**
   * Zoom to `scale` with the point (x, y) of the SVG's own pixels in the middle.
   */
  private _showAt(x: number, y: number, scale: number): void {
    const box = this._viewport.getBoundingClientRect();
    const s = Math.min(MAX_SCALE, Math.max(MIN_SCALE, scale));
    const [w, h] = [box.width / s / 2, box.height / s / 2];
    this._panzoom.showRectangle({
      left: x - w,
      right: x + w,
      top: y - h,
      bottom: y + h
    } as DOMRect);
    this._panzoom.moveBy(0, 0, false); // draws the new transform
  }

  /**
   * Centre an element of the graph in the viewport at `scale`.
   */
  private _centreOn(el: Element, scale: number): void {
    if (!this._svg) {
      return;
    }
    const origin = this._svg.getBoundingClientRect();
    const drawn = origin.width / this._natural.w || 1;
    const r = el.getBoundingClientRect();
    this._showAt(
      (r.left + r.width / 2 - origin.left) / drawn,
      (r.top + r.height / 2 - origin.top) / drawn,
      scale
    );
  }

  private _selected(): Element | null {
    return this._canvas.querySelector('.vjpviz-node-selected');
  }

  private _updateButtons(): void {
    const g = this._selected();
    this._expandButton.disabled = !g?.classList.contains('vjpviz-expandable');
    this._collapseButton.disabled = !g?.closest('[data-vjpviz-body]');
  }

  private _expandSelected(): void {
    const g = this._selected();
    if (g?.classList.contains('vjpviz-expandable')) {
      void this.expand(g.getAttribute('data-vjpviz-node')!);
    }
  }

  private _collapseSelected(): void {
    const body = this._selected()?.closest('[data-vjpviz-body]');
    if (body) {
      void this.collapse(body.getAttribute('data-vjpviz-body')!);
    }
  }

  private async _runSearch(): Promise<void> {
    const query = this._search.value.trim();
    for (const el of Array.from(
      this._canvas.querySelectorAll('.vjpviz-node-match')
    )) {
      el.classList.remove('vjpviz-node-match');
    }
    if (!query || !this._requests) {
      return;
    }
    const requests = this._requests;
    let matches: string[] = [];
    await this._show(async () => {
      const result = await requests.search(query, this._state);
      matches = Array.isArray(result.matches) ? result.matches : [];
      return result.view;
    }, false);
    let first: Element | null = null;
    for (const id of matches) {
      const el = this._canvas.querySelector(
        `[data-vjpviz-node="${cssEscape(id)}"]`
      );
      if (el) {
        el.classList.add('vjpviz-node-match');
        first = first ?? el;
      }
    }
    this._setStatus(
      `${matches.length} match${matches.length === 1 ? '' : 'es'} for “${query}”`
    );
    if (first) {
      this._centreOn(first, this.scale);
    }
  }

  private _showDetails(id: string): void {
    const n = this._nodes.get(id);
    const d = this._details;
    d.textContent = '';
    if (!n) {
      return;
    }
    const title = document.createElement('div');
    title.className = 'jp-Vjpviz-nodeTitle';
    title.textContent = `${n.label}${n.primitive && n.primitive !== n.label ? ` (${n.primitive})` : ''}`;
    d.appendChild(title);
    const rows: [string, string | undefined | null][] = [
      ['inputs', (n.in_avals ?? []).join(', ') || undefined],
      ['outputs', (n.out_avals ?? []).join(', ') || undefined],
      ['name stack', n.name_stack || undefined],
      ['source', placeOf(this._places, n.call_site)?.text],
      ['rule', n.rule],
      ['contains', n.n_eqns ? `${n.n_eqns} equations` : undefined]
    ];
    const dl = document.createElement('dl');
    for (const [k, v] of rows) {
      if (!v) {
        continue;
      }
      const dt = document.createElement('dt');
      dt.textContent = k;
      const dd = document.createElement('dd');
      dd.textContent = v;
      dl.append(dt, dd);
    }
    d.appendChild(dl);
  }

  private _onClick = (e: MouseEvent) => {
    if (this._dragged) {
      return;
    }
    const g = (e.target as Element).closest?.('[data-vjpviz-node]');
    if (!g) {
      return;
    }
    for (const el of Array.from(
      this._canvas.querySelectorAll('.vjpviz-node-selected')
    )) {
      el.classList.remove('vjpviz-node-selected');
    }
    g.classList.add('vjpviz-node-selected');
    this._updateButtons();
    this._showDetails(g.getAttribute('data-vjpviz-node')!);
  };

  private _onDblClick = (e: MouseEvent) => {
    const target = e.target as Element;
    const g = target.closest?.('.vjpviz-expandable[data-vjpviz-node]');
    const body = target.closest?.('[data-vjpviz-body]');
    if (g) {
      e.preventDefault();
      void this.expand(g.getAttribute('data-vjpviz-node')!);
    } else if (body && !target.closest('[data-vjpviz-node]')) {
      e.preventDefault();
      void this.collapse(body.getAttribute('data-vjpviz-body')!);
    }
  };

  /** Arrows and +/- pan and zoom (panzoom); f fits, c centres on the failure. */
  private _onKey = (e: KeyboardEvent) => {
    if (e.key === 'f') {
      this.fit();
    } else if (e.key === 'c') {
      this.centreOnFailure();
    }
  };

  private _search: HTMLInputElement;
  private _status: HTMLElement;
  private _note: HTMLElement;
  private _viewport: HTMLElement;
  private _canvas: HTMLElement;
  private _panzoom: PanZoom;
  private _expandButton: HTMLButtonElement;
  private _collapseButton: HTMLButtonElement;
  private _details: HTMLElement;
  private _svg: SVGSVGElement | null = null;
  private _natural = { w: 1, h: 1 };
  private _pendingFit = false;
  private _resizeObserver: ResizeObserver | null = null;
  private _dragged = false;
  private _token = 0;
  private _nodes = new Map<string, GraphNode>();
  private _places: Places | undefined;
  private _failed: string | null = null;
  private _state: IViewState = { expanded: [], collapsed: [] };
  private _requests: IGraphRequests | null = null;
}

/**
 * Mark the legend that render/dot.py draws (a cluster with id "vjpviz-legend"
 * and boxes and edges named legend_*): left out of fit and of the keyboard.
 * Its failing-node and mismatched-edge samples come classed (vjpviz-legend-failed,
 * vjpviz-legend-mismatch), so the theme colours them as the real ones.
 */
function markLegend(svg: SVGSVGElement): void {
  for (const g of Array.from(
    svg.querySelectorAll('g.cluster, g.node, g.edge')
  )) {
    const title = Array.from(g.children).find(c => c.localName === 'title');
    const name = title?.textContent?.trim() ?? '';
    if (
      g.getAttribute('id') === 'vjpviz-legend' ||
      name === 'cluster_legend' ||
      /^legend_[\w]+($|->)/.test(name) ||
      g.matches('.vjpviz-legend-failed, .vjpviz-legend-mismatch')
    ) {
      g.classList.add(LEGEND_CLASS);
    }
  }
}

/**
 * Take the graph's caption out of the SVG and return its text. render/dot.py
 * puts there what the view folds (or that it is a partial or simpler view);
 * graphviz draws it as one line under the graph, wider than a narrow viewport
 * and panned and zoomed away with the graph. Shown as HTML it wraps in the
 * widget's width and stays in sight. It is the root graph's own label: the
 * `<text>` children of `g.graph` (clusters and boxes hold theirs in their `<g>`).
 */
function takeCaption(svg: SVGSVGElement): string {
  const root = svg.querySelector('g.graph');
  const lines = Array.from(root?.children ?? []).filter(
    c => c.localName === 'text'
  );
  for (const line of lines) {
    line.remove();
  }
  return lines
    .map(line => line.textContent?.trim() ?? '')
    .filter(Boolean)
    .join(' ');
}

/**
 * The graph node id of a graphviz `<g class="node">`: its `<title>`.
 */
function nodeId(g: Element): string | null {
  // render/dot.py puts the graph node or cluster id in the id attribute;
  // plain graphviz output only has it in <title>.
  if (g.classList.contains('vjpviz-node') && g.getAttribute('id')) {
    return g.getAttribute('id');
  }
  const title = Array.from(g.children).find(c => c.localName === 'title');
  return title?.textContent?.trim() || null;
}

function cssEscape(value: string): string {
  return typeof CSS !== 'undefined' && CSS.escape
    ? CSS.escape(value)
    : value.replace(/["\\]/g, '\\$&');
}
