import { Kernel, KernelMessage } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';
import { Signal } from '@lumino/signaling';

import { VjpvizChannels } from '../channel';
import { VjpvizModel } from '../model';
import { COMM_TARGET } from '../protocol';

type OpenHandler = (
  comm: Kernel.IComm,
  msg: KernelMessage.ICommOpenMsg
) => void;

/**
 * The parts of a kernel connection and its comms that the channels use.
 */
export class FakeKernel {
  readonly id = 'k1';
  readonly statusChanged = new Signal<this, string>(this);
  readonly iopubMessage = new Signal<this, KernelMessage.IIOPubMessage>(this);
  handlers = new Map<string, OpenHandler>();

  registerCommTarget(target: string, handler: OpenHandler): void {
    this.handlers.set(target, handler);
  }

  removeCommTarget(target: string, handler: OpenHandler): void {
    if (this.handlers.get(target) === handler) {
      this.handlers.delete(target);
    }
  }

  /** Publish a comm message on iopub, as the kernel says hello (on a comm never opened). */
  publish(data: JSONObject, commId = 'never-opened'): void {
    this.iopubMessage.emit({
      header: { msg_type: 'comm_msg' },
      content: { comm_id: commId, data }
    } as unknown as KernelMessage.IIOPubMessage);
  }

  /** Open a comm from the kernel side, as `comm.create_comm(data=...)` does. */
  open(data: JSONObject): FakeComm {
    const comm = new FakeComm();
    const msg = { content: { data } } as unknown as KernelMessage.ICommOpenMsg;
    this.handlers.get(COMM_TARGET)!(comm as unknown as Kernel.IComm, msg);
    return comm;
  }
}

/**
 * A comm that records what the panel sends and lets a test play the kernel.
 */
export class FakeComm {
  sent: JSONObject[] = [];
  onMsg: (msg: KernelMessage.ICommMsgMsg) => void = () => undefined;
  onClose: (msg: KernelMessage.ICommCloseMsg) => void = () => undefined;

  send(data: JSONObject): void {
    this.sent.push(data);
  }

  receive(data: JSONObject): void {
    this.onMsg({ content: { data } } as unknown as KernelMessage.ICommMsgMsg);
  }

  close(): void {
    this.onClose({} as KernelMessage.ICommCloseMsg);
  }
}

/**
 * The smallest valid diagnosis, numbered.
 */
export const body = (n: number): JSONObject => ({
  id: `d${n}`,
  kind: 'bwd_type',
  severity: 'error',
  headline: `h${n}`,
  graph: { nodes: [], edges: [] },
  fixes: []
});

/**
 * A diagnosis push carrying `body(n)`.
 */
export const diagnosis = (n: number): JSONObject => ({
  v: 1,
  type: 'diagnosis',
  diagnosis: body(n)
});

/**
 * A fake kernel attached to the channels, and the model over them, following
 * the kernel's notebook.
 */
export function modelOnKernel(kernel = new FakeKernel()): {
  kernel: FakeKernel;
  channels: VjpvizChannels;
  model: VjpvizModel;
} {
  const channels = new VjpvizChannels();
  const model = new VjpvizModel(channels);
  channels.attach(kernel as unknown as Kernel.IKernelConnection);
  model.follow({ kernelId: kernel.id });
  return { kernel, channels, model };
}

/** Answer the latest request sent on `comm` with `result`. */
export function reply(comm: FakeComm, result: JSONObject): void {
  comm.receive({
    v: 1,
    type: 'reply',
    request_id: comm.sent[comm.sent.length - 1].request_id,
    ok: true,
    result
  });
}

/** Fail any test in the calling block that makes a DOM node (the model is DOM-free). */
export function forbidDom(): void {
  beforeEach(() => {
    jest.spyOn(document, 'createElement').mockImplementation(() => {
      throw new Error('the model made a DOM node');
    });
  });
  afterEach(() => jest.restoreAllMocks());
}

/**
 * A kernel whose control comm (the one the model opens to ask for the history) is
 * `control`, and the messages that comm was opened with: what a panel opened on a
 * kernel that has run cells sees first.
 */
export function kernelWithControl(): {
  kernel: FakeKernel;
  control: FakeComm;
  opened: JSONObject[];
} {
  const kernel = new FakeKernel();
  const control = new FakeComm();
  const opened: JSONObject[] = [];
  (control as unknown as { open: (d: JSONObject) => void }).open = d => {
    opened.push(d);
  };
  (kernel as unknown as { createComm: () => FakeComm }).createComm = () =>
    control;
  return { kernel, control, opened };
}

/**
 * Answer the history request `control` was opened with (`opened[0]`) with `diagnoses`;
 * then let what the model asks next go out.
 */
export async function answerHistory(
  control: FakeComm,
  opened: JSONObject[],
  diagnoses: JSONObject[] = []
): Promise<void> {
  control.receive({
    v: 1,
    type: 'reply',
    request_id: opened[0].request_id as string,
    ok: true,
    result: { diagnoses }
  });
  await new Promise(r => setTimeout(r, 0));
}
