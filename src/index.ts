import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Clipboard } from '@jupyterlab/apputils';
import { IEditorServices } from '@jupyterlab/codeeditor';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { VjpvizComms } from './comm';
import { VjpvizPanel } from './panel';

const PLUGIN_ID = 'jupyter-vjpviz:plugin';

/**
 * The VJP debugger: listens for vjpviz comms on the kernel of every notebook
 * and shows the active notebook's diagnoses in a right-side panel.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A visual gradient debugger for JAX.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IEditorServices, ISettingRegistry, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    editorServices: IEditorServices | null,
    settingRegistry: ISettingRegistry | null
  ) => {
    const comms = new VjpvizComms();
    let autoOpen = true;
    let panel: VjpvizPanel | null = null;
    if (app.shell && typeof app.shell.add === 'function') {
      panel = new VjpvizPanel({
        comms,
        editorFactory: editorServices?.factoryService.newInlineEditor ?? null,
        copy: copyText
      });
      app.shell.add(panel, 'right', { rank: 900 });
    }
    const follow = () => panel?.setNotebook(tracker.currentWidget);

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
    tracker.currentChanged?.connect(follow);

    comms.diagnosisReceived.connect((_, { kernelId, diagnosis }) => {
      if (!panel) {
        return;
      }
      void panel.onDiagnosis(kernelId, diagnosis);
      if (autoOpen && kernelId === panel.kernelId) {
        app.shell.activateById(panel.id);
      }
    });

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
    console.log('jupyter-vjpviz is activated');
  }
};

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
