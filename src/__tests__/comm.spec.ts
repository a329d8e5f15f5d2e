import { Kernel, KernelMessage } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';

import { IDiagnosisEvent, VjpvizComms } from '../comm';
import { COMM_TARGET } from '../protocol';

type OpenHandler = (
  comm: Kernel.IComm,
  msg: KernelMessage.ICommOpenMsg
) => void;

/**
 * The parts of a kernel connection and its comms that VjpvizComms uses.
 */
class FakeKernel {
  readonly id = 'k1';
  handlers = new Map<string, OpenHandler>();

  registerCommTarget(target: string, handler: OpenHandler): void {
    this.handlers.set(target, handler);
  }

  /** Open a comm from the kernel side, as `comm.create_comm(data=...)` does. */
  open(data: JSONObject): FakeComm {
    const comm = new FakeComm();
    const msg = { content: { data } } as unknown as KernelMessage.ICommOpenMsg;
    this.handlers.get(COMM_TARGET)!(comm as unknown as Kernel.IComm, msg);
    return comm;
  }
}

class FakeComm {
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

const diagnosis = (n: number): JSONObject => ({
  v: 1,
  type: 'diagnosis',
  diagnosis: { n }
});

describe('VjpvizComms', () => {
  let kernel: FakeKernel;
  let comms: VjpvizComms;

  beforeEach(() => {
    kernel = new FakeKernel();
    comms = new VjpvizComms();
    comms.attach(kernel as unknown as Kernel.IKernelConnection);
  });

  it('keeps and signals diagnoses from comm_open and comm_msg', () => {
    const events: IDiagnosisEvent[] = [];
    comms.diagnosisReceived.connect((_, event) => events.push(event));
    kernel.open(diagnosis(1)).receive(diagnosis(2));
    expect(comms.diagnoses('k1')).toEqual([{ n: 1 }, { n: 2 }]);
    expect(events).toEqual([
      { kernelId: 'k1', diagnosis: { n: 1 } },
      { kernelId: 'k1', diagnosis: { n: 2 } }
    ]);
    expect(comms.diagnoses('other')).toEqual([]);
  });

  it('drops malformed messages', () => {
    const warn = jest
      .spyOn(console, 'warn')
      .mockImplementation(() => undefined);
    kernel.open({ v: 2, type: 'diagnosis', diagnosis: {} });
    expect(comms.diagnoses('k1')).toEqual([]);
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
  });

  it('matches replies to requests', async () => {
    const comm = kernel.open(diagnosis(1));
    const ok = comms.request('k1', 'verify', { fix: 'x' });
    const failed = comms.request('k1', 'apply');
    const [first, second] = comm.sent;
    expect(first).toMatchObject({
      v: 1,
      type: 'request',
      op: 'verify',
      args: { fix: 'x' }
    });
    comm.receive({
      v: 1,
      type: 'reply',
      request_id: second.request_id,
      ok: false,
      error: 'bad fix'
    });
    comm.receive({
      v: 1,
      type: 'reply',
      request_id: first.request_id,
      ok: true,
      result: 'fine'
    });
    await expect(ok).resolves.toBe('fine');
    await expect(failed).rejects.toThrow('bad fix');
  });

  it('ignores a late close of an older comm', async () => {
    const older = kernel.open(diagnosis(1));
    const newer = kernel.open(diagnosis(2));
    older.close();
    void comms.request('k1', 'view');
    expect(older.sent).toEqual([]);
    expect(newer.sent).toHaveLength(1);
    newer.close();
    await expect(comms.request('k1', 'view')).rejects.toThrow(
      'no open vjpviz comm'
    );
  });
});
