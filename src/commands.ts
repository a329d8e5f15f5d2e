import { JupyterFrontEnd } from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';

import { GraphView } from './graphView';
import { VjpvizPanel, vjpvizIcon } from './panel';
import { CommandIDs, IVjpviz } from './tokens';

const CATEGORY = 'VJP Debugger';

/**
 * Register the VJP debugger's commands (and list them in the palette):
 * open the panel, open the shown graph in the main area, verify and apply
 * the fix in the panel's editor, and step through the diagnoses.
 */
export function addCommands(
  app: JupyterFrontEnd,
  vjpviz: IVjpviz,
  panel: VjpvizPanel,
  palette: ICommandPalette | null
): void {
  const { commands, shell } = app;
  const graphs = new WidgetTracker<MainAreaWidget<GraphView>>({
    namespace: 'vjpviz-graph'
  });
  const { diagnoses } = vjpviz;
  const hasCurrent = () => diagnoses.current !== null;
  const several = () => diagnoses.items.length > 1;

  commands.addCommand(CommandIDs.openPanel, {
    label: 'Open the VJP Debugger',
    caption: 'Show the diagnoses of the active notebook',
    icon: vjpvizIcon,
    execute: () => shell.activateById(panel.id)
  });
  commands.addCommand(CommandIDs.openGraph, {
    label: 'Open Graph in Main Area',
    caption: "Show the diagnosis's forward graph in a large view",
    icon: vjpvizIcon,
    isEnabled: hasCurrent,
    execute: () => openGraph(shell, vjpviz, graphs)
  });
  commands.addCommand(CommandIDs.verify, {
    label: 'Verify the Fix',
    caption: 'Check the code in the fix editor in the kernel',
    isEnabled: hasCurrent,
    execute: () => panel.verify()
  });
  commands.addCommand(CommandIDs.apply, {
    label: 'Apply the Fix to the Cell',
    caption: 'Rebind the rule in the kernel and write it into its cell',
    isEnabled: hasCurrent,
    execute: () => panel.apply()
  });
  commands.addCommand(CommandIDs.next, {
    label: 'Next Diagnosis',
    isEnabled: several,
    execute: () => diagnoses.selectNext(1)
  });
  commands.addCommand(CommandIDs.previous, {
    label: 'Previous Diagnosis',
    isEnabled: several,
    execute: () => diagnoses.selectNext(-1)
  });
  diagnoses.currentChanged.connect(() => commands.notifyCommandChanged());
  diagnoses.changed.connect(() => commands.notifyCommandChanged());

  for (const command of Object.values(CommandIDs)) {
    palette?.addItem({ command, category: CATEGORY });
  }
}

/**
 * The graph of the diagnosis shown, in a main-area widget (one per
 * diagnosis: opening it again brings it to the front).
 */
function openGraph(
  shell: JupyterFrontEnd.IShell,
  vjpviz: IVjpviz,
  graphs: WidgetTracker<MainAreaWidget<GraphView>>
): void {
  const d = vjpviz.diagnoses.current;
  if (!d) {
    return;
  }
  const id = `jp-vjpviz-graph-${vjpviz.kernelId}-${d.id}`;
  const open = graphs.find(w => w.id === id);
  if (open) {
    shell.activateById(id);
    return;
  }
  const content = new GraphView();
  const widget = new MainAreaWidget({ content });
  widget.id = id;
  widget.addClass('jp-Vjpviz-graphMain');
  widget.title.label = `Graph: ${d.function ?? d.kind}`;
  widget.title.caption = d.headline;
  widget.title.icon = vjpvizIcon;
  widget.title.closable = true;
  void graphs.add(widget);
  shell.add(widget, 'main', { mode: 'split-right' });
  void content.load(
    d.graph?.nodes ?? [],
    d.node ?? null,
    vjpviz.graphRequests(d.id),
    d.places
  );
}
