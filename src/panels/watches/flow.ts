/**
 * The backward flow of vv.watch(step, flow=True): the model's blocks as a chain
 * from the loss to the input, each coloured by its cotangent's gain (its output
 * cotangent's norm over the next block's, nearer the loss: above 1 the gradient
 * grows going back through that block, below 1 it shrinks), a block whose
 * cotangent is not all finite marked, with a slider over the steps drawn.
 * Names (the blocks' paths) are set as text.
 */
import { WatchFlow, WatchSeries } from '../../protocol';

/**
 * One link of the chain at one step drawn: a block, its output cotangent's
 * norm (null: non-finite), its gain over the next block's (null for the one
 * nearest the loss, or where either norm is missing or zero) and whether all
 * of its elements were finite.
 */
export interface IFlowLink {
  block: string;
  norm: number | null;
  gain: number | null;
  finite: boolean;
}

/**
 * The chain at point `at` (an index into the series' points), from the loss to
 * the input: the last block first.
 */
export function chain(flow: WatchFlow, at: number): IFlowLink[] {
  const links = flow.blocks.map((block, k) => {
    const norm = flow.norm[k]?.[at] ?? null;
    const next = flow.norm[k + 1]?.[at] ?? null;
    const gain =
      norm !== null && next !== null && next > 0 && k + 1 < flow.blocks.length
        ? norm / next
        : null;
    return { block, norm, gain, finite: flow.finite_fraction[k]?.[at] === 1 };
  });
  return links.reverse();
}

/**
 * A gain's colour: grey at 1, shading to red as the gradient grows going back
 * (a decade or more: full), to blue as it shrinks; a non-finite link is red
 * whatever its gain.
 */
export function gainColour(link: IFlowLink): string {
  if (!link.finite) {
    return 'rgb(214, 39, 40)';
  }
  if (link.gain === null) {
    return 'rgba(127, 127, 127, 0.25)';
  }
  const decades = Math.max(-1, Math.min(1, Math.log10(link.gain)));
  const alpha = (0.15 + 0.7 * Math.abs(decades)).toFixed(2);
  return decades >= 0
    ? `rgba(255, 127, 14, ${alpha})`
    : `rgba(31, 119, 180, ${alpha})`;
}

/**
 * The flow's section of a watch (an empty node without flow=True): a step
 * slider over the points drawn (starting at `at`, the last by default; `moved`
 * hears where the user leaves it) and the chain at that step; the kernel's
 * reason when it could not tap the step, said as could not check.
 */
export function flowView(
  series: WatchSeries,
  at: number | undefined,
  moved: (at: number) => void
): HTMLElement {
  const node = document.createElement('div');
  node.className = 'jp-Vjpviz-watchFlow';
  const flow = series.flow;
  if (!flow) {
    return node;
  }
  const title = document.createElement('h5');
  title.textContent = 'backward flow, from the loss to the input';
  node.append(title);
  if (flow.note !== null || !flow.blocks.length) {
    const note = document.createElement('p');
    note.className = 'jp-Vjpviz-flowNote';
    note.textContent = `could not check: ${flow.note ?? 'no blocks'}`;
    node.append(note);
    return node;
  }
  const last = Math.max(series.points.length - 1, 0);
  const slider = document.createElement('input');
  slider.type = 'range';
  slider.className = 'jp-Vjpviz-flowStep';
  slider.min = '0';
  slider.max = String(last);
  slider.value = String(Math.min(at ?? last, last));
  const step = document.createElement('span');
  step.className = 'jp-Vjpviz-flowStepLabel';
  const links = document.createElement('ol');
  links.className = 'jp-Vjpviz-flowChain';
  const draw = () => {
    const k = Number(slider.value);
    step.textContent = ` step ${series.points[k] ?? 0}`;
    links.textContent = '';
    const loss = document.createElement('li');
    loss.className = 'jp-Vjpviz-flowLink jp-mod-loss';
    loss.textContent = 'loss';
    links.append(loss);
    for (const link of chain(flow, k)) {
      links.append(linkNode(link));
    }
  };
  slider.oninput = () => {
    moved(Number(slider.value));
    draw();
  };
  draw();
  node.append(slider, step, links);
  return node;
}

function linkNode(link: IFlowLink): HTMLElement {
  const li = document.createElement('li');
  li.className = `jp-Vjpviz-flowLink${link.finite ? '' : ' jp-mod-nonfinite'}`;
  li.style.background = gainColour(link);
  const name = document.createElement('span');
  name.className = 'jp-Vjpviz-flowBlock';
  name.textContent = link.block;
  const norm = document.createElement('span');
  norm.className = 'jp-Vjpviz-flowNorm';
  norm.textContent =
    link.norm === null ? ' non-finite' : ` ‖ct‖ ${link.norm.toPrecision(3)}`;
  li.append(name, norm);
  li.title =
    link.gain === null
      ? `${link.block}: no gain (the block nearest the loss, or a norm missing or zero)`
      : `${link.block}: gain ${link.gain.toPrecision(3)} over the next block's`;
  if (!link.finite) {
    li.title += ': its cotangent is not all finite';
  }
  return li;
}
