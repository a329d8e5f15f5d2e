/**
 * The channel to the kernels: their vjpviz comms, what they push and the
 * replies to requests, every message validated against the protocol schema.
 * It keeps nothing but the comms: what they bring lives in the model (model.ts).
 * Disposing it hands the comms back: comm targets unregistered, comms closed,
 * requests still waiting rejected, signal connections cut.
 */
import { Kernel, KernelMessage } from '@jupyterlab/services';
import {
  JSONObject,
  JSONValue,
  PromiseDelegate,
  UUID
} from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import {
  COMM_TARGET,
  Diagnosis,
  HelloMessage,
  KernelToPanelMessage,
  PROTOCOL_VERSION,
  PushMessage,
  RequestMessage,
  RequestOp,
  ResultOf,
  parseDiagnosis,
  parseKernelMessage,
  parseResult
} from './protocol';

/**
 * A push from one kernel (a diagnosis with its fixes, a vv.watch's series so far,
 * a vv.grads report): each feature's model takes the messages of its type.
 */
export interface IPushEvent {
  readonly kernelId: string;
  readonly message: PushMessage;
}

/**
 * A kernel's history (after a page reload, or vjpviz loaded late).
 */
export interface IHistoryEvent {
  readonly kernelId: string;
  readonly diagnoses: readonly Diagnosis[];
}

/**
 * How long a request waits, unanswered, before an idle kernel gets it again.
 */
const RESEND_AFTER_MS = 500;

interface IPending {
  readonly op: RequestOp;
  readonly reply: PromiseDelegate<unknown>;
}

/**
 * Disposed once: the first `dispose` marks it disposed, then runs `onDispose`;
 * later calls do nothing.
 */
abstract class DisposedOnce implements IDisposable {
  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this.onDispose();
  }

  protected abstract onDispose(): void;

  private _isDisposed = false;
}

/**
 * The transport to one kernel: its vjpviz comms, requests and their replies.
 *
 * The kernel opens a fresh comm for every push and closes the previous one,
 * so requests go to the newest comm (or the panel's own, which survives pushes)
 * and a late close of an older comm is ignored. Every message is validated
 * against the schema; a malformed reply rejects its request with the reason.
 */
export class KernelChannel extends DisposedOnce {
  constructor(
    readonly kernel: Kernel.IKernelConnection,
    private readonly _handlers: KernelChannel.IHandlers
  ) {
    super();
    kernel.registerCommTarget(COMM_TARGET, this._onCommOpen);
    kernel.iopubMessage.connect(this._onIopub, this);
    kernel.statusChanged.connect(this._onStatus, this);
  }

  /**
   * Stop listening to the kernel: its comm target unregistered, the comms closed,
   * every request still waiting rejected.
   */
  protected onDispose(): void {
    this.kernel.removeCommTarget(COMM_TARGET, this._onCommOpen);
    Signal.disconnectReceiver(this);
    const open = [this._comm, this._control];
    this._fail('the vjpviz channel was disposed');
    for (const comm of open) {
      if (comm && !comm.isDisposed && !this.kernel.isDisposed) {
        comm.close();
      }
    }
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
   * Forget the comms and reject every request waiting, saying `why`: no reply
   * will come (the kernel restarted, or the channel is disposed).
   */
  private _fail(why: string): void {
    this._comm = null;
    this._control = null;
    for (const { reply } of this._pending.values()) {
      reply.reject(new Error(why));
    }
    this._pending.clear();
    this._unanswered.clear();
  }

  /**
   * A restart drops the comms and every request; an idle kernel has answered all
   * it got, so one still unanswered was lost and goes again.
   */
  private _onStatus(_: unknown, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting') {
      this._fail('the kernel restarted');
      this._handlers.restarted();
    } else if (status === 'idle') {
      this.resendUnanswered();
    }
  }

  /**
   * The kernel says hello on a comm it never opens (deliver/comm.py: frontends
   * without a panel drop it unread); the panel reads it off the iopub stream.
   */
  private _onIopub(_: unknown, msg: KernelMessage.IIOPubMessage): void {
    const data = (msg.content as { data?: { type?: unknown } }).data;
    if (msg.header.msg_type === 'comm_msg' && data?.type === 'hello') {
      this._onData(data);
    }
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

  /**
   * A comm the kernel opened (a push); bound, so that dispose can unregister it.
   */
  private readonly _onCommOpen = (
    comm: Kernel.IComm,
    msg: KernelMessage.ICommOpenMsg
  ): void => {
    this._comm = comm;
    comm.onMsg = commMsg => this._onData(commMsg.content.data);
    comm.onClose = () => {
      if (this._comm === comm) {
        this._comm = null;
      }
    };
    this._onData(msg.content.data);
  };

  private _onData(data: unknown): void {
    let message: KernelToPanelMessage;
    try {
      message = parseKernelMessage(data);
    } catch (error) {
      this._onMalformed(data, error as Error);
      return;
    }
    if (message.type !== 'reply') {
      this._handlers.message(message);
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
      reply.reject(
        new Error(`the kernel's reply could not be read: ${error.message}`)
      );
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
 * The kernel channel's statics.
 */
export namespace KernelChannel {
  /**
   * What a kernel channel tells its owner.
   */
  export interface IHandlers {
    /** A valid message that is not a reply: the hello, or a push. */
    message(message: HelloMessage | PushMessage): void;
    /** The kernel restarted: its comms and state are gone. */
    restarted(): void;
  }
}

/**
 * The vjpviz comms of all kernels, one KernelChannel each. After a page reload
 * (or once vjpviz says hello) the panel opens its own comm and asks for the
 * history.
 */
export class VjpvizChannels extends DisposedOnce {
  /**
   * Emitted for every valid push, whatever its type.
   */
  get pushed(): ISignal<this, IPushEvent> {
    return this._pushed;
  }

  /**
   * Emitted with a kernel's history, each diagnosis validated on its own.
   */
  get historyLoaded(): ISignal<this, IHistoryEvent> {
    return this._historyLoaded;
  }

  /**
   * Emitted with a kernel id when it restarts: its comms and state are gone.
   */
  get kernelRestarted(): ISignal<this, string> {
    return this._kernelRestarted;
  }

  /**
   * Listen for vjpviz comms on a kernel connection; repeated calls are no-ops.
   */
  attach(kernel: Kernel.IKernelConnection): void {
    if (this.isDisposed || this._channels.get(kernel.id)?.kernel === kernel) {
      return;
    }
    const channel = new KernelChannel(kernel, {
      message: message => this._onMessage(channel, message),
      restarted: () => this._kernelRestarted.emit(kernel.id)
    });
    // Another connection to the same kernel (a second notebook on it) takes the
    // requests; the first still hears its pushes until the channels are disposed.
    this._channels.set(kernel.id, channel);
    this._attached.push(channel);
    void this._loadHistory(channel);
  }

  /**
   * Dispose every kernel channel and disconnect whoever listens to these signals.
   */
  protected onDispose(): void {
    this._attached.forEach(channel => channel.dispose());
    this._attached = [];
    this._channels.clear();
    Signal.clearData(this);
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
      : Promise.reject(
          new Error(`no open ${COMM_TARGET} comm for kernel ${kernelId}`)
        );
  }

  private _onMessage(
    channel: KernelChannel,
    message: HelloMessage | PushMessage
  ): void {
    if (message.type === 'hello') {
      // vjpviz was just loaded: open our own comm so the kernel knows we listen
      // (it pushes diagnoses only from then on).
      if (!channel.hasControl) {
        void this._loadHistory(channel);
      }
    } else {
      this._pushed.emit({ kernelId: channel.kernel.id, message });
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
    const diagnoses: Diagnosis[] = [];
    for (const d of history.diagnoses) {
      try {
        diagnoses.push(parseDiagnosis(d));
      } catch (error) {
        console.warn(
          'jupyter-vjpviz: skipped a diagnosis of the history:',
          error
        );
      }
    }
    this._historyLoaded.emit({ kernelId: channel.kernel.id, diagnoses });
  }

  private _channels = new Map<string, KernelChannel>();
  private _attached: KernelChannel[] = [];
  private _pushed = new Signal<this, IPushEvent>(this);
  private _historyLoaded = new Signal<this, IHistoryEvent>(this);
  private _kernelRestarted = new Signal<this, string>(this);
}
