/**
 * The watches feature's state: each kernel's vv.watch series as pushed (or asked
 * for), and vv.nans run on a watched step, whose diagnosis joins the diagnoses.
 */
import { VjpvizChannels } from '../../channel';
import { KeptItems } from '../../keptItems';
import { WatchSeries } from '../../protocol';
import { IVjpviz, IWatchesModel } from '../../tokens';
import { DiagnosesModel } from '../diagnoses/model';

export class WatchesModel
  extends KeptItems<WatchSeries>
  implements IWatchesModel
{
  constructor(
    channels: VjpvizChannels,
    owner: Pick<IVjpviz, 'kernelId'>,
    private readonly _diagnoses: DiagnosesModel
  ) {
    super(channels, owner);
    channels.pushed.connect((_, { kernelId, message }) => {
      if (message.type === 'watch') {
        const before = this.kept(kernelId, message.watch.id);
        this.keep(kernelId, [message.watch]);
        if (message.watch.events.length && !before?.events.length) {
          this.announce(kernelId, message.watch); // its first event
        }
      }
    });
  }

  async ask(kernelId: string): Promise<void> {
    const { watches } = await this.channels.request(kernelId, 'watch');
    this.keep(kernelId, watches);
  }

  async nans(watchId: string, step: number): Promise<string> {
    const kernelId = this.owner.kernelId;
    if (!kernelId) {
      throw new Error('no notebook kernel is followed');
    }
    const { summary, diagnosis } = await this.channels.request(
      kernelId,
      'watch_nans',
      { watch_id: watchId, step }
    );
    if (diagnosis) {
      this._diagnoses.add(kernelId, diagnosis);
      this._diagnoses.select(diagnosis.id);
    }
    return summary;
  }
}
