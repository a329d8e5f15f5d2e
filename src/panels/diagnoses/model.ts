/**
 * The diagnoses feature's state, apart from its views (as JupyterLab's debugger
 * keeps each panel's model): the diagnoses of every kernel, the followed
 * kernel's selection, and the fixes asked of it. No DOM here: the panel renders
 * it, the commands drive it, the tests drive it directly.
 */
import { JSONObject } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import { IPushEvent, VjpvizChannels } from '../../channel';
import { Graphs } from '../../graphs';
import { mark } from '../../marks';
import { ApplyResult, Diagnosis, VerifyResult, View } from '../../protocol';
import { IDiagnosesModel, IDiagnosisEvent, IVjpviz } from '../../tokens';

/**
 * Diagnoses kept per kernel, newest; the kernel keeps as many (pipeline.HISTORY_LIMIT),
 * so a training loop that fails every step cannot grow the page without limit.
 */
export const MAX_DIAGNOSES = 200;

/**
 * The diagnoses of each kernel, oldest first, each id once, the newest
 * MAX_DIAGNOSES kept.
 */
export class DiagnosisStore {
  /**
   * The diagnoses of a kernel, oldest first.
   */
  list(kernelId: string): readonly Diagnosis[] {
    return this._kernels.get(kernelId) ?? [];
  }

  /**
   * Add a pushed diagnosis; false when its id is known already.
   */
  add(kernelId: string, diagnosis: Diagnosis): boolean {
    const list = this._list(kernelId);
    if (list.some(d => d.id === diagnosis.id)) {
      return false;
    }
    list.push(diagnosis);
    dropOldest(list);
    return true;
  }

  /**
   * Merge a history reply with what was pushed meanwhile, in the kernel's order.
   */
  merge(kernelId: string, diagnoses: readonly Diagnosis[]): void {
    const list = this._list(kernelId);
    const known = new Set(list.map(d => d.id));
    list.push(...diagnoses.filter(d => !known.has(d.id)));
    list.sort((a, b) => idNumber(a.id) - idNumber(b.id));
    dropOldest(list);
  }

  /**
   * Forget a kernel's diagnoses (it restarted).
   */
  clear(kernelId: string): void {
    this._kernels.delete(kernelId);
  }

  private _list(kernelId: string): Diagnosis[] {
    let list = this._kernels.get(kernelId);
    if (!list) {
      list = [];
      this._kernels.set(kernelId, list);
    }
    return list;
  }

  private _kernels = new Map<string, Diagnosis[]>();
}

/**
 * The model of the diagnoses: what the channels push, kept per kernel in a
 * DiagnosisStore (their graphs' pushed views in Graphs), and the followed
 * kernel's selection.
 */
export class DiagnosesModel implements IDiagnosesModel {
  constructor(
    private readonly _channels: VjpvizChannels,
    private readonly _graphs: Graphs,
    private readonly _owner: Pick<IVjpviz, 'kernelId'>
  ) {
    _channels.pushed.connect((_, event) => this._onPush(event));
  }

  get items(): readonly Diagnosis[] {
    const kernelId = this._owner.kernelId;
    return kernelId ? this._store.list(kernelId) : [];
  }

  get current(): Diagnosis | null {
    return this._current;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get currentChanged(): ISignal<this, Diagnosis | null> {
    return this._currentChanged;
  }

  get received(): ISignal<this, IDiagnosisEvent> {
    return this._received;
  }

  select(id: string): void {
    this._selectedId = id;
    this._updateCurrent();
  }

  selectNext(step: 1 | -1): void {
    // The list shows the newest first: down the list is back in time.
    const ids = this.items.map(d => d.id).reverse();
    if (!ids.length) {
      return;
    }
    const at = this._current ? ids.indexOf(this._current.id) : -1;
    this.select(ids[(at + step + ids.length) % ids.length]);
  }

  verify(id: string, code: string): Promise<VerifyResult> {
    return this._request('verify', { report_id: id, code });
  }

  apply(id: string, code: string): Promise<ApplyResult> {
    return this._request('apply', { report_id: id, code });
  }

  /**
   * A new diagnosis of a kernel (pushed, or found by vv.nans on a watched step),
   * with the default view of its graph if it came drawn; selected when the kernel
   * is followed. A known id is no news.
   */
  add(kernelId: string, diagnosis: Diagnosis, view?: View): void {
    if (!this._store.add(kernelId, diagnosis)) {
      return;
    }
    mark('vjpviz:diagnosis-received');
    if (view) {
      this._graphs.keep(kernelId, diagnosis.id, view);
    }
    if (kernelId === this._owner.kernelId) {
      this._selectedId = diagnosis.id;
    }
    this._listChanged(kernelId);
    this._received.emit({ kernelId, diagnosis });
  }

  /**
   * A kernel's history (a panel opened, or reloaded, after its pushes).
   */
  merge(kernelId: string, diagnoses: readonly Diagnosis[]): void {
    this._store.merge(kernelId, diagnoses);
    this._listChanged(kernelId);
  }

  /**
   * Another notebook is followed; a different kernel starts from its newest.
   */
  followed(kernelChanged: boolean): void {
    if (kernelChanged) {
      this._selectedId = null;
    }
    this._listChanged(this._owner.kernelId, true);
  }

  /**
   * A kernel restarted: its diagnoses are gone.
   */
  forget(kernelId: string): void {
    this._store.clear(kernelId);
    this._listChanged(kernelId);
  }

  private _request<Op extends 'verify' | 'apply'>(
    op: Op,
    args: JSONObject
  ): Promise<Op extends 'verify' ? VerifyResult : ApplyResult> {
    const kernelId = this._owner.kernelId;
    return kernelId
      ? (this._channels.request(kernelId, op, args) as Promise<never>)
      : Promise.reject(new Error('no notebook kernel is followed'));
  }

  private _onPush({ kernelId, message }: IPushEvent): void {
    if (message.type === 'diagnosis') {
      this.add(kernelId, message.diagnosis, message.view);
    }
  }

  /**
   * A kernel's list changed: if it is the followed one, say so and update
   * the selection.
   */
  private _listChanged(kernelId: string | null, followed = false): void {
    if (!followed && kernelId !== this._owner.kernelId) {
      return;
    }
    const previous = this._current;
    this._current = this._selected();
    this._changed.emit();
    if (this._current !== previous) {
      this._currentChanged.emit(this._current);
    }
  }

  private _updateCurrent(): void {
    const current = this._selected();
    if (current !== this._current) {
      this._current = current;
      this._currentChanged.emit(current);
    }
  }

  /**
   * The diagnosis picked, else the newest, else null.
   */
  private _selected(): Diagnosis | null {
    const diagnoses = this.items;
    return (
      diagnoses.find(d => d.id === this._selectedId) ??
      diagnoses[diagnoses.length - 1] ??
      null
    );
  }

  private _store = new DiagnosisStore();
  private _selectedId: string | null = null;
  private _current: Diagnosis | null = null;
  private _changed = new Signal<this, void>(this);
  private _currentChanged = new Signal<this, Diagnosis | null>(this);
  private _received = new Signal<this, IDiagnosisEvent>(this);
}

function idNumber(id: string): number {
  const n = parseInt(id.replace(/^\D+/, ''), 10);
  return isNaN(n) ? 0 : n;
}

function dropOldest(diagnoses: Diagnosis[]): void {
  if (diagnoses.length > MAX_DIAGNOSES) {
    diagnoses.splice(0, diagnoses.length - MAX_DIAGNOSES);
  }
}
