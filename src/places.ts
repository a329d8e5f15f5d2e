/**
 * Where code is, as the kernel spells it (jupyter_vjpviz/base/places.py): a
 * message's `places` maps each file:line it carries to the text shown (`Cell
 * In[2], line 7`, as IPython's tracebacks name a cell) and the cell a click goes
 * to. The machine-readable file:line stays in the message; only this shows it.
 */
import type { Place, Places } from './protocol';

/**
 * How `where` is shown and where it goes; its own file:line where the kernel sent
 * no place for it (an older kernel), null without one.
 */
export function placeOf(
  places: Places | undefined,
  where: string | null | undefined
): Place | null {
  if (!where) {
    return null;
  }
  return places?.[where] ?? { text: where, cell: null, line: null };
}

/**
 * `place` as an element: a button that goes to its cell and line where it is a
 * notebook cell's, else its text.
 */
export function placeElement(
  place: Place,
  goTo: (place: Place) => void
): HTMLElement {
  if (place.cell === null) {
    const span = document.createElement('span');
    span.textContent = place.text;
    return span;
  }
  const button = document.createElement('button');
  button.className = 'jp-Vjpviz-place';
  button.dataset.vjpvizAction = 'go-to-cell';
  button.textContent = place.text;
  button.title = `Go to ${place.text}`;
  button.addEventListener('click', () => goTo(place));
  return button;
}
