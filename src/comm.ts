import { Kernel, KernelMessage } from '@jupyterlab/services';
import { JSONObject, JSONValue, PromiseDelegate, UUID } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import {
  COMM_TARGET,
  Diagnosis,
  Fix,
  KernelToPanelMessage,
  PROTOCOL_VERSION,
  RequestMessage,
  RequestOp,
  ResultOf,
  View,
  parseDiagnosis,
  parseKernelMessage,
  parseResult
} from './protocol';

/**
 * A diagnosis received from one kernel.
 */
export interface IDiagnosisEvent {
  readonly kernelId: string;
  readonly diagnosis: Diagnosis;
}

/**
 * How long a request waits, unanswered, before an idle kernel gets it again.
 */
const RESEND_AFTER_MS = 500;

/**
 * Diagnoses kept per kernel, newest; the kernel keeps as many (runtime.HISTORY_LIMIT),
 * so a training loop that fails every step cannot grow the page without limit.
 */
export const MAX_DIAGNOSES = 200;

interface IPending {
  readonly op: RequestOp;
  readonly reply: PromiseDelegate<unknown>;
}

/**
 * The transport to one kernel: its vjpviz comms, requests and their replies.
 *
 * The kernel opens a fresh comm for every push and closes the previous one,
 * so requests go to the newest comm (or the panel's own, which survives pushes)
 * and a late close of an older comm is ignored. Every message is validated
 * against the schema; a malformed reply rejects its request with the reason.
 */
export class KernelChannel {
  constructor(
    readonly kernel: Kernel.IKernelConnection,
    private readonly _onMessage: (message: KernelToPanelMessage) => void
  ) {
    kernel.registerCommTarget(COMM_TARGET, (comm, msg) =>
      this._onCommOpen(comm, msg)
    );
    // The kernel says hello on a comm it never opens (deliver/comm.py: frontends
    // without a panel drop it unread); the panel reads it off the iopub stream.
    kernel.iopubMessage.connect((_, msg) => {
      const data = (msg.content as { data?: { type?: unknown } }).data;
      if (msg.header.msg_type === 'comm_msg' && data?.type === 'hello') {
        this._onData(data);
      }
    });
  }

  /**
   * Whether the panel's own comm is open.
   */
  get hasControl(): boolean {
    return this._control !== null;
  }

  /**
   * Ask the kernel for an operation; resolves with the reply's validated result.
   */
  request<Op extends RequestOp>(
    op: Op,
    args: JSONObject = {}
  ): Promise<ResultOf[Op]> {
    const comm = this._control ?? this._comm;
    if (!comm) {
      return Promise.reject(
        new Error(`no open ${COMM_TARGET} comm for kernel ${this.kernel.id}`)
      );
    }
    const message = this._expect(op, args);
    this._unanswered.set(message.request_id, { message, sentAt: Date.now() });
    comm.send(message as unknown as JSONValue);
    return this._pending.get(message.request_id)!.reply.promise as Promise<
      ResultOf[Op]
    >;
  }

  /**
   * Open a panel-side comm carrying a history request; resolves with its result.
   * A kernel without `%load_ext vjpviz` closes it at once (the promise rejects).
   */
  openControl(): Promise<ResultOf['history']> {
    const comm = this.kernel.createComm(COMM_TARGET);
    const message = this._expect('history', {});
    comm.onMsg = msg => this._onData(msg.content.data);
    comm.onClose = () => {
      if (this._control === comm) {
        this._control = null;
      }
      this._settle(message.request_id)?.reject(
        new Error('the kernel closed the vjpviz comm')
      );
    };
    this._control = comm;
    comm.open(message as unknown as JSONObject);
    return this._pending.get(message.request_id)!.reply.promise as Promise<
      ResultOf['history']
    >;
  }

  /**
   * A request sent while a cell was failing can be lost (its comm closed by a
   * newer push, or the message dropped while the kernel aborted the queue). The
   * kernel answers in order, so one still unanswered when it goes idle is lost:
   * send it once more on the current comm. Every op is safe to repeat.
   */
  resendUnanswered(): void {
    const comm = this._control ?? this._comm;
    const now = Date.now();
    for (const [id, { message, sentAt }] of comm ? this._unanswered : []) {
      if (now - sentAt >= RESEND_AFTER_MS) {
        this._unanswered.delete(id);
        comm!.send(message as unknown as JSONValue);
      }
    }
  }

  /**
   * The kernel restarted: its comms are gone and no request will be answered.
   */
  reset(): void {
    this._comm = null;
    this._control = null;
    for (const { reply } of this._pending.values()) {
      reply.reject(new Error('the kernel restarted'));
    }
    this._pending.clear();
    this._unanswered.clear();
  }

  private _expect(op: RequestOp, args: JSONObject): RequestMessage {
    const message: RequestMessage = {
      v: PROTOCOL_VERSION,
      type: 'request',
      request_id: UUID.uuid4(),
      op,
      args
    };
    this._pending.set(message.request_id, { op, reply: new PromiseDelegate() });
    return message;
  }

  private _settle(requestId: string): PromiseDelegate<unknown> | undefined {
    const pending = this._pending.get(requestId);
    this._pending.delete(requestId);
    this._unanswered.delete(requestId);
    return pending?.reply;
  }

  private _onCommOpen(comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg): void {
    this._comm = comm;
    comm.onMsg = commMsg => this._onData(commMsg.content.data);
    comm.onClose = () => {
      if (this._comm === comm) {
        this._comm = null;
      }
    };
    this._onData(msg.content.data);
  }

  private _onData(data: unknown): void {
    let message: KernelToPanelMessage;
    try {
      message = parseKernelMessage(data);
    } catch (error) {
      this._onMalformed(data, error as Error);
      return;
    }
    if (message.type !== 'reply') {
      this._onMessage(message);
      return;
    }
    const op = this._pending.get(message.request_id)?.op;
    const reply = this._settle(message.request_id);
    if (!reply || !op) {
      return;
    }
    if (!message.ok) {
      reply.reject(new Error(message.error));
      return;
    }
    try {
      reply.resolve(parseResult(op, message.result));
    } catch (error) {
      reply.reject(error);
    }
  }

  /**
   * A message that breaks the schema: the request it answers (if any) fails with
   * the reason, so the panel says so instead of waiting; anything else is logged.
   */
  private _onMalformed(data: unknown, error: Error): void {
    const requestId = (data as { request_id?: unknown } | null)?.request_id;
    const reply =
      typeof requestId === 'string' ? this._settle(requestId) : undefined;
    if (reply) {
      reply.reject(new Error(`the kernel's reply could not be read: ${error.message}`));
    } else {
      console.warn(
        `jupyter-vjpviz: dropped a message from kernel ${this.kernel.id}:`,
        error
      );
    }
  }

  private _comm: Kernel.IComm | null = null;
  private _control: Kernel.IComm | null = null;
  private _pending = new Map<string, IPending>();
  private _unanswered = new Map<
    string,
    { readonly message: RequestMessage; readonly sentAt: number }
  >();
}

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
   * Replace the fixes of a diagnosis (judged after it was pushed); false when its
   * id is unknown (dropped, or the kernel restarted).
   */
  setFixes(kernelId: string, id: string, fixes: Fix[]): boolean {
    const list = this._list(kernelId);
    const at = list.findIndex(d => d.id === id);
    if (at < 0) {
      return false;
    }
    list[at] = { ...list[at], fixes };
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
 * The vjpviz comms of all kernels: one KernelChannel per kernel feeding one
 * DiagnosisStore. After a page reload the panel opens its own comm and asks
 * for the history.
 */
export class VjpvizComms {
  /**
   * Emitted for every new diagnosis a kernel pushes.
   */
  get diagnosisReceived(): ISignal<this, IDiagnosisEvent> {
    return this._diagnosisReceived;
  }

  /**
   * Emitted when a diagnosis already received gets its fixes (judged after the push).
   */
  get fixesReceived(): ISignal<this, IDiagnosisEvent> {
    return this._fixesReceived;
  }

  /**
   * Emitted with a kernel id when its list changed other than by a push
   * (history loaded, kernel restarted).
   */
  get listChanged(): ISignal<this, string> {
    return this._listChanged;
  }

  /**
   * Listen for vjpviz comms on a kernel connection; repeated calls are no-ops.
   */
  attach(kernel: Kernel.IKernelConnection): void {
    if (this._channels.get(kernel.id)?.kernel === kernel) {
      return;
    }
    const channel = new KernelChannel(kernel, message =>
      this._onMessage(channel, message)
    );
    this._channels.set(kernel.id, channel);
    kernel.statusChanged.connect((_, status) => {
      if (status === 'restarting' || status === 'autorestarting') {
        channel.reset();
        this._store.clear(kernel.id);
        this._listChanged.emit(kernel.id);
      } else if (status === 'idle') {
        channel.resendUnanswered();
      }
    });
    void this._loadHistory(channel);
  }

  /**
   * The diagnoses received from a kernel, oldest first.
   */
  diagnoses(kernelId: string): readonly Diagnosis[] {
    return this._store.list(kernelId);
  }

  /**
   * The default view a kernel pushed with a diagnosis, drawn; null if none came.
   */
  pushedView(kernelId: string, id: string): View | null {
    return this._store.view(kernelId, id);
  }

  /**
   * Ask a kernel for an operation; resolves with the reply's validated result.
   */
  request<Op extends RequestOp>(
    kernelId: string,
    op: Op,
    args: JSONObject = {}
  ): Promise<ResultOf[Op]> {
    const channel = this._channels.get(kernelId);
    return channel
      ? channel.request(op, args)
      : Promise.reject(new Error(`no open ${COMM_TARGET} comm for kernel ${kernelId}`));
  }

  private _onMessage(channel: KernelChannel, message: KernelToPanelMessage): void {
    const kernelId = channel.kernel.id;
    if (message.type === 'hello') {
      // vjpviz was just loaded: open our own comm so the kernel knows we listen
      // (it pushes diagnoses only from then on).
      if (!channel.hasControl) {
        void this._loadHistory(channel);
      }
    } else if (message.type === 'diagnosis' && this._store.add(kernelId, message.diagnosis)) {
      mark('vjpviz:diagnosis-received');
      if (message.view) {
        this._store.setView(kernelId, message.diagnosis.id, message.view);
      }
      this._diagnosisReceived.emit({ kernelId, diagnosis: message.diagnosis });
    } else if (
      message.type === 'fixes' &&
      this._store.setFixes(kernelId, message.diagnosis_id, message.fixes)
    ) {
      const diagnosis = this._store
        .list(kernelId)
        .find(d => d.id === message.diagnosis_id)!;
      this._fixesReceived.emit({ kernelId, diagnosis });
    }
  }

  /**
   * The history, each diagnosis validated on its own: a malformed one is
   * skipped (and logged), the others kept.
   */
  private async _loadHistory(channel: KernelChannel): Promise<void> {
    let history: ResultOf['history'];
    try {
      history = await channel.openControl();
    } catch {
      return; // no vjpviz in this kernel (yet): pushes will bring a comm
    }
    const valid: Diagnosis[] = [];
    for (const d of history.diagnoses) {
      try {
        valid.push(parseDiagnosis(d));
      } catch (error) {
        console.warn('jupyter-vjpviz: skipped a diagnosis of the history:', error);
      }
    }
    this._store.merge(channel.kernel.id, valid);
    this._listChanged.emit(channel.kernel.id);
  }

  private _channels = new Map<string, KernelChannel>();
  private _store = new DiagnosisStore();
  private _diagnosisReceived = new Signal<this, IDiagnosisEvent>(this);
  private _fixesReceived = new Signal<this, IDiagnosisEvent>(this);
  private _listChanged = new Signal<this, string>(this);
}

/**
 * A performance mark (the browser test reads them to time the panel).
 */
export function mark(name: string): void {
  if (typeof performance !== 'undefined' && performance.mark) {
    performance.mark(name);
  }
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
