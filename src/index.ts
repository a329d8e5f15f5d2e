import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { VjpvizComms } from './comm';

/**
 * Listens for vjpviz comms on the kernel of every notebook.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-vjpviz:plugin',
  description: 'A visual gradient debugger for JAX.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const comms = new VjpvizComms();
    const track = (panel: NotebookPanel) => {
      const { sessionContext } = panel;
      const attach = () => {
        const kernel = sessionContext.session?.kernel;
        if (kernel) {
          comms.attach(kernel);
        }
      };
      sessionContext.kernelChanged.connect(attach);
      void sessionContext.ready.then(attach);
      attach();
    };
    tracker.forEach(track);
    tracker.widgetAdded.connect((_, panel) => track(panel));
    console.log('jupyter-vjpviz is activated');
  }
};

export default plugin;
