/**
 * SVG from the kernel is untrusted: parse it as XML (never as HTML) and keep
 * only inert drawing. Removed: script, foreignObject and other embedding or
 * animating elements, every on* attribute, and links or style references to
 * javascript:/data:text/html/vbscript: URLs.
 */

const DROPPED_ELEMENTS = new Set([
  'script',
  'foreignobject',
  'iframe',
  'object',
  'embed',
  'use',
  'image',
  'animate',
  'animatemotion',
  'animatetransform',
  'set',
  'handler',
  'listener',
  'style',
  'link',
  'meta',
  'base',
  'html',
  'body'
]);

const URL_ATTRIBUTES = new Set([
  'href',
  'xlink:href',
  'src',
  'action',
  'formaction',
  'from',
  'to',
  'values',
  'by'
]);

const BAD_URL = /^\s*(javascript|vbscript|data\s*:\s*text\/html)/i;
const BAD_STYLE = /(javascript|vbscript|expression\s*\(|url\s*\(\s*['"]?\s*(javascript|data:text\/html))/i;

function normalised(value: string): string {
  // Browsers ignore control characters and whitespace inside a URL scheme.
  // eslint-disable-next-line no-control-regex
  return value.replace(/[\u0000-\u0020\u007f-\u009f]+/g, '');
}

/**
 * Strip everything active from an element tree, in place.
 */
export function sanitizeTree(root: Element): void {
  const walk = (el: Element) => {
    for (const child of Array.from(el.children)) {
      const name = child.localName.toLowerCase();
      if (DROPPED_ELEMENTS.has(name)) {
        child.remove();
        continue;
      }
      walk(child);
    }
    for (const attr of Array.from(el.attributes)) {
      const name = attr.name.toLowerCase();
      const value = attr.value;
      if (name.startsWith('on')) {
        el.removeAttribute(attr.name);
      } else if (
        (URL_ATTRIBUTES.has(name) || name.endsWith(':href')) &&
        BAD_URL.test(normalised(value))
      ) {
        el.removeAttribute(attr.name);
      } else if (name === 'style' && BAD_STYLE.test(normalised(value))) {
        el.removeAttribute(attr.name);
      } else if (name === 'attributename') {
        el.removeAttribute(attr.name);
      }
    }
  };
  walk(root);
}

/**
 * Parse untrusted SVG text into a sanitized `<svg>` element owned by `doc`,
 * or null when it is not SVG.
 */
export function sanitizeSvg(
  text: string,
  doc: Document = document
): SVGSVGElement | null {
  const parsed = new DOMParser().parseFromString(text, 'image/svg+xml');
  const root = parsed.documentElement;
  if (
    !root ||
    root.localName !== 'svg' ||
    parsed.getElementsByTagName('parsererror').length > 0
  ) {
    return null;
  }
  if (DROPPED_ELEMENTS.has(root.localName.toLowerCase())) {
    return null;
  }
  sanitizeTree(root);
  // Root attributes are walked by sanitizeTree too; adopt only after cleaning.
  return doc.importNode(root, true) as unknown as SVGSVGElement;
}
