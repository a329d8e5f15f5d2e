/**
 * The graphs the panel draws, a diagnosis's or a vv.grads report's: the default
 * view each came with (pushed drawn, so the panel shows it at once), and the
 * kernel round trips for any other view, naming the graph by its `report_id`.
 * No DOM here: the graph view draws what these requests resolve with.
 */
import { JSONObject } from '@lumino/coreutils';

import { VjpvizChannels } from './channel';
import { mark } from './marks';
import { dropOldest } from './keptItems';
import { RequestOp, View } from './protocol';
import { IGraphRequests } from './tokens';

/**
 * The default views pushed by each kernel, the newest `limit` kept, and the
 * requests for the others.
 */
export class Graphs {
  constructor(
    private readonly _channels: VjpvizChannels,
    private readonly _limit: number
  ) {}

  /**
   * Keep the default view pushed, drawn, with a diagnosis or a report.
   */
  keep(kernelId: string, id: string, view: View): void {
    const views = this._views.get(kernelId) ?? new Map<string, View>();
    this._views.set(kernelId, views);
    views.set(id, view);
    dropOldest(views, this._limit);
  }

  /**
   * Forget a kernel's views (it restarted: its ids start again).
   */
  forget(kernelId: string): void {
    this._views.delete(kernelId);
  }

  /**
   * The round trips of one graph of a kernel: the default view from its push
   * when it came with one, any other asked of the kernel.
   */
  requests(kernelId: string, id: string): IGraphRequests {
    const ask = (op: RequestOp, args: JSONObject) =>
      this._channels.request(kernelId, op, { report_id: id, ...args });
    const pushed = this._views.get(kernelId)?.get(id) ?? null;
    return {
      view: state =>
        pushed && !state.expanded.length && !state.collapsed.length
          ? (mark('vjpviz:graph-from-push'), Promise.resolve(pushed))
          : (ask('view', { ...state }) as Promise<View>),
      expand: (node, state) =>
        ask('expand', { node, ...state }) as Promise<View>,
      collapse: (node, state) =>
        ask('collapse', { node, ...state }) as Promise<View>,
      search: (query, state) =>
        ask('search', { query, ...state }) as Promise<{
          matches: string[];
          view: View;
        }>
    };
  }

  private _views = new Map<string, Map<string, View>>();
}
