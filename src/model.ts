/**
 * The VJP debugger's state, apart from its views (as JupyterLab's debugger
 * keeps its model): the diagnoses of every kernel, the notebook followed, the
 * selection, and the requests to the followed kernel. No DOM here: the panel
 * renders it, the commands drive it, the tests drive it directly.
 */
import { JSONObject } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import { IGradsEvent, IHistoryEvent, IPushEvent, VjpvizChannels } from './comm';
import { mark } from './marks';
import {
  ApplyResult,
  Diagnosis,
  GradReport,
  RequestOp,
  VerifyResult,
  View,
  WatchSeries
} from './protocol';
import { IDiagnosisEvent, IGraphRequests, IVjpviz } from './tokens';

/**
 * Diagnoses kept per kernel, newest; the kernel keeps as many (pipeline.HISTORY_LIMIT),
 * so a training loop that fails every step cannot grow the page without limit.
 */
export const MAX_DIAGNOSES = 200;

/**
 * vv.grads reports kept per kernel, newest; the kernel keeps as many (grads.KEPT).
 */
export const MAX_GRADS = 32;

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
   * Keep the default view pushed with a diagnosis, drawn.
   */
  setView(kernelId: string, id: string, view: View): void {
    const views = this._views.get(kernelId) ?? new Map<string, View>();
    this._views.set(kernelId, views);
    views.set(id, view);
    for (const old of views.keys()) {
      if (views.size <= MAX_DIAGNOSES) {
        break;
      }
      views.delete(old);
    }
  }

  /**
   * The default view pushed with a diagnosis, if any.
   */
  view(kernelId: string, id: string): View | null {
    return this._views.get(kernelId)?.get(id) ?? null;
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
    this._views.delete(kernelId);
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
  private _views = new Map<string, Map<string, View>>();
}

/**
 * Items of each kernel by id, in the order first seen, the newest `limit` kept: a
 * push replaces the item of its id (a vv.watch's series carries all steps so far).
 */
export class ByIdStore<T extends { readonly id: string }> {
  constructor(private readonly _limit = Infinity) {}

  list(kernelId: string): readonly T[] {
    return [...(this._kernels.get(kernelId)?.values() ?? [])];
  }

  set(kernelId: string, item: T): void {
    let items = this._kernels.get(kernelId);
    if (!items) {
      items = new Map();
      this._kernels.set(kernelId, items);
    }
    items.set(item.id, item);
    for (const old of items.keys()) {
      if (items.size <= this._limit) {
        break;
      }
      items.delete(old);
    }
  }

  clear(kernelId: string): void {
    this._kernels.delete(kernelId);
  }

  private _kernels = new Map<string, Map<string, T>>();
}

/**
 * The model of the VJP debugger: what the channels bring, kept per kernel in
 * a DiagnosisStore, and the followed kernel's selection.
 */
export class VjpvizModel implements IVjpviz {
  constructor(channels: VjpvizChannels) {
    this._channels = channels;
    channels.pushed.connect((_, event) => this._onPush(event));
    channels.historyLoaded.connect((_, event) => this._onHistory(event));
    channels.watched.connect((_, { kernelId, series }) =>
      this._onWatch(kernelId, [series])
    );
    channels.graded.connect((_, event) => this._onGrads(event));
    channels.kernelRestarted.connect((_, kernelId) => {
      this._store.clear(kernelId);
      this._watches.clear(kernelId);
      this._grads.clear(kernelId);
      this._changed(kernelId);
      this._watchesChanged.emit();
      this._gradsChanged.emit();
    });
  }

  get hasNotebook(): boolean {
    return this._hasNotebook;
  }

  get kernelId(): string | null {
    return this._kernelId;
  }

  get diagnoses(): readonly Diagnosis[] {
    return this._kernelId ? this._store.list(this._kernelId) : [];
  }

  get current(): Diagnosis | null {
    return this._current;
  }

  get diagnosesChanged(): ISignal<this, void> {
    return this._diagnosesChanged;
  }

  get currentChanged(): ISignal<this, Diagnosis | null> {
    return this._currentChanged;
  }

  get diagnosisReceived(): ISignal<this, IDiagnosisEvent> {
    return this._diagnosisReceived;
  }

  get watches(): readonly WatchSeries[] {
    return this._kernelId ? this._watches.list(this._kernelId) : [];
  }

  get watchesChanged(): ISignal<this, void> {
    return this._watchesChanged;
  }

  async refreshWatches(): Promise<void> {
    if (this._kernelId) {
      await this._askWatches(this._kernelId);
    }
  }

  private async _askWatches(kernelId: string): Promise<void> {
    const { watches } = await this._channels.request(kernelId, 'watch');
    this._onWatch(kernelId, watches);
  }

  get grads(): readonly GradReport[] {
    return this._kernelId ? this._grads.list(this._kernelId) : [];
  }

  get gradsChanged(): ISignal<this, void> {
    return this._gradsChanged;
  }

  async refreshGrads(): Promise<void> {
    if (this._kernelId) {
      await this._askGrads(this._kernelId);
    }
  }

  private async _askGrads(kernelId: string): Promise<void> {
    const { reports } = await this._channels.request(kernelId, 'grads');
    reports.forEach(r => this._grads.set(kernelId, r));
    this._gradsEmit(kernelId);
  }

  async watchNans(watchId: string, step: number): Promise<string> {
    const kernelId = this._kernelId;
    if (!kernelId) {
      throw new Error('no notebook kernel is followed');
    }
    const { summary, diagnosis } = await this._channels.request(
      kernelId,
      'watch_nans',
      { watch_id: watchId, step }
    );
    if (diagnosis) {
      this._onPush({
        kernelId,
        message: { v: 1, type: 'diagnosis', diagnosis }
      });
      this.select(diagnosis.id);
    }
    return summary;
  }

  follow(notebook: { readonly kernelId: string | null } | null): void {
    const kernelId = notebook?.kernelId ?? null;
    const hasNotebook = notebook !== null;
    if (kernelId === this._kernelId && hasNotebook === this._hasNotebook) {
      return;
    }
    if (kernelId !== this._kernelId) {
      this._selectedId = null;
    }
    this._kernelId = kernelId;
    this._hasNotebook = hasNotebook;
    this._changed(kernelId, true);
    this._watchesChanged.emit();
    this._gradsChanged.emit();
  }

  select(id: string): void {
    this._selectedId = id;
    this._updateCurrent();
  }

  selectNext(step: 1 | -1): void {
    // The list shows the newest first: down the list is back in time.
    const ids = this.diagnoses.map(d => d.id).reverse();
    if (!ids.length) {
      return;
    }
    const at = this._current ? ids.indexOf(this._current.id) : -1;
    this.select(ids[(at + step + ids.length) % ids.length]);
  }

  graphRequests(id: string): IGraphRequests | null {
    const kernelId = this._kernelId;
    if (!kernelId) {
      return null;
    }
    const ask = (op: RequestOp, args: JSONObject) =>
      this._channels.request(kernelId, op, { diagnosis_id: id, ...args });
    const pushed = this._store.view(kernelId, id);
    return {
      // The default view came drawn with the diagnosis; any other is asked for.
      view: state =>
        pushed && !state.expanded.length && !state.collapsed.length
          ? (mark('vjpviz:graph-from-push'), Promise.resolve(pushed))
          : (ask('view', { ...state }) as Promise<View>),
      expand: (node, state) =>
        ask('expand', { node, ...state }) as Promise<View>,
      collapse: (node, state) =>
        ask('collapse', { node, ...state }) as Promise<View>,
      search: (query, state) =>
        ask('search', { query, ...state }) as Promise<{
          matches: string[];
          view: View;
        }>
    };
  }

  verify(id: string, code: string): Promise<VerifyResult> {
    return this._request('verify', { diagnosis_id: id, code });
  }

  apply(id: string, code: string): Promise<ApplyResult> {
    return this._request('apply', { diagnosis_id: id, code });
  }

  private _request<Op extends 'verify' | 'apply'>(
    op: Op,
    args: JSONObject
  ): Promise<Op extends 'verify' ? VerifyResult : ApplyResult> {
    return this._kernelId
      ? (this._channels.request(this._kernelId, op, args) as Promise<never>)
      : Promise.reject(new Error('no notebook kernel is followed'));
  }

  private _onPush({ kernelId, message }: IPushEvent): void {
    const { diagnosis, view } = message;
    if (!this._store.add(kernelId, diagnosis)) {
      return;
    }
    mark('vjpviz:diagnosis-received');
    if (view) {
      this._store.setView(kernelId, diagnosis.id, view);
    }
    if (kernelId === this._kernelId) {
      this._selectedId = diagnosis.id;
    }
    this._changed(kernelId);
    this._diagnosisReceived.emit({ kernelId, diagnosis });
  }

  private _onWatch(kernelId: string, watches: readonly WatchSeries[]): void {
    watches.forEach(series => this._watches.set(kernelId, series));
    if (kernelId === this._kernelId) {
      this._watchesChanged.emit();
    }
  }

  private _onGrads({ kernelId, message }: IGradsEvent): void {
    this._grads.set(kernelId, message.grads);
    if (message.view) {
      this._store.setView(kernelId, message.grads.id, message.view);
    }
    this._gradsEmit(kernelId);
  }

  private _gradsEmit(kernelId: string): void {
    if (kernelId === this._kernelId) {
      this._gradsChanged.emit();
    }
  }

  private _onHistory({ kernelId, diagnoses }: IHistoryEvent): void {
    this._store.merge(kernelId, diagnoses);
    this._changed(kernelId);
    // A panel opened (or reloaded) after the watch and grads pushes: ask for them
    // once, one after the other.
    this._askWatches(kernelId)
      .catch(() => undefined)
      .then(() => this._askGrads(kernelId))
      .catch(() => undefined);
  }

  /**
   * A kernel's list changed: if it is the followed one, say so and update
   * the selection.
   */
  private _changed(kernelId: string | null, followed = false): void {
    if (!followed && kernelId !== this._kernelId) {
      return;
    }
    const previous = this._current;
    this._current = this._selected();
    this._diagnosesChanged.emit();
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
    const diagnoses = this.diagnoses;
    return (
      diagnoses.find(d => d.id === this._selectedId) ??
      diagnoses[diagnoses.length - 1] ??
      null
    );
  }

  private _channels: VjpvizChannels;
  private _store = new DiagnosisStore();
  private _watches = new ByIdStore<WatchSeries>();
  private _watchesChanged = new Signal<this, void>(this);
  private _grads = new ByIdStore<GradReport>(MAX_GRADS);
  private _gradsChanged = new Signal<this, void>(this);
  private _hasNotebook = false;
  private _kernelId: string | null = null;
  private _selectedId: string | null = null;
  private _current: Diagnosis | null = null;
  private _diagnosesChanged = new Signal<this, void>(this);
  private _currentChanged = new Signal<this, Diagnosis | null>(this);
  private _diagnosisReceived = new Signal<this, IDiagnosisEvent>(this);
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
