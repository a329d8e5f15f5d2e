import { JupyterFrontEnd } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Signal } from '@lumino/signaling';

import plugin from '../index';
import { COMM_TARGET } from '../protocol';

const fakeKernel = () => ({ id: 'k', registerCommTarget: jest.fn() });

describe('jupyter-vjpviz:plugin', () => {
  it('registers the comm target on every notebook kernel', async () => {
    const owner = {};
    const widgetAdded = new Signal<object, unknown>(owner);
    const kernelChanged = new Signal<object, unknown>(owner);
    const session: { kernel: ReturnType<typeof fakeKernel> | null } = {
      kernel: null
    };
    const panel = {
      sessionContext: { session, kernelChanged, ready: Promise.resolve() }
    };
    const tracker = { widgetAdded, forEach: () => undefined };
    jest.spyOn(console, 'log').mockImplementation(() => undefined);

    plugin.activate(
      {} as JupyterFrontEnd,
      tracker as unknown as INotebookTracker
    );
    expect(console.log).toHaveBeenCalledWith('jupyter-vjpviz is activated');

    widgetAdded.emit(panel);
    const first = fakeKernel();
    session.kernel = first;
    await panel.sessionContext.ready;
    expect(first.registerCommTarget).toHaveBeenCalledTimes(1);
    expect(first.registerCommTarget.mock.calls[0][0]).toBe(COMM_TARGET);

    const second = fakeKernel();
    session.kernel = second;
    kernelChanged.emit(undefined);
    expect(second.registerCommTarget).toHaveBeenCalledTimes(1);
    expect(first.registerCommTarget).toHaveBeenCalledTimes(1);
  });
});

describe('the VJP debugger panel', () => {
  it('is added to the right area and follows the active notebook', () => {
    const owner = {};
    const shell = { add: jest.fn(), activateById: jest.fn() };
    const tracker = {
      widgetAdded: new Signal<object, unknown>(owner),
      currentChanged: new Signal<object, unknown>(owner),
      forEach: () => undefined,
      currentWidget: null
    };
    jest.spyOn(console, 'log').mockImplementation(() => undefined);
    plugin.activate(
      { shell } as unknown as JupyterFrontEnd,
      tracker as unknown as INotebookTracker,
      null,
      null
    );
    expect(shell.add).toHaveBeenCalledTimes(1);
    const [panel, area] = shell.add.mock.calls[0];
    expect(area).toBe('right');
    expect(panel.id).toBe('jp-vjpviz-panel');
    expect(panel.node.textContent).toContain('Open a notebook');
  });
});
