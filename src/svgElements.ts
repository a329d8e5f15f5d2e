/**
 * SVG elements made from numbers and text (the panel's plots): attributes set one by
 * one and titles as text, so no name a kernel sends is ever parsed as markup.
 */
const SVG_NS = 'http://www.w3.org/2000/svg';

export function svgElement<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    el.setAttribute(name, String(value));
  }
  return el;
}

/**
 * `el` with a hover title (an SVG <title> child) of `text`.
 */
export function titled<T extends SVGElement>(el: T, text: string): T {
  const title = svgElement('title', {});
  title.textContent = text;
  el.append(title);
  return el;
}

/**
 * A text label at (x, y).
 */
export function label(
  text: string,
  x: number,
  y: number,
  anchor: 'start' | 'middle' | 'end'
): SVGTextElement {
  const t = svgElement('text', { x, y, 'text-anchor': anchor });
  t.textContent = text;
  return t;
}
