import { CodeEditor } from '@jupyterlab/codeeditor';
import { LabIcon } from '@jupyterlab/ui-components';
import { Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';

import { NotebookCells, applyFix } from './cells';
import { DiagnosisList } from './panels/diagnoses/list';
import { DiagnosisView, IDiagnosisActions } from './panels/diagnoses/view';
import { GradsView } from './panels/grads/view';
import { WatchPlot } from './panels/watches/plot';
import { Diagnosis } from './protocol';
import { IVjpviz } from './tokens';

export const PANEL_ID = 'jp-vjpviz-panel';

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16" height="16">
<g class="jp-icon3" fill="#616161"><circle cx="5" cy="5" r="2.5"/><circle cx="19" cy="5" r="2.5"/>
<circle cx="12" cy="19" r="2.5"/><path d="M6.3 6.9l4.6 9.6 1.6-.8L7.9 6.1zM17.7 6.9l-4.6 9.6-1.6-.8 4.6-9.6z"/>
<path d="M3 21l3-3 1 1-3 3z"/></g></svg>`;

export const vjpvizIcon = new LabIcon({
  name: 'jupyter-vjpviz:icon',
  svgstr: ICON_SVG
});

/**
 * The "VJP debugger" side panel: a view of the model (the active notebook's
 * diagnoses, the one selected). It renders what the model holds and hands
 * the user's picks back to it; the fix editor's Apply goes through the
 * notebook's cells handler.
 */
export class VjpvizPanel extends Panel {
  constructor(options: VjpvizPanel.IOptions) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-Vjpviz-panel');
    this.title.icon = vjpvizIcon;
    this.title.caption = 'VJP debugger';
    this._model = options.model;
    this._cells = options.cells;
    this._copy = options.copy;

    this._empty = new Widget();
    this._empty.addClass('jp-Vjpviz-empty');
    this.addWidget(this._empty);
    this._list = new DiagnosisList();
    this.addWidget(this._list);
    this._view = new DiagnosisView(options.editorFactory, options.openGraph);
    this.addWidget(this._view);
    const { diagnoses, watches, grads } = this._model;
    this.addWidget(new WatchPlot(watches));
    this._grads = new GradsView(grads, this._model, place =>
      this._cells.goTo(place)
    );
    this.addWidget(this._grads);
    this._list.selected.connect((_, id) => diagnoses.select(id));
    diagnoses.changed.connect(this._onDiagnosesChanged, this);
    watches.changed.connect(this._onDiagnosesChanged, this);
    grads.changed.connect(this._onDiagnosesChanged, this);
    diagnoses.currentChanged.connect(this._onCurrentChanged, this);
    this._onDiagnosesChanged();
    this._onCurrentChanged();
  }

  /**
   * Resolves once the diagnosis shown last is drawn (its graph included).
   */
  get drawn(): Promise<void> {
    return this._drawn;
  }

  /**
   * Resolves once the vv.grads report shown last has its graph drawn.
   */
  get gradsDrawn(): Promise<void> {
    return this._grads.drawn;
  }

  /**
   * Verify the code in the fix editor (the command of that name).
   */
  verify(): Promise<void> {
    return this._view.verify();
  }

  /**
   * Apply the code in the fix editor to the kernel and the defining cell.
   */
  apply(): Promise<void> {
    return this._view.apply();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    Signal.disconnectReceiver(this);
    super.dispose();
  }

  private _onDiagnosesChanged(): void {
    const { diagnoses, watches, grads } = this._model;
    const n = diagnoses.items.length;
    this.title.label = n ? `VJP debugger (${n})` : 'VJP debugger';
    this.title.caption = n
      ? `VJP debugger: ${n} diagnos${n === 1 ? 'is' : 'es'}`
      : 'VJP debugger';
    this.title.className = n ? 'jp-Vjpviz-tab jp-mod-count' : 'jp-Vjpviz-tab';
    // The sidebar keeps the tab's data-id in the dataset: extend it.
    this.title.dataset = { ...this.title.dataset, vjpvizCount: String(n) };
    this._renderEmpty();
    // vv.watch and vv.grads show on their own: vjpviz is loaded, nothing to invite.
    const shown = n + watches.items.length + grads.items.length;
    this._empty.setHidden(shown > 0);
    this._list.setHidden(n === 0);
    this._view.setHidden(n === 0);
    this._list.setItems(diagnoses.items, diagnoses.current?.id ?? null);
  }

  /**
   * Another diagnosis is current (it comes with its fixes): draw it.
   */
  private _onCurrentChanged(): void {
    const { items, current: d } = this._model.diagnoses;
    this._list.setItems(items, d?.id ?? null);
    if (d) {
      this._drawn = this._view.showDiagnosis(d, this._actions(d));
    }
  }

  private _renderEmpty(): void {
    const node = this._empty.node;
    node.textContent = '';
    const h = document.createElement('h3');
    h.textContent = 'VJP debugger';
    const p = document.createElement('p');
    if (!this._model.hasNotebook) {
      p.textContent = 'Open a notebook to see its gradient diagnoses here.';
    } else {
      p.append('Run ');
      const code = document.createElement('code');
      code.textContent = '%load_ext vjpviz';
      p.append(
        code,
        ' in this notebook. Wrong cotangents from custom_vjp rules and VJPs then show up here, with the graph and a fix.'
      );
    }
    node.append(h, p);
  }

  private _actions(d: Diagnosis): IDiagnosisActions {
    const model = this._model;
    if (!model.kernelId) {
      return { graph: null, fix: null, jumpToSource: () => undefined };
    }
    return {
      graph: model.graphRequests(d.id),
      fix: {
        verify: code => model.diagnoses.verify(d.id, code),
        apply: code =>
          applyFix(
            code => model.diagnoses.apply(d.id, code),
            this._cells,
            d,
            code
          ),
        copy: text => this._copy(text)
      },
      jumpToSource: place => {
        if (!place || !this._cells.goTo(place)) {
          this._cells.jumpTo(d);
        }
      }
    };
  }

  private _model: IVjpviz;
  private _cells: NotebookCells;
  private _copy: (text: string) => Promise<void>;
  private _empty: Widget;
  private _list: DiagnosisList;
  private _view: DiagnosisView;
  private _grads: GradsView;
  private _drawn: Promise<void> = Promise.resolve();
}

/**
 * The panel's statics.
 */
export namespace VjpvizPanel {
  /**
   * What the panel is made of.
   */
  export interface IOptions {
    model: IVjpviz;
    /** The notebook's cells, where Apply writes the fix. */
    cells: NotebookCells;
    editorFactory: CodeEditor.Factory | null;
    copy: (text: string) => Promise<void>;
    /** Opens the graph shown in the main area (the command of that name). */
    openGraph: () => void;
  }
}
