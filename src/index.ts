import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Clipboard, ICommandPalette } from '@jupyterlab/apputils';
import { IEditorServices } from '@jupyterlab/codeeditor';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { NotebookCells } from './cells';
import { addCommands } from './commands';
import { VjpvizChannels } from './channel';
import { VjpvizModel } from './model';
import { VjpvizPanel } from './panel';
import { CommandIDs, IVjpviz } from './tokens';

export { CommandIDs, IVjpviz } from './tokens';

const PLUGIN_ID = 'jupyter-vjpviz:plugin';

/**
 * The VJP debugger: listens for vjpviz comms on the kernel of every notebook,
 * shows the active notebook's diagnoses in a right-side panel and registers
 * its commands.
 */
const plugin: JupyterFrontEndPlugin<IVjpviz> = {
  id: PLUGIN_ID,
  description: 'A visual gradient debugger for JAX.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IEditorServices, ISettingRegistry, ICommandPalette],
  provides: IVjpviz,
  activate
};

function activate(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  editorServices: IEditorServices | null,
  settingRegistry: ISettingRegistry | null,
  palette: ICommandPalette | null
): IVjpviz {
  const channels = new VjpvizChannels();
  const model = new VjpvizModel(channels);
  const cells = new NotebookCells();
  let autoOpen = true;
  const panel = new VjpvizPanel({
    model,
    cells,
    editorFactory: editorServices?.factoryService.newInlineEditor ?? null,
    copy: copyText,
    openGraph: () => void app.commands.execute(CommandIDs.openGraph)
  });
  app.shell.add(panel, 'right', { rank: 900 });
  addCommands(app, model, panel, palette);

  const follow = () => {
    const notebook = tracker.currentWidget;
    cells.notebook = notebook;
    model.follow(
      notebook && {
        kernelId: notebook.sessionContext.session?.kernel?.id ?? null
      }
    );
  };
  const track = (notebook: NotebookPanel) => {
    const { sessionContext } = notebook;
    const attach = () => {
      const kernel = sessionContext.session?.kernel;
      if (kernel) {
        channels.attach(kernel);
      }
      if (notebook === tracker.currentWidget) {
        follow();
      }
    };
    sessionContext.kernelChanged.connect(attach);
    void sessionContext.ready.then(attach);
    attach();
  };
  tracker.forEach(track);
  tracker.widgetAdded.connect((_, notebook) => track(notebook));
  tracker.currentChanged.connect(follow);

  // The panel shows itself for what asks to be seen: a diagnosis, a vv.grads
  // report, a watch's first event.
  const show = (_: unknown, { kernelId }: { kernelId: string }) => {
    if (autoOpen && kernelId === model.kernelId) {
      app.shell.activateById(panel.id);
    }
  };
  model.diagnoses.received.connect(show);
  model.grads.arrived.connect(show);
  model.watches.arrived.connect(show);

  if (settingRegistry) {
    void settingRegistry
      .load(PLUGIN_ID)
      .then(settings => {
        const read = () => {
          autoOpen = settings.get('autoOpen').composite !== false;
        };
        read();
        settings.changed.connect(read);
      })
      .catch(reason =>
        console.warn('jupyter-vjpviz: could not load settings', reason)
      );
  }
  return model;
}

async function copyText(text: string): Promise<void> {
  if (navigator.clipboard?.writeText) {
    try {
      await navigator.clipboard.writeText(text);
      return;
    } catch {
      // Not allowed (insecure context, no focus): fall back below.
    }
  }
  Clipboard.copyToSystem(text);
}

export default plugin;
