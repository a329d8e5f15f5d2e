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
  parseKernelMessage
} from './protocol';

/**
 * A diagnosis received from one kernel.
 */
export interface IDiagnosisEvent {
  readonly kernelId: string;
  readonly diagnosis: Diagnosis;
}

/**
 * What is known about one kernel.
 */
interface IKernelState {
  /** The newest comm the kernel opened, or null once it is closed. */
  comm: Kernel.IComm | null;
  readonly diagnoses: Diagnosis[];
  readonly pending: Map<string, PromiseDelegate<ReadonlyJSONValue | undefined>>;
}

/**
 * The vjpviz comms of all kernels: receives diagnoses and replies, sends requests.
 *
 * The kernel opens a fresh comm for every push and closes the previous one,
 * so requests go to the newest comm and a late close of an older comm is ignored.
 */
export class VjpvizComms {
  /**
   * Emitted for every diagnosis a kernel sends.
   */
  get diagnosisReceived(): ISignal<this, IDiagnosisEvent> {
    return this._diagnosisReceived;
  }

  /**
   * Listen for vjpviz comms on a kernel connection; repeated calls are no-ops.
   */
  attach(kernel: Kernel.IKernelConnection): void {
    if (this._attached.has(kernel)) {
      return;
    }
    this._attached.add(kernel);
    kernel.registerCommTarget(COMM_TARGET, (comm, msg) =>
      this._onCommOpen(kernel.id, comm, msg)
    );
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
    if (!state?.comm) {
      return Promise.reject(
        new Error(`no open ${COMM_TARGET} comm for kernel ${kernelId}`)
      );
    }
    const message: IRequestMessage = {
      v: PROTOCOL_VERSION,
      type: 'request',
      request_id: UUID.uuid4(),
      op,
      args
    };
    const reply = new PromiseDelegate<ReadonlyJSONValue | undefined>();
    state.pending.set(message.request_id, reply);
    state.comm.send(message);
    return reply.promise;
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
      state = { comm: null, diagnoses: [], pending: new Map() };
      this._kernels.set(kernelId, state);
    }
    return state;
  }

  private _onData(kernelId: string, state: IKernelState, data: unknown): void {
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
    if (message.type === 'diagnosis') {
      state.diagnoses.push(message.diagnosis);
      this._diagnosisReceived.emit({ kernelId, diagnosis: message.diagnosis });
      return;
    }
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
  private _kernels = new Map<string, IKernelState>();
  private _diagnosisReceived = new Signal<this, IDiagnosisEvent>(this);
}
