import { Kernel } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';

import { IHistoryEvent, IPushEvent, VjpvizChannels } from '../channel';
import { COMM_TARGET } from '../protocol';
import { FakeComm, FakeKernel, answerHistory, body, diagnosis } from './fakes';

describe('VjpvizChannels', () => {
  let kernel: FakeKernel;
  let channels: VjpvizChannels;
  let pushes: IPushEvent[];

  beforeEach(() => {
    kernel = new FakeKernel();
    channels = new VjpvizChannels();
    pushes = [];
    channels.pushed.connect((_, event) => pushes.push(event));
    channels.attach(kernel as unknown as Kernel.IKernelConnection);
  });

  it('signals the validated pushes of comm_open and comm_msg', () => {
    kernel.open(diagnosis(1)).receive(diagnosis(2));
    expect(pushes).toEqual([
      { kernelId: 'k1', message: diagnosis(1) },
      { kernelId: 'k1', message: diagnosis(2) }
    ]);
  });

  it('drops malformed messages, saying so', () => {
    const warn = jest
      .spyOn(console, 'warn')
      .mockImplementation(() => undefined);
    kernel.open({ v: 2, type: 'diagnosis', diagnosis: {} });
    kernel.open({ v: 1, type: 'diagnosis', diagnosis: { id: 'd1' } });
    expect(pushes).toEqual([]);
    expect(warn).toHaveBeenCalledTimes(2);
    warn.mockRestore();
  });

  it('matches replies to requests', async () => {
    const comm = kernel.open(diagnosis(1));
    const ok = channels.request('k1', 'verify', { code: 'x' });
    const failed = channels.request('k1', 'apply');
    const [first, second] = comm.sent;
    expect(first).toMatchObject({
      v: 1,
      type: 'request',
      op: 'verify',
      args: { code: 'x' }
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
      result: { pass: true }
    });
    await expect(ok).resolves.toEqual({ pass: true });
    await expect(failed).rejects.toThrow('bad fix');
  });

  it('rejects a request whose reply is malformed, saying why, and keeps the rest', async () => {
    const comm = kernel.open(diagnosis(1));
    const view = channels.request('k1', 'view', { report_id: 'd1' });
    const verify = channels.request('k1', 'verify', {
      report_id: 'd1',
      code: ''
    });
    const [first, second] = comm.sent;
    // A result that is not a View, and a reply that is no reply at all.
    comm.receive({
      v: 1,
      type: 'reply',
      request_id: first.request_id,
      ok: true,
      result: { svg: 3, expanded: [] }
    });
    comm.receive({
      v: 1,
      type: 'reply',
      request_id: second.request_id,
      ok: 'yes'
    });
    await expect(view).rejects.toThrow(
      "the kernel's view result is malformed at /svg: must be string"
    );
    await expect(verify).rejects.toThrow(
      "the kernel's reply could not be read: vjpviz reply message is malformed at /ok"
    );
    // The comm still works.
    const again = channels.request('k1', 'view', { report_id: 'd1' });
    comm.receive({
      v: 1,
      type: 'reply',
      request_id: comm.sent[2].request_id,
      ok: true,
      result: { svg: '<svg/>', expanded: [] }
    });
    await expect(again).resolves.toEqual({ svg: '<svg/>', expanded: [] });
  });

  it('sends an unanswered request once more when the kernel goes idle', async () => {
    const first = kernel.open(diagnosis(1));
    const now = jest.spyOn(Date, 'now').mockReturnValue(1000);
    const reply = channels.request('k1', 'view', { report_id: 'd1' });
    kernel.statusChanged.emit('idle'); // too soon: the kernel may not have read it yet
    expect(first.sent).toHaveLength(1);
    now.mockReturnValue(2000);
    // A failing cell's push replaced the comm before the kernel read the request.
    const second = kernel.open(diagnosis(2));
    kernel.statusChanged.emit('idle');
    expect(second.sent).toEqual(first.sent);
    const id = first.sent[0].request_id as string;
    const view = { svg: '<svg/>', expanded: [] };
    second.receive({
      v: 1,
      type: 'reply',
      request_id: id,
      ok: true,
      result: view
    });
    await expect(reply).resolves.toEqual(view);
    kernel.statusChanged.emit('idle'); // answered: never sent again
    expect(second.sent).toHaveLength(1);
    now.mockRestore();
  });

  it('ignores a late close of an older comm', async () => {
    const older = kernel.open(diagnosis(1));
    const newer = kernel.open(diagnosis(2));
    older.close();
    void channels.request('k1', 'view');
    expect(older.sent).toEqual([]);
    expect(newer.sent).toHaveLength(1);
    newer.close();
    await expect(channels.request('k1', 'view')).rejects.toThrow(
      'no open vjpviz comm'
    );
    await expect(channels.request('k9', 'view')).rejects.toThrow(
      'no open vjpviz comm for kernel k9'
    );
  });

  it('says when a kernel restarts, and fails what it was asked', async () => {
    const restarted: string[] = [];
    channels.kernelRestarted.connect((_, id) => restarted.push(id));
    kernel.open(diagnosis(1));
    const pending = channels.request('k1', 'view');
    kernel.statusChanged.emit('restarting');
    expect(restarted).toEqual(['k1']);
    await expect(pending).rejects.toThrow('the kernel restarted');
  });

  it('hands everything back when disposed: comm target, comms, requests, signals', async () => {
    const restarted: string[] = [];
    channels.kernelRestarted.connect((_, id) => restarted.push(id));
    const comm = kernel.open(diagnosis(1));
    const closed = jest.spyOn(comm, 'close');
    const pending = channels.request('k1', 'view', { report_id: 'd1' });
    channels.dispose();
    expect(channels.isDisposed).toBe(true);
    expect(kernel.handlers.has(COMM_TARGET)).toBe(false);
    expect(closed).toHaveBeenCalledTimes(1);
    await expect(pending).rejects.toThrow('the vjpviz channel was disposed');
    // The kernel's signals reach nothing, and nothing listens to the channels.
    kernel.statusChanged.emit('restarting');
    kernel.publish({ v: 1, type: 'hello' });
    expect(restarted).toEqual([]);
    channels.dispose(); // twice: a no-op
    await expect(channels.request('k1', 'view')).rejects.toThrow(
      'no open vjpviz comm'
    );
  });
});

/**
 * A fake kernel whose `createComm` hands out comms that record what they open with.
 */
function kernelWithControls() {
  const kernel = new FakeKernel();
  const opened: JSONObject[] = [];
  const controls: FakeComm[] = [];
  (kernel as unknown as { createComm: () => FakeComm }).createComm = () => {
    const control = new FakeComm();
    controls.push(control);
    (control as unknown as { open: (d: JSONObject) => void }).open = d => {
      opened.push(d);
    };
    return control;
  };
  return { kernel, opened, controls };
}

describe('VjpvizChannels when vjpviz is loaded after the panel attached', () => {
  it('answers the hello heard on iopub by opening its own comm, once', () => {
    const { kernel, opened, controls } = kernelWithControls();
    const channels = new VjpvizChannels();
    channels.attach(kernel as unknown as Kernel.IKernelConnection);
    const [early] = opened; // vjpviz not loaded yet: the kernel closes this one
    expect(early).toMatchObject({ type: 'request', op: 'history' });
    controls[0].close();
    kernel.publish({ v: 1, type: 'diagnosis', diagnosis: {} }); // not a hello: ignored
    expect(opened).toHaveLength(1);
    kernel.publish({ v: 1, type: 'hello' });
    kernel.publish({ v: 1, type: 'hello' });
    expect(opened).toHaveLength(2);
    expect(opened[1]).toMatchObject({ v: 1, type: 'request', op: 'history' });
  });
});

describe('VjpvizChannels after a page reload', () => {
  it('opens its own comm and loads the history, each diagnosis validated', async () => {
    const { kernel, opened, controls } = kernelWithControls();
    const channels = new VjpvizChannels();
    const histories: IHistoryEvent[] = [];
    channels.historyLoaded.connect((_, event) => histories.push(event));
    channels.attach(kernel as unknown as Kernel.IKernelConnection);
    expect(opened).toHaveLength(1);
    expect(opened[0]).toMatchObject({ v: 1, type: 'request', op: 'history' });
    const warn = jest
      .spyOn(console, 'warn')
      .mockImplementation(() => undefined);
    await answerHistory(controls[0], opened, [body(2), body(1), { bad: true }]);
    expect(histories).toEqual([
      { kernelId: 'k1', diagnoses: [body(2), body(1)] }
    ]);
    expect(warn.mock.calls.map(c => c[0])).toEqual([
      'jupyter-vjpviz: skipped a diagnosis of the history:'
    ]);
    warn.mockRestore();
    // Requests now go on the panel's comm.
    void channels.request('k1', 'view', { report_id: 'd1' });
    expect(controls[0].sent).toHaveLength(1);
  });
});
