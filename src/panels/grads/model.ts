/**
 * The grads feature's state: each kernel's vv.grads reports as pushed (or asked
 * for), the newest MAX_GRADS, each report's graph view kept from its push.
 */
import { VjpvizChannels } from '../../channel';
import { Graphs } from '../../graphs';
import { KeptItems } from '../../keptItems';
import { GradReport } from '../../protocol';
import { IGradsModel, IVjpviz } from '../../tokens';

/**
 * vv.grads reports kept per kernel, newest; the kernel keeps as many (grads.KEPT).
 */
export const MAX_GRADS = 32;

export class GradsModel extends KeptItems<GradReport> implements IGradsModel {
  constructor(
    channels: VjpvizChannels,
    graphs: Graphs,
    owner: Pick<IVjpviz, 'kernelId'>
  ) {
    super(channels, owner, MAX_GRADS);
    channels.pushed.connect((_, { kernelId, message }) => {
      if (message.type !== 'grads') {
        return;
      }
      if (message.view) {
        graphs.keep(kernelId, message.grads.id, message.view);
      }
      this.keep(kernelId, [message.grads]);
      this.announce(kernelId, message.grads); // pushed as the user asked for it
    });
  }

  async ask(kernelId: string): Promise<void> {
    const { reports } = await this.channels.request(kernelId, 'grads');
    this.keep(kernelId, reports);
  }
}
