/**
 * The VJP debugger's state, apart from its views (as JupyterLab's debugger
 * keeps its model): the notebook followed and its kernel, composed of one
 * model per panel feature (panels/<feature>/model.ts) and the graphs they draw.
 * What concerns them all is decided here: which kernel is followed, a kernel's
 * history loaded, a kernel restarted. No DOM here: the panel renders it, the
 * commands drive it, the tests drive it directly.
 */
import { IHistoryEvent, VjpvizChannels } from './channel';
import { Graphs } from './graphs';
import { DiagnosesModel, MAX_DIAGNOSES } from './panels/diagnoses/model';
import { GradsModel } from './panels/grads/model';
import { WatchesModel } from './panels/watches/model';
import { IGraphRequests, IVjpviz } from './tokens';

/**
 * The model of the VJP debugger: what the channels bring, kept by each
 * feature's model, shown for the followed kernel.
 */
export class VjpvizModel implements IVjpviz {
  constructor(channels: VjpvizChannels) {
    // As many pushed views as diagnoses: a report's view takes the place of one.
    this._graphs = new Graphs(channels, MAX_DIAGNOSES);
    this.diagnoses = new DiagnosesModel(channels, this._graphs, this);
    this.watches = new WatchesModel(channels, this, this.diagnoses);
    this.grads = new GradsModel(channels, this._graphs, this);
    channels.historyLoaded.connect((_, event) => this._onHistory(event));
    channels.kernelRestarted.connect((_, kernelId) => this._forget(kernelId));
  }

  readonly diagnoses: DiagnosesModel;
  readonly watches: WatchesModel;
  readonly grads: GradsModel;

  get hasNotebook(): boolean {
    return this._hasNotebook;
  }

  get kernelId(): string | null {
    return this._kernelId;
  }

  follow(notebook: { readonly kernelId: string | null } | null): void {
    const kernelId = notebook?.kernelId ?? null;
    const hasNotebook = notebook !== null;
    if (kernelId === this._kernelId && hasNotebook === this._hasNotebook) {
      return;
    }
    const kernelChanged = kernelId !== this._kernelId;
    this._kernelId = kernelId;
    this._hasNotebook = hasNotebook;
    this.diagnoses.followed(kernelChanged);
    this.watches.followed();
    this.grads.followed();
  }

  graphRequests(id: string): IGraphRequests | null {
    return this._kernelId ? this._graphs.requests(this._kernelId, id) : null;
  }

  private _onHistory({ kernelId, diagnoses }: IHistoryEvent): void {
    this.diagnoses.merge(kernelId, diagnoses);
    // A panel opened (or reloaded) after the watch and grads pushes: ask for them
    // once, one after the other.
    this.watches
      .ask(kernelId)
      .catch(() => undefined)
      .then(() => this.grads.ask(kernelId))
      .catch(() => undefined);
  }

  /**
   * A kernel restarted: its comms are gone, and every feature's state of it.
   */
  private _forget(kernelId: string): void {
    this._graphs.forget(kernelId);
    this.diagnoses.forget(kernelId);
    this.watches.forget(kernelId);
    this.grads.forget(kernelId);
  }

  private _graphs: Graphs;
  private _hasNotebook = false;
  private _kernelId: string | null = null;
}
