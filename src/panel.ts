import { CodeEditor } from '@jupyterlab/codeeditor';
import { NotebookPanel } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import { JSONObject } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';

import { IDefinition, definitionEdit, definitionSpan } from './cells';
import { VjpvizComms, mark } from './comm';
import { DiagnosisList } from './diagnosisList';
import { DiagnosisView, IDiagnosisActions } from './diagnosisView';
import { IApplied } from './fixEditor';
import { IGraphRequests } from './graphView';
import {
  Diagnosis,
  ApplyResult,
  VerifyResult,
  View,
  RequestOp
} from './protocol';
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
 * The "VJP debugger" side panel: the diagnoses of the active notebook's kernel.
 */
export class VjpvizPanel extends Panel implements IVjpviz {
  constructor(options: {
    comms: VjpvizComms;
    editorFactory: CodeEditor.Factory | null;
    copy: (text: string) => Promise<void>;
    /** Opens the graph shown in the main area (the command of that name). */
    openGraph: () => void;
  }) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-Vjpviz-panel');
    this.title.icon = vjpvizIcon;
    this.title.caption = 'VJP debugger';
    this._comms = options.comms;
    this._copy = options.copy;

    this._empty = new Widget();
    this._empty.addClass('jp-Vjpviz-empty');
    this.addWidget(this._empty);
    this._list = new DiagnosisList();
    this.addWidget(this._list);
    this._view = new DiagnosisView(options.editorFactory, options.openGraph);
    this.addWidget(this._view);
    this._list.selected.connect((_, id) => this.select(id));
    this._comms.listChanged.connect((_, kernelId) => {
      if (kernelId === this._kernelId) {
        this._refresh();
      }
    });
    this._refresh();
  }

  /**
   * The kernel whose diagnoses are shown.
   */
  get kernelId(): string | null {
    return this._kernelId;
  }

  get diagnoses(): readonly Diagnosis[] {
    return this._kernelId ? this._comms.diagnoses(this._kernelId) : [];
  }

  get current(): Diagnosis | null {
    return this.diagnoses.find(d => d.id === this._selectedId) ?? null;
  }

  get currentChanged(): ISignal<this, Diagnosis | null> {
    return this._currentChanged;
  }

  /**
   * Follow a notebook (the active one), or none.
   */
  setNotebook(notebook: NotebookPanel | null): void {
    const changed = notebook !== this._notebook;
    this._notebook = notebook;
    const kernelId = notebook?.sessionContext.session?.kernel?.id ?? null;
    if (kernelId !== this._kernelId) {
      this._kernelId = kernelId;
      this._selectedId = null;
      void this._refresh();
    } else if (changed) {
      this._renderEmpty();
    }
  }

  /**
   * A diagnosis arrived from `kernelId`; select it if it's ours.
   * Resolves once its view (graph included) is drawn.
   */
  async onDiagnosis(kernelId: string, diagnosis: Diagnosis): Promise<void> {
    this._updateCount();
    if (kernelId !== this._kernelId) {
      return;
    }
    this._selectedId = diagnosis.id;
    await this._refresh();
  }

  /**
   * A diagnosis of `kernelId` got its fixes (judged after it arrived): the list and,
   * if it is shown, its fix editor take them; its graph stays as the user left it.
   */
  onFixes(kernelId: string, diagnosis: Diagnosis): void {
    if (kernelId !== this._kernelId) {
      return;
    }
    this._list.setItems(this.diagnoses, this._selectedId);
    if (this._view.diagnosisId === diagnosis.id) {
      this._view.showFixes(diagnosis, this._actions(diagnosis));
      this._setShown(diagnosis);
    }
  }

  /**
   * Show one diagnosis of the current kernel.
   */
  select(id: string): Promise<void> {
    this._selectedId = id;
    return this._refresh();
  }

  selectNext(step: 1 | -1): Promise<void> {
    // The list shows the newest first: down the list is back in time.
    const ids = this.diagnoses.map(d => d.id).reverse();
    if (!ids.length) {
      return Promise.resolve();
    }
    const at = this._selectedId ? ids.indexOf(this._selectedId) : -1;
    return this.select(ids[(at + step + ids.length) % ids.length]);
  }

  verify(): Promise<void> {
    return this._view.verify();
  }

  apply(): Promise<void> {
    return this._view.apply();
  }

  graphRequests(id: string): IGraphRequests | null {
    const kernelId = this._kernelId;
    if (!kernelId) {
      return null;
    }
    const ask = async <T>(op: RequestOp, args: JSONObject): Promise<T> =>
      (await this._comms.request(kernelId, op, {
        diagnosis_id: id,
        ...args
      })) as unknown as T;
    const pushed = this._comms.pushedView(kernelId, id);
    return {
      // The default view came drawn with the diagnosis; any other is asked for.
      view: state =>
        pushed && !state.expanded.length && !state.collapsed.length
          ? (mark('vjpviz:graph-from-push'), Promise.resolve(pushed))
          : ask<View>('view', { ...state }),
      expand: (node, state) => ask<View>('expand', { node, ...state }),
      collapse: (node, state) =>
        ask<View>('collapse', { node, ...state }),
      search: (query, state) =>
        ask<{ matches: string[]; view: View }>('search', {
          query,
          ...state
        })
    };
  }

  private _updateCount(): void {
    const n = this.diagnoses.length;
    this.title.label = n ? `VJP debugger (${n})` : 'VJP debugger';
    this.title.caption = n
      ? `VJP debugger: ${n} diagnos${n === 1 ? 'is' : 'es'}`
      : 'VJP debugger';
    this.title.className = n ? 'jp-Vjpviz-tab jp-mod-count' : 'jp-Vjpviz-tab';
    // The sidebar keeps the tab's data-id in the dataset: extend it.
    this.title.dataset = { ...this.title.dataset, vjpvizCount: String(n) };
  }

  private _refresh(): Promise<void> {
    const diagnoses = this.diagnoses;
    this._updateCount();
    const has = diagnoses.length > 0;
    this._renderEmpty();
    this._empty.setHidden(has);
    this._list.setHidden(!has);
    this._view.setHidden(!has);
    if (!has) {
      this._setShown(null);
      return Promise.resolve();
    }
    const selected =
      diagnoses.find(d => d.id === this._selectedId) ??
      diagnoses[diagnoses.length - 1];
    this._selectedId = selected.id;
    this._list.setItems(diagnoses, this._selectedId);
    if (this._view.diagnosisId === this._selectedId && this._shownKernel === this._kernelId) {
      return Promise.resolve();
    }
    this._shownKernel = this._kernelId;
    this._setShown(selected);
    return this._view.showDiagnosis(selected, this._actions(selected));
  }

  private _setShown(diagnosis: Diagnosis | null): void {
    if (diagnosis !== this._shown) {
      this._shown = diagnosis;
      this._currentChanged.emit(diagnosis);
    }
  }

  private _renderEmpty(): void {
    const node = this._empty.node;
    node.textContent = '';
    const h = document.createElement('h3');
    h.textContent = 'VJP debugger';
    const p = document.createElement('p');
    if (!this._notebook) {
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

  private _actions(diagnosis: Diagnosis): IDiagnosisActions {
    const kernelId = this._kernelId;
    const d = diagnosis;
    if (!kernelId) {
      return { graph: null, fix: null, jumpToSource: () => undefined };
    }
    const request = async (op: RequestOp, args: JSONObject) =>
      this._comms.request(kernelId, op, { diagnosis_id: d.id, ...args });
    return {
      graph: this.graphRequests(d.id),
      fix: {
        verify: async code =>
          (await request('verify', { code })) as unknown as VerifyResult,
        apply: code => this._apply(d, code, request),
        copy: text => this._copy(text)
      },
      jumpToSource: () => this._jump(d)
    };
  }

  /**
   * Tell the kernel to rebind the rule (it verifies first), then put the
   * same text into the defining cell through its shared model (undoable).
   */
  private async _apply(
    rule: IDefinition,
    code: string,
    request: (op: 'apply', args: JSONObject) => Promise<unknown>
  ): Promise<IApplied> {
    let result: ApplyResult;
    try {
      result = (await request('apply', { code })) as ApplyResult;
    } catch (error) {
      const note = ` The kernel could not apply it (${(error as Error).message}); re-run the cell.`;
      return { message: this._applyToCell(code, rule) + note };
    }
    if (!result.applied && result.problems?.length) {
      const first = result.problems[0] as { headline?: string };
      throw new Error(`the fix still fails: ${first.headline ?? 'see Verify'}`);
    }
    const patch = result.applied ? null : result.patch ?? null;
    const kernelNote = result.applied
      ? ' The kernel now uses the fixed rule.'
      : patch
        ? ` The rule lives in ${result.path ?? 'a file'}; the kernel left it unchanged: make this change there.`
        : '';
    return { message: this._applyToCell(code, rule) + kernelNote, patch };
  }

  /**
   * Put `code` in place of the rule's definition, in the cell that holds it as
   * it ran, through the shared model (undoable).
   */
  private _applyToCell(code: string, rule: IDefinition): string {
    const cell = this._findCell(rule);
    const edit = cell && definitionEdit(cell.model.sharedModel.getSource(), rule, code);
    if (!cell || !edit) {
      return 'No cell of this notebook holds the rule as it ran.';
    }
    const [start, end, text] = edit;
    cell.model.sharedModel.updateSource(start, end, text);
    this._reveal(cell);
    return 'Applied to the cell that defines the rule.';
  }

  private _findCell(rule: IDefinition) {
    const notebook = this._notebook?.content;
    if (!notebook) {
      return null;
    }
    for (const cell of notebook.widgets) {
      if (cell.model.type !== 'code') {
        continue;
      }
      const source = cell.model.sharedModel.getSource();
      if (definitionSpan(source, rule)) {
        return cell;
      }
    }
    return null;
  }

  private _reveal(cell: NonNullable<ReturnType<VjpvizPanel['_findCell']>>): void {
    const notebook = this._notebook?.content;
    if (!notebook) {
      return;
    }
    const index = notebook.widgets.indexOf(cell);
    if (index >= 0) {
      notebook.activeCellIndex = index;
      void notebook.scrollToCell(cell);
    }
  }

  private _jump(rule: IDefinition): void {
    const cell = this._findCell(rule);
    if (cell) {
      this._reveal(cell);
      this._notebook?.activate?.();
    }
  }

  private _comms: VjpvizComms;
  private _copy: (text: string) => Promise<void>;
  private _empty: Widget;
  private _list: DiagnosisList;
  private _view: DiagnosisView;
  private _notebook: NotebookPanel | null = null;
  private _kernelId: string | null = null;
  private _selectedId: string | null = null;
  private _shownKernel: string | null = null;
  private _shown: Diagnosis | null = null;
  private _currentChanged = new Signal<this, Diagnosis | null>(this);
}
