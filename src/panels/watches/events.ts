/**
 * A watch's events per block, drawn under its norm plot: the kernel's events
 * (a block's, or a leaf's, gradient zero, stuck at zero or non-finite: watch.py
 * BlockEvent) filed under the plot's line (layer) they belong to, with the
 * backward flow's (vv.watch(step, flow=True)): the first step drawn at which a
 * block's output cotangent went non-finite, and at which it vanished (all
 * zero). Names are set as text.
 */
import { WatchSeries } from '../../protocol';

/**
 * One event of a block: its step, kind (the kernel's WatchEvent kinds, or
 * cotangent_nonfinite, cotangent_zero from the flow) and text.
 */
export interface IBlockEvent {
  step: number;
  kind: string;
  text: string;
}

/**
 * A block and its events in step order; `line`: its line in the plot (an
 * index into series.lines), or null for a block the plot draws no line of.
 */
export interface IBlockEvents {
  block: string;
  line: number | null;
  events: IBlockEvent[];
}

/**
 * The series' events per block: the plot's lines first (in their order), then
 * the flow's blocks and the events' own paths that are no line; a block with
 * no event is left out.
 */
export function blockEvents(series: WatchSeries): IBlockEvents[] {
  const groups = series.lines.map(l => l.group);
  const byBlock = new Map<string, IBlockEvent[]>();
  const add = (block: string, e: IBlockEvent) =>
    byBlock.set(block, [...(byBlock.get(block) ?? []), e]);
  for (const e of series.events) {
    add(lineOf(e.path, groups) ?? e.path, e);
  }
  for (const [block, e] of flowEvents(series)) {
    add(block, e);
  }
  const order = [...groups, ...byBlock.keys()].filter(
    (b, i, all) => all.indexOf(b) === i && byBlock.has(b)
  );
  return order.map(block => {
    const line = groups.indexOf(block);
    const events = byBlock.get(block)!.sort((a, b) => a.step - b.step);
    return { block, line: line < 0 ? null : line, events };
  });
}

/**
 * The line an event's path belongs to: the longest line group that is the path
 * or a parent of it (a leaf under its layer, or the layer itself; not
 * ['layers'][1] for ['layers'][10]).
 */
function lineOf(path: string, groups: string[]): string | undefined {
  const under = (g: string) =>
    path === g || (path.startsWith(g) && '[.'.includes(path[g.length]));
  return groups.filter(under).sort((a, b) => b.length - a.length)[0];
}

/**
 * Per flow block, the first step drawn at which its output cotangent was not
 * all finite, and the first at which it was all zero (a norm of 0).
 */
function flowEvents(series: WatchSeries): [string, IBlockEvent][] {
  const flow = series.flow;
  if (!flow || flow.note !== null) {
    return [];
  }
  const found: [string, IBlockEvent][] = [];
  const first = (block: string, at: number, kind: string, what: string) => {
    if (at >= 0) {
      const step = series.points[at];
      const text = `step ${step}: ${block}'s output cotangent ${what}`;
      found.push([block, { step, kind, text }]);
    }
  };
  flow.blocks.forEach((block, k) => {
    const fractions = flow.finite_fraction[k] ?? [];
    first(
      block,
      fractions.findIndex(f => f !== 1),
      'cotangent_nonfinite',
      'went non-finite'
    );
    first(
      block,
      (flow.norm[k] ?? []).findIndex(n => n === 0),
      'cotangent_zero',
      'vanished (all zero)'
    );
  });
  return found;
}
