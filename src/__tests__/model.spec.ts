// The model is driven here as the panel and the commands drive it, fed by a
// fake kernel through the real channels; it never makes a DOM node.
import { Kernel } from '@jupyterlab/services';

import { MAX_DIAGNOSES } from '../panels/diagnoses/model';
import { Diagnosis } from '../protocol';
import { IDiagnosisEvent } from '../tokens';
import {
  FakeKernel,
  answerHistory,
  body,
  diagnosis,
  forbidDom,
  kernelWithControl,
  modelOnKernel,
  reply
} from './fakes';

const ids = (diagnoses: readonly Diagnosis[]) => diagnoses.map(d => d.id);

describe('VjpvizModel', () => {
  forbidDom();

  it('keeps and signals the diagnoses pushed, each id once', () => {
    const { kernel, model } = modelOnKernel();
    const events: IDiagnosisEvent[] = [];
    let changes = 0;
    model.diagnoses.received.connect((_, event) => events.push(event));
    model.diagnoses.changed.connect(() => changes++);
    kernel.open(diagnosis(1)).receive(diagnosis(2));
    expect(model.diagnoses.items).toEqual([body(1), body(2)]);
    expect(events).toEqual([
      { kernelId: 'k1', diagnosis: body(1) },
      { kernelId: 'k1', diagnosis: body(2) }
    ]);
    expect(changes).toBe(2);
    // A repeated push (same id) is not a new diagnosis.
    kernel.open(diagnosis(2));
    expect(model.diagnoses.items).toHaveLength(2);
    expect(events).toHaveLength(2);
  });

  it('selects the newest push of the followed kernel; the others only count', () => {
    const { kernel, channels, model } = modelOnKernel();
    const current: (string | null)[] = [];
    model.diagnoses.currentChanged.connect((_, d) =>
      current.push(d?.id ?? null)
    );
    kernel.open(diagnosis(1));
    kernel.open(diagnosis(2));
    model.diagnoses.select('d1');
    const other = Object.assign(new FakeKernel(), { id: 'k2' });
    channels.attach(other as unknown as Kernel.IKernelConnection);
    other.open(diagnosis(7));
    expect(current).toEqual(['d1', 'd2', 'd1']);
    expect(model.diagnoses.current?.id).toBe('d1');
    expect(ids(model.diagnoses.items)).toEqual(['d1', 'd2']);

    model.follow({ kernelId: 'k2' });
    expect(model.kernelId).toBe('k2');
    expect(ids(model.diagnoses.items)).toEqual(['d7']);
    expect(model.diagnoses.current?.id).toBe('d7');
    // Back: the selection starts again from the newest.
    model.follow({ kernelId: 'k1' });
    expect(model.diagnoses.current?.id).toBe('d2');
  });

  it('steps through the diagnoses newest first, wrapping around', () => {
    const { kernel, model } = modelOnKernel();
    for (const n of [1, 2, 3]) {
      kernel.open(diagnosis(n));
    }
    const seen = [1, 1, 1, -1].map(step => {
      model.diagnoses.selectNext(step as 1 | -1);
      return model.diagnoses.current?.id;
    });
    expect(seen).toEqual(['d2', 'd1', 'd3', 'd1']);
    model.diagnoses.select('d9'); // unknown: the newest
    expect(model.diagnoses.current?.id).toBe('d3');
  });

  it('follows no notebook, or one without a kernel, with nothing selected', () => {
    const { kernel, model } = modelOnKernel();
    kernel.open(diagnosis(1));
    model.follow({ kernelId: null });
    expect([
      model.hasNotebook,
      model.kernelId,
      model.diagnoses.current
    ]).toEqual([true, null, null]);
    model.follow(null);
    expect(model.hasNotebook).toBe(false);
    expect(model.graphRequests('d1')).toBeNull();
    return expect(model.diagnoses.verify('d1', 'x')).rejects.toThrow(
      'no notebook kernel is followed'
    );
  });

  it('keeps the newest MAX_DIAGNOSES of a kernel that fails every step', () => {
    const { kernel, model } = modelOnKernel();
    for (let n = 1; n <= MAX_DIAGNOSES + 25; n++) {
      kernel.open(diagnosis(n));
    }
    const kept = model.diagnoses.items;
    expect(kept).toHaveLength(MAX_DIAGNOSES);
    expect(kept[0]).toEqual(body(26));
    expect(kept[kept.length - 1]).toEqual(body(MAX_DIAGNOSES + 25));
  });

  it("forgets a kernel's diagnoses and the views pushed with them when it restarts", () => {
    const { kernel, model } = modelOnKernel();
    const view = { svg: '<svg/>', expanded: [], collapsed: [] };
    kernel.open({ ...diagnosis(1), view });
    kernel.statusChanged.emit('restarting');
    expect(model.diagnoses.items).toEqual([]);
    expect(model.diagnoses.current).toBeNull();
    // The same id again after the restart: a new diagnosis, without the old view.
    const comm = kernel.open(diagnosis(1));
    void model.graphRequests('d1')!.view({ expanded: [], collapsed: [] });
    expect(comm.sent.map(m => m.op)).toEqual(['view']);
  });

  it('merges a history with what was pushed meanwhile, in the kernel order', async () => {
    const { kernel, control, opened } = kernelWithControl();
    const { model } = modelOnKernel(kernel);
    kernel.open(diagnosis(3));
    await answerHistory(control, opened, [body(2), body(1), body(3)]);
    expect(ids(model.diagnoses.items)).toEqual(['d1', 'd2', 'd3']);
    expect(model.diagnoses.current?.id).toBe('d3');
  });

  it('serves the default view pushed with a diagnosis, asks the kernel for any other', async () => {
    const { kernel, model } = modelOnKernel();
    const view = { svg: '<svg/>', expanded: [], collapsed: [] };
    const comm = kernel.open({ ...diagnosis(1), view });
    const graph = model.graphRequests('d1')!;
    await expect(graph.view({ expanded: [], collapsed: [] })).resolves.toEqual(
      view
    );
    expect(comm.sent).toEqual([]);
    const expanded = graph.expand('n3', { expanded: [], collapsed: [] });
    expect(comm.sent.map(m => [m.op, m.args])).toEqual([
      ['expand', { report_id: 'd1', node: 'n3', expanded: [], collapsed: [] }]
    ]);
    reply(comm, { svg: '<svg id="n3"/>', expanded: ['n3'] });
    await expect(expanded).resolves.toEqual({
      svg: '<svg id="n3"/>',
      expanded: ['n3']
    });
  });

  it('asks the followed kernel to verify and apply a fix of a diagnosis', async () => {
    const { kernel, model } = modelOnKernel();
    const comm = kernel.open(diagnosis(1));
    const verified = model.diagnoses.verify('d1', 'def f(): pass');
    expect(comm.sent[0]).toMatchObject({
      op: 'verify',
      args: { report_id: 'd1', code: 'def f(): pass' }
    });
    reply(comm, { pass: true, verdict: 'verified' });
    await expect(verified).resolves.toEqual({
      pass: true,
      verdict: 'verified'
    });
    const applied = model.diagnoses.apply('d1', 'def f(): pass');
    expect(comm.sent[1]).toMatchObject({ op: 'apply' });
    reply(comm, { applied: true, problems: [] });
    await expect(applied).resolves.toEqual({ applied: true, problems: [] });
  });
});
