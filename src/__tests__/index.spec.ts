import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { CommandRegistry } from '@lumino/commands';
import { Signal } from '@lumino/signaling';

import schema from '../../schema/plugin.json';
import { GraphView } from '../graphView';
import plugin from '../index';
import { COMM_TARGET } from '../protocol';
import { CommandIDs, IVjpviz } from '../tokens';
import { FakeKernel, diagnosis } from './fakes';

/**
 * What the plugin is handed: a shell that records what is added, a real
 * command registry, a palette, and a notebook tracker of notebooks whose
 * sessions hold `kernel`.
 */
function start() {
  const owner = {};
  const shell = { add: jest.fn(), activateById: jest.fn() };
  const commands = new CommandRegistry();
  const palette = { addItem: jest.fn() };
  const tracker = {
    widgetAdded: new Signal<object, unknown>(owner),
    currentChanged: new Signal<object, unknown>(owner),
    forEach: () => undefined,
    currentWidget: null as unknown
  };
  const app = { shell, commands } as unknown as JupyterFrontEnd;
  const vjpviz = plugin.activate(
    app,
    tracker as unknown as INotebookTracker,
    null,
    null,
    palette as unknown as ICommandPalette
  ) as IVjpviz;
  const notebook = (kernel: unknown) => ({
    sessionContext: {
      session: { kernel },
      kernelChanged: new Signal<object, unknown>(owner),
      ready: Promise.resolve()
    }
  });
  return { shell, commands, palette, tracker, vjpviz, notebook };
}

/** A notebook on a kernel that sent `n` diagnoses, current in the tracker. */
async function withDiagnoses(n: number) {
  const started = start();
  const kernel = new FakeKernel();
  const nb = started.notebook(kernel);
  started.tracker.currentWidget = nb;
  started.tracker.widgetAdded.emit(nb);
  await nb.sessionContext.ready;
  const comms = Array.from({ length: n }, (_, i) =>
    kernel.open(diagnosis(i + 1))
  );
  return { ...started, comm: comms[n - 1] };
}

const current = (v: IVjpviz) => v.diagnoses.current?.id;

describe('jupyter-vjpviz:plugin', () => {
  it('registers the comm target on every notebook kernel', async () => {
    const { tracker, notebook } = start();
    const first = new FakeKernel();
    const registered = jest.spyOn(first, 'registerCommTarget');
    const nb = notebook(first);
    tracker.widgetAdded.emit(nb);
    await nb.sessionContext.ready;
    expect(registered).toHaveBeenCalledTimes(1);
    expect(registered.mock.calls[0][0]).toBe(COMM_TARGET);

    const second = Object.assign(new FakeKernel(), { id: 'k2' });
    const again = jest.spyOn(second, 'registerCommTarget');
    nb.sessionContext.session.kernel = second;
    nb.sessionContext.kernelChanged.emit(undefined);
    expect(again).toHaveBeenCalledTimes(1);
    expect(registered).toHaveBeenCalledTimes(1);
  });

  it('adds the panel to the right area; it follows the active notebook', async () => {
    const { shell, vjpviz } = await withDiagnoses(1);
    const [panel, area] = shell.add.mock.calls[0];
    expect(area).toBe('right');
    expect(panel.id).toBe('jp-vjpviz-panel');
    expect(vjpviz.kernelId).toBe('k1');
    expect(current(vjpviz)).toBe('d1');
  });

  it('hides the invitation to load vjpviz once a vv.grads report shows', async () => {
    const { shell, tracker, notebook } = start();
    const kernel = new FakeKernel();
    const nb = notebook(kernel);
    tracker.currentWidget = nb;
    tracker.widgetAdded.emit(nb);
    await nb.sessionContext.ready;
    const panel = shell.add.mock.calls[0][0];
    const empty = panel.node.querySelector('.jp-Vjpviz-empty');
    expect(empty.classList).not.toContain('lm-mod-hidden');
    kernel.open({
      v: 1,
      type: 'grads',
      grads: {
        id: 'g1',
        function: 'loss',
        headline: 'vjpviz grads of loss: healthy',
        healthy: true,
        judged: true,
        note: null,
        zero: [],
        partly_zero: [],
        layers: [],
        graph: { nodes: [], edges: [] }
      }
    });
    expect(empty.classList).toContain('lm-mod-hidden');
    expect(
      panel.node.querySelector('.jp-Vjpviz-gradsHeadline').textContent
    ).toBe('vjpviz grads of loss: healthy');
  });

  it('shows the empty state without a notebook', () => {
    const { shell, vjpviz } = start();
    expect(shell.add.mock.calls[0][0].node.textContent).toContain(
      'Open a notebook'
    );
    expect(vjpviz.diagnoses.current).toBeNull();
  });
});

describe('the commands', () => {
  it('are registered and listed in the palette', () => {
    const { commands, palette } = start();
    for (const id of Object.values(CommandIDs)) {
      expect(commands.hasCommand(id)).toBe(true);
      expect(palette.addItem).toHaveBeenCalledWith({
        command: id,
        category: 'VJP Debugger'
      });
    }
  });

  it('have the shortcuts the settings schema declares', () => {
    const { commands } = start();
    const bound = schema['jupyter.lab.shortcuts'].map(s => s.command);
    expect(new Set(bound)).toEqual(new Set(Object.values(CommandIDs)));
    for (const id of bound) {
      expect(commands.hasCommand(id)).toBe(true);
    }
  });

  it('open the panel', async () => {
    const { commands, shell } = start();
    await commands.execute(CommandIDs.openPanel);
    expect(shell.activateById).toHaveBeenCalledWith('jp-vjpviz-panel');
  });

  it('step through the diagnoses, newest first, and wrap around', async () => {
    const { commands, vjpviz } = await withDiagnoses(3);
    expect(current(vjpviz)).toBe('d3');
    expect(commands.isEnabled(CommandIDs.next)).toBe(true);
    // (Not awaited: each resolves once its graph is drawn, and the fake
    // kernel never answers; the selection itself is synchronous.)
    void commands.execute(CommandIDs.next);
    expect(current(vjpviz)).toBe('d2');
    void commands.execute(CommandIDs.next);
    void commands.execute(CommandIDs.next);
    expect(current(vjpviz)).toBe('d3');
    void commands.execute(CommandIDs.previous);
    expect(current(vjpviz)).toBe('d1');
  });

  it('need something to act on', async () => {
    const { commands } = start();
    expect(commands.isEnabled(CommandIDs.openGraph)).toBe(false);
    expect(commands.isEnabled(CommandIDs.verify)).toBe(false);
    expect(commands.isEnabled(CommandIDs.next)).toBe(false);
    const one = await withDiagnoses(1);
    expect(one.commands.isEnabled(CommandIDs.openGraph)).toBe(true);
    expect(one.commands.isEnabled(CommandIDs.next)).toBe(false);
  });

  it('open the graph in the main area once per diagnosis, asking the kernel for its view', async () => {
    const { commands, shell, comm } = await withDiagnoses(1);
    const before = comm.sent.length;
    await commands.execute(CommandIDs.openGraph);
    const [widget, area] = shell.add.mock.calls[1];
    expect(area).toBe('main');
    expect(widget).toBeInstanceOf(MainAreaWidget);
    expect(widget.content).toBeInstanceOf(GraphView);
    expect(widget.id).toBe('jp-vjpviz-graph-k1-d1');
    const asked = comm.sent
      .slice(before)
      .map(m => [m.op, (m.args as { report_id?: string }).report_id]);
    expect(asked).toContainEqual(['view', 'd1']);

    await commands.execute(CommandIDs.openGraph);
    expect(shell.add).toHaveBeenCalledTimes(2);
    expect(shell.activateById).toHaveBeenLastCalledWith(
      'jp-vjpviz-graph-k1-d1'
    );
  });
});
