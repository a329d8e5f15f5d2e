import { CodeEditor } from '@jupyterlab/codeeditor';
import { Panel, Widget } from '@lumino/widgets';

import { mark } from '../../marks';
import { leafRows } from './leafTable';
import { renderLogTable } from './logTable';
import { FixEditor, IFixActions } from './fixEditor';
import { GraphView } from '../../graphView';
import { placeOf } from '../../places';
import { Diagnosis, Place } from '../../protocol';
import { IGraphRequests } from '../../tokens';

/**
 * What a diagnosis view asks of the panel.
 */
export interface IDiagnosisActions {
  graph: IGraphRequests | null;
  fix: IFixActions | null;
  /** Go to the cell and line `place` names, else to the cell defining the rule. */
  jumpToSource(place: Place | null): void;
}

/**
 * Build the expected-vs-got table of a diagnosis (text only; kernel strings are never HTML).
 */
export function renderLeafTable(d: Diagnosis): HTMLTableElement {
  const table = document.createElement('table');
  table.className = 'jp-Vjpviz-diff';
  const head = table.createTHead().insertRow();
  for (const label of ['path', 'expected', 'got']) {
    const th = document.createElement('th');
    th.textContent = label;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const row of leafRows(d)) {
    const tr = body.insertRow();
    tr.className = `jp-Vjpviz-diffRow jp-mod-${row.status}`;
    tr.setAttribute('data-vjpviz-path', row.path);
    tr.setAttribute('data-vjpviz-expected', row.expected);
    tr.setAttribute('data-vjpviz-got', row.got);
    tr.setAttribute('data-vjpviz-status', row.status);
    for (const text of [row.path, row.expected, row.got]) {
      const td = tr.insertCell();
      td.textContent = text;
    }
  }
  return table;
}

/**
 * The rule's source with the bad line marked: the return that produced the wrong
 * cotangent, or the statement that raised writing it.
 */
export function renderRuleSource(d: Diagnosis): HTMLElement | null {
  if (!d.rule_source_text) {
    return null;
  }
  const pre = document.createElement('pre');
  pre.className = 'jp-Vjpviz-ruleSource';
  const start = d.rule_source_start ?? 1;
  d.rule_source_text
    .replace(/\n$/, '')
    .split('\n')
    .forEach((line, i) => {
      const el = document.createElement('span');
      el.className = 'jp-Vjpviz-line';
      const no = start + i;
      el.dataset.line = String(no);
      if (no === d.rule_source_bad_line) {
        el.classList.add('jp-mod-bad');
        el.title = d.raised_at
          ? 'the rule raised here, writing a cotangent of the wrong type'
          : 'this return produced the wrong cotangent';
      }
      const gutter = document.createElement('span');
      gutter.className = 'jp-Vjpviz-lineNo';
      gutter.textContent = String(no);
      const text = document.createElement('span');
      text.textContent = line;
      el.append(gutter, text, document.createTextNode('\n'));
      pre.appendChild(el);
    });
  return pre;
}

/**
 * One diagnosis: headline, expected vs got, the rule's logs, rule source, JAX's
 * message, graph, fix.
 */
export class DiagnosisView extends Panel {
  constructor(
    editorFactory: CodeEditor.Factory | null,
    openInMain: () => void
  ) {
    super();
    this.addClass('jp-Vjpviz-view');
    this._summary = new Widget();
    this._summary.addClass('jp-Vjpviz-summary');
    this.addWidget(this._summary);
    this._graph = new GraphView({ openInMain });
    this.addWidget(this._graph);
    if (editorFactory) {
      this._fix = new FixEditor(editorFactory);
      this.addWidget(this._fix);
    }
  }

  /**
   * Show a diagnosis; resolves when its graph is drawn (or failed to load).
   */
  showDiagnosis(
    diagnosis: Diagnosis,
    actions: IDiagnosisActions
  ): Promise<void> {
    const d = diagnosis;
    this._diagnosisId = d.id;
    const root = this._summary.node;
    root.textContent = '';
    root.dataset.vjpvizId = d.id;

    const headline = document.createElement('h3');
    headline.className = 'jp-Vjpviz-headline';
    headline.textContent = d.headline;
    root.appendChild(headline);

    const where = placeOf(d.places, d.rule_source ?? d.source ?? d.call_site);
    if (where) {
      const link = document.createElement('button');
      link.className = 'jp-Vjpviz-location';
      link.dataset.vjpvizAction = 'jump';
      link.textContent = `${d.rule ?? d.function ?? 'rule'} — ${where.text}`;
      link.title = 'Jump to the cell that defines it';
      link.addEventListener('click', () => actions.jumpToSource(where));
      root.appendChild(link);
    }

    root.appendChild(section('Expected vs got'));
    root.appendChild(renderLeafTable(d));
    const logs = renderLogTable(d);
    if (logs) {
      root.appendChild(section('Logs the rule wrote'));
      root.appendChild(logs);
    }
    if (d.detail) {
      const p = document.createElement('p');
      p.className = 'jp-Vjpviz-detail';
      p.textContent = d.detail;
      root.appendChild(p);
    }
    const source = renderRuleSource(d);
    if (source) {
      root.appendChild(section(`Rule ${d.rule ?? ''}`));
      root.appendChild(source);
    }
    if (d.message) {
      const details = document.createElement('details');
      details.className = 'jp-Vjpviz-message';
      const summary = document.createElement('summary');
      summary.textContent = "JAX's message";
      const pre = document.createElement('pre');
      pre.textContent = d.message;
      details.append(summary, pre);
      root.appendChild(details);
    }
    mark('vjpviz:diagnosis-shown');
    if (this._fix) {
      this._fix.setFixes(d.fixes ?? [], fixFallback(d), actions.fix);
    }
    return this._graph.load(
      d.graph?.nodes ?? [],
      d.node ?? null,
      actions.graph,
      d.places
    );
  }

  get diagnosisId(): string | null {
    return this._diagnosisId;
  }

  /**
   * Verify the fix editor's code (no editor: nothing to verify).
   */
  verify(): Promise<void> {
    return this._fix?.verify() ?? Promise.resolve();
  }

  /**
   * Apply the fix editor's code.
   */
  apply(): Promise<void> {
    return this._fix?.apply() ?? Promise.resolve();
  }

  private _summary: Widget;
  private _graph: GraphView;
  private _fix: FixEditor | null = null;
  private _diagnosisId: string | null = null;
}

function section(title: string): HTMLElement {
  const h = document.createElement('h4');
  h.className = 'jp-Vjpviz-section';
  h.textContent = title;
  return h;
}

/**
 * With no suggestion, the editor starts from the rule as written.
 */
function fixFallback(d: Diagnosis): string | null {
  const text = d.rule_source_text;
  if (!text) {
    return null;
  }
  const lines = text.replace(/\n$/, '').split('\n');
  const indent = Math.min(
    ...lines
      .filter(l => l.trim())
      .map(l => l.length - l.replace(/^\s+/, '').length)
  );
  return lines.map(l => l.slice(indent)).join('\n') + '\n';
}
