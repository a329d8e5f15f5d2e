import { Kernel, KernelMessage } from '@jupyterlab/services';
import {
  JSONObject,
  PromiseDelegate,
  ReadonlyJSONValue,
  UUID
} from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import {
  COMM_TARGET,
  Diagnosis,
  IRequestMessage,
  PROTOCOL_VERSION,
  RequestOp,
  fields,
  parseKernelMessage
} from './protocol';

/**
 * A diagnosis received from one kernel.
 */
export interface IDiagnosisEvent {
  readonly kernelId: string;
  readonly diagnosis: Diagnosis;
  /** performance.now() when the message arrived. */
  readonly receivedAt?: number;
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

/**
 * What is known about one kernel.
 */
interface IKernelState {
  /** The newest comm the kernel opened, or null once it is closed. */
  comm: Kernel.IComm | null;
  /** A comm the panel opened itself (survives pushes), or null. */
  control: Kernel.IComm | null;
  readonly diagnoses: Diagnosis[];
  readonly pending: Map<string, PromiseDelegate<ReadonlyJSONValue | undefined>>;
  /** Requests sent and not yet answered, to send once more if the kernel dropped them. */
  readonly unanswered: Map<string, IUnanswered>;
}

interface IUnanswered {
  readonly message: IRequestMessage;
  readonly sentAt: number;
}

/**
 * The vjpviz comms of all kernels: receives diagnoses and replies, sends requests.
 *
 * The kernel opens a fresh comm for every push and closes the previous one,
 * so requests go to the newest comm and a late close of an older comm is ignored.
 * After a page reload the panel opens its own comm and asks for the history.
 */
export class VjpvizComms {
  /**
   * Emitted for every diagnosis a kernel sends.
   */
  get diagnosisReceived(): ISignal<this, IDiagnosisEvent> {
    return this._diagnosisReceived;
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
    if (this._attached.has(kernel)) {
      return;
    }
    this._attached.add(kernel);
    this._connections.set(kernel.id, kernel);
    kernel.registerCommTarget(COMM_TARGET, (comm, msg) =>
      this._onCommOpen(kernel.id, comm, msg)
    );
    kernel.statusChanged?.connect((_, status) => {
      if (status === 'restarting' || status === 'autorestarting') {
        this._forget(kernel.id);
      } else if (status === 'idle') {
        this._resendUnanswered(kernel.id);
      }
    });
    if (typeof kernel.createComm === 'function') {
      void this._openControl(kernel);
    }
  }

  /**
   * The diagnoses received from a kernel, oldest first.
   */
  diagnoses(kernelId: string): readonly Diagnosis[] {
    return this._kernels.get(kernelId)?.diagnoses ?? [];
  }

  /**
   * Ask a kernel for an operation; resolves with the reply's result.
   */
  request(
    kernelId: string,
    op: RequestOp,
    args: JSONObject = {}
  ): Promise<ReadonlyJSONValue | undefined> {
    const state = this._kernels.get(kernelId);
    const comm = state?.control ?? state?.comm;
    if (!state || !comm) {
      return Promise.reject(
        new Error(`no open ${COMM_TARGET} comm for kernel ${kernelId}`)
      );
    }
    const message = this._message(op, args);
    const reply = new PromiseDelegate<ReadonlyJSONValue | undefined>();
    state.pending.set(message.request_id, reply);
    state.unanswered.set(message.request_id, { message, sentAt: Date.now() });
    comm.send(message);
    return reply.promise;
  }

  /**
   * A request sent while a cell was failing can be lost (its comm closed by a
   * newer push, or the message dropped while the kernel aborted the queue). The
   * kernel answers in order, so one still unanswered when it goes idle is lost:
   * send it once more on the current comm. Every op is safe to repeat.
   */
  private _resendUnanswered(kernelId: string): void {
    const state = this._kernels.get(kernelId);
    const comm = state?.control ?? state?.comm;
    if (!state || !comm) {
      return;
    }
    const now = Date.now();
    for (const [id, { message, sentAt }] of state.unanswered) {
      if (now - sentAt >= RESEND_AFTER_MS) {
        state.unanswered.delete(id);
        comm.send(message);
      }
    }
  }

  private _message(op: RequestOp, args: JSONObject): IRequestMessage {
    return {
      v: PROTOCOL_VERSION,
      type: 'request',
      request_id: UUID.uuid4(),
      op,
      args
    };
  }

  /**
   * Open a panel-side comm and ask for the history. A kernel without
   * `%load_ext vjpviz` closes it at once; then pushes are the only way in.
   */
  private async _openControl(kernel: Kernel.IKernelConnection): Promise<void> {
    const kernelId = kernel.id;
    const state = this._state(kernelId);
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch (error) {
      return;
    }
    const message = this._message('history', {});
    const reply = new PromiseDelegate<ReadonlyJSONValue | undefined>();
    state.pending.set(message.request_id, reply);
    comm.onMsg = msg => this._onData(kernelId, state, msg.content.data);
    comm.onClose = () => {
      if (state.control === comm) {
        state.control = null;
      }
      const pending = state.pending.get(message.request_id);
      if (pending) {
        state.pending.delete(message.request_id);
        pending.reject(new Error('the kernel closed the vjpviz comm'));
      }
    };
    state.control = comm;
    try {
      comm.open(message);
      const result = (await reply.promise) as JSONObject | undefined;
      const history = result?.diagnoses;
      if (Array.isArray(history)) {
        const known = new Set(state.diagnoses.map(d => fields(d).id));
        for (const d of history) {
          try {
            parseKernelMessage({ v: PROTOCOL_VERSION, type: 'diagnosis', diagnosis: d });
          } catch {
            continue;
          }
          const id = fields(d as Diagnosis).id;
          if (!known.has(id)) {
            state.diagnoses.push(d as Diagnosis);
          }
        }
        state.diagnoses.sort(
          (a, b) => idNumber(fields(a).id) - idNumber(fields(b).id)
        );
        dropOldest(state.diagnoses);
        this._listChanged.emit(kernelId);
      }
    } catch {
      // No vjpviz in this kernel (yet): pushes will bring a comm.
    }
  }

  private _forget(kernelId: string): void {
    const state = this._kernels.get(kernelId);
    if (!state) {
      return;
    }
    state.diagnoses.length = 0;
    state.comm = null;
    state.control = null;
    for (const pending of state.pending.values()) {
      pending.reject(new Error('the kernel restarted'));
    }
    state.pending.clear();
    state.unanswered.clear();
    this._listChanged.emit(kernelId);
  }

  private _onCommOpen(
    kernelId: string,
    comm: Kernel.IComm,
    msg: KernelMessage.ICommOpenMsg
  ): void {
    const state = this._state(kernelId);
    state.comm = comm;
    comm.onMsg = commMsg => this._onData(kernelId, state, commMsg.content.data);
    comm.onClose = () => {
      if (state.comm === comm) {
        state.comm = null;
      }
    };
    this._onData(kernelId, state, msg.content.data);
  }

  private _state(kernelId: string): IKernelState {
    let state = this._kernels.get(kernelId);
    if (!state) {
      state = {
        comm: null,
        control: null,
        diagnoses: [],
        pending: new Map(),
        unanswered: new Map()
      };
      this._kernels.set(kernelId, state);
    }
    return state;
  }

  private _onData(kernelId: string, state: IKernelState, data: unknown): void {
    const receivedAt =
      typeof performance !== 'undefined' ? performance.now() : Date.now();
    let message;
    try {
      message = parseKernelMessage(data);
    } catch (error) {
      console.warn(
        `jupyter-vjpviz: dropped a message from kernel ${kernelId}:`,
        error
      );
      return;
    }
    if (message.type === 'hello') {
      // vjpviz was just loaded: open our own comm so the kernel knows we listen.
      const kernel = this._connections.get(kernelId);
      if (kernel && !state.control && typeof kernel.createComm === 'function') {
        void this._openControl(kernel);
      }
      return;
    }
    if (message.type === 'diagnosis') {
      const id = fields(message.diagnosis).id;
      if (state.diagnoses.some(d => fields(d).id === id)) {
        return;
      }
      state.diagnoses.push(message.diagnosis);
      dropOldest(state.diagnoses);
      mark('vjpviz:diagnosis-received');
      this._diagnosisReceived.emit({
        kernelId,
        diagnosis: message.diagnosis,
        receivedAt
      });
      return;
    }
    state.unanswered.delete(message.request_id);
    const reply = state.pending.get(message.request_id);
    if (!reply) {
      return;
    }
    state.pending.delete(message.request_id);
    if (message.ok) {
      reply.resolve(message.result);
    } else {
      reply.reject(new Error(message.error));
    }
  }

  private _attached = new WeakSet<Kernel.IKernelConnection>();
  private _connections = new Map<string, Kernel.IKernelConnection>();
  private _kernels = new Map<string, IKernelState>();
  private _diagnosisReceived = new Signal<this, IDiagnosisEvent>(this);
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
