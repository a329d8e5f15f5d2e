import { Kernel } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';

import { IDiagnosisEvent, MAX_DIAGNOSES, VjpvizComms } from '../comm';
import { FakeComm, FakeKernel, body, diagnosis } from './fakes';

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
    expect(comms.diagnoses('k1')).toEqual([body(1), body(2)]);
    expect(events).toMatchObject([
      { kernelId: 'k1', diagnosis: body(1) },
      { kernelId: 'k1', diagnosis: body(2) }
    ]);
    // A repeated push (same id) is not a new diagnosis.
    kernel.open(diagnosis(2));
    expect(comms.diagnoses('k1')).toHaveLength(2);
    expect(comms.diagnoses('other')).toEqual([]);
  });

  it('gives a pushed diagnosis the fixes judged after it, and signals them', () => {
    const events: IDiagnosisEvent[] = [];
    comms.fixesReceived.connect((_, event) => events.push(event));
    kernel.open(diagnosis(1)).receive(diagnosis(2));
    const fixes = [{ title: 'cast back', code: 'return (g.astype(x.dtype),)' }];
    kernel.open({ v: 1, type: 'fixes', diagnosis_id: 'd1', fixes });
    expect(comms.diagnoses('k1')).toEqual([{ ...body(1), fixes }, body(2)]);
    expect(events).toEqual([{ kernelId: 'k1', diagnosis: { ...body(1), fixes } }]);
    // Fixes of a diagnosis this panel never had (dropped, kernel restarted): ignored.
    kernel.open({ v: 1, type: 'fixes', diagnosis_id: 'd9', fixes });
    expect(events).toHaveLength(1);
    expect(comms.diagnoses('k1')).toHaveLength(2);
  });

  it('keeps the default view drawn with a push', () => {
    const view = { svg: '<svg/>', expanded: [], collapsed: [] };
    kernel.open({ ...diagnosis(1), view }).receive(diagnosis(2));
    expect(comms.pushedView('k1', 'd1')).toEqual(view);
    expect(comms.pushedView('k1', 'd2')).toBeNull();
    kernel.statusChanged.emit('restarting');
    expect(comms.pushedView('k1', 'd1')).toBeNull();
  });

  it('keeps the newest MAX_DIAGNOSES of a kernel that fails every step', () => {
    for (let n = 1; n <= MAX_DIAGNOSES + 25; n++) {
      kernel.open(diagnosis(n));
    }
    const kept = comms.diagnoses('k1');
    expect(kept).toHaveLength(MAX_DIAGNOSES);
    expect(kept[0]).toEqual(body(26));
    expect(kept[kept.length - 1]).toEqual(body(MAX_DIAGNOSES + 25));
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
    const ok = comms.request('k1', 'verify', { code: 'x' });
    const failed = comms.request('k1', 'apply');
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
    const view = comms.request('k1', 'view', { diagnosis_id: 'd1' });
    const verify = comms.request('k1', 'verify', { diagnosis_id: 'd1', code: '' });
    const [first, second] = comm.sent;
    // A result that is not a View, and a reply that is no reply at all.
    comm.receive({ v: 1, type: 'reply', request_id: first.request_id, ok: true, result: { svg: 3, expanded: [] } });
    comm.receive({ v: 1, type: 'reply', request_id: second.request_id, ok: 'yes' });
    await expect(view).rejects.toThrow("the kernel's view result is malformed at /svg: must be string");
    await expect(verify).rejects.toThrow("the kernel's reply could not be read: vjpviz reply message is malformed at /ok");
    expect(comms.diagnoses('k1')).toEqual([body(1)]);
    // The comm still works.
    const again = comms.request('k1', 'view', { diagnosis_id: 'd1' });
    comm.receive({ v: 1, type: 'reply', request_id: comm.sent[2].request_id, ok: true, result: { svg: '<svg/>', expanded: [] } });
    await expect(again).resolves.toEqual({ svg: '<svg/>', expanded: [] });
  });

  it('sends an unanswered request once more when the kernel goes idle', async () => {
    const first = kernel.open(diagnosis(1));
    const now = jest.spyOn(Date, 'now').mockReturnValue(1000);
    const reply = comms.request('k1', 'view', { diagnosis_id: 'd1' });
    kernel.statusChanged.emit('idle'); // too soon: the kernel may not have read it yet
    expect(first.sent).toHaveLength(1);
    now.mockReturnValue(2000);
    // A failing cell's push replaced the comm before the kernel read the request.
    const second = kernel.open(diagnosis(2));
    kernel.statusChanged.emit('idle');
    expect(second.sent).toEqual(first.sent);
    const id = first.sent[0].request_id as string;
    const view = { svg: '<svg/>', expanded: [] };
    second.receive({ v: 1, type: 'reply', request_id: id, ok: true, result: view });
    await expect(reply).resolves.toEqual(view);
    kernel.statusChanged.emit('idle'); // answered: never sent again
    expect(second.sent).toHaveLength(1);
    now.mockRestore();
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

  it('forgets a kernel\'s diagnoses when it restarts', () => {
    const lists: string[] = [];
    comms.listChanged.connect((_, id) => lists.push(id));
    kernel.open(diagnosis(1));
    kernel.statusChanged.emit('restarting');
    expect(comms.diagnoses('k1')).toEqual([]);
    expect(lists).toEqual(['k1']);
  });
});

describe('VjpvizComms when vjpviz is loaded after the panel attached', () => {
  it('answers the hello heard on iopub by opening its own comm, once', () => {
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
    const comms = new VjpvizComms();
    comms.attach(kernel as unknown as Kernel.IKernelConnection);
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

describe('VjpvizComms after a page reload', () => {
  it('opens its own comm and loads the history', async () => {
    const kernel = new FakeKernel();
    const control = new FakeComm();
    const opened: JSONObject[] = [];
    (control as unknown as { open: (d: JSONObject) => void }).open = d => {
      opened.push(d);
    };
    (kernel as unknown as { createComm: () => FakeComm }).createComm = () => control;
    const comms = new VjpvizComms();
    const lists: string[] = [];
    comms.listChanged.connect((_, id) => lists.push(id));
    comms.attach(kernel as unknown as Kernel.IKernelConnection);
    expect(opened).toHaveLength(1);
    expect(opened[0]).toMatchObject({ v: 1, type: 'request', op: 'history' });
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    control.receive({
      v: 1,
      type: 'reply',
      request_id: opened[0].request_id as string,
      ok: true,
      result: { diagnoses: [body(2), body(1), { bad: true }] }
    });
    await new Promise(r => setTimeout(r, 0));
    expect(comms.diagnoses('k1')).toEqual([body(1), body(2)]);
    expect(warn.mock.calls.map(c => c[0])).toEqual([
      'jupyter-vjpviz: skipped a diagnosis of the history:'
    ]);
    warn.mockRestore();
    expect(lists).toEqual(['k1']);
    // Requests now go on the panel's comm.
    void comms.request('k1', 'view', { diagnosis_id: 'd1' });
    expect(control.sent).toHaveLength(1);
  });
});
