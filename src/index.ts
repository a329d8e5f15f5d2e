import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Clipboard, ICommandPalette } from '@jupyterlab/apputils';
import { IEditorServices } from '@jupyterlab/codeeditor';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { addCommands } from './commands';
import { VjpvizComms } from './comm';
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
  const comms = new VjpvizComms();
  let autoOpen = true;
  const panel = new VjpvizPanel({
    comms,
    editorFactory: editorServices?.factoryService.newInlineEditor ?? null,
    copy: copyText,
    openGraph: () => void app.commands.execute(CommandIDs.openGraph)
  });
  app.shell.add(panel, 'right', { rank: 900 });
  addCommands(app, panel, panel.id, palette);

  const follow = () => panel.setNotebook(tracker.currentWidget);
  const track = (notebook: NotebookPanel) => {
    const { sessionContext } = notebook;
    const attach = () => {
      const kernel = sessionContext.session?.kernel;
      if (kernel) {
        comms.attach(kernel);
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

  comms.diagnosisReceived.connect((_, { kernelId, diagnosis }) => {
    void panel.onDiagnosis(kernelId, diagnosis);
    if (autoOpen && kernelId === panel.kernelId) {
      app.shell.activateById(panel.id);
    }
  });
  comms.fixesReceived.connect((_, { kernelId, diagnosis }) =>
    panel.onFixes(kernelId, diagnosis)
  );

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
  return panel;
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
