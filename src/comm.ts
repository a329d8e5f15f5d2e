/**
 * The channel to the kernels: their vjpviz comms, what they push and the
 * replies to requests, every message validated against the protocol schema.
 * It keeps nothing but the comms: the diagnoses live in the model (model.ts).
 */
import { Kernel, KernelMessage } from '@jupyterlab/services';
import {
  JSONObject,
  JSONValue,
  PromiseDelegate,
  UUID
} from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import {
  COMM_TARGET,
  Diagnosis,
  DiagnosisMessage,
  GradsMessage,
  KernelToPanelMessage,
  PROTOCOL_VERSION,
  RequestMessage,
  RequestOp,
  ResultOf,
  parseDiagnosis,
  parseKernelMessage,
  parseResult,
  WatchSeries
} from './protocol';

/**
 * A push from one kernel: a new diagnosis, with its fixes.
 */
export interface IPushEvent {
  readonly kernelId: string;
  readonly message: DiagnosisMessage;
}

/**
 * A push from one kernel: a vv.watch's series so far.
 */
export interface IWatchEvent {
  readonly kernelId: string;
  readonly series: WatchSeries;
}

/**
 * A push from one kernel: a vv.grads report, with its graph's default view.
 */
export interface IGradsEvent {
  readonly kernelId: string;
  readonly message: GradsMessage;
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

  private _onCommOpen(
    comm: Kernel.IComm,
    msg: KernelMessage.ICommOpenMsg
  ): void {
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
 * The vjpviz comms of all kernels, one KernelChannel each. After a page reload
 * (or once vjpviz says hello) the panel opens its own comm and asks for the
 * history.
 */
export class VjpvizChannels {
  /**
   * Emitted for every valid push (a diagnosis).
   */
  get pushed(): ISignal<this, IPushEvent> {
    return this._pushed;
  }

  /**
   * Emitted for every valid watch push (a vv.watch's series).
   */
  get watched(): ISignal<this, IWatchEvent> {
    return this._watched;
  }

  /**
   * Emitted for every valid grads push (a vv.grads report).
   */
  get graded(): ISignal<this, IGradsEvent> {
    return this._graded;
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
        this._kernelRestarted.emit(kernel.id);
      } else if (status === 'idle') {
        channel.resendUnanswered();
      }
    });
    void this._loadHistory(channel);
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
    message: KernelToPanelMessage
  ): void {
    if (message.type === 'hello') {
      // vjpviz was just loaded: open our own comm so the kernel knows we listen
      // (it pushes diagnoses only from then on).
      if (!channel.hasControl) {
        void this._loadHistory(channel);
      }
    } else if (message.type === 'diagnosis') {
      this._pushed.emit({ kernelId: channel.kernel.id, message });
    } else if (message.type === 'watch') {
      this._watched.emit({
        kernelId: channel.kernel.id,
        series: message.watch
      });
    } else if (message.type === 'grads') {
      this._graded.emit({ kernelId: channel.kernel.id, message });
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
  private _pushed = new Signal<this, IPushEvent>(this);
  private _watched = new Signal<this, IWatchEvent>(this);
  private _graded = new Signal<this, IGradsEvent>(this);
  private _historyLoaded = new Signal<this, IHistoryEvent>(this);
  private _kernelRestarted = new Signal<this, string>(this);
}
