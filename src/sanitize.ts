import DOMPurify from 'dompurify';

import policy from './svgPolicy.json';

/**
 * DOMPurify configured from the SVG policy the ipywidgets fallback reads too
 * (jupyter_vjpviz/deliver/svg_policy.json): graphviz's drawing kept, anything
 * that embeds, references, animates or runs dropped.
 */
const CONFIG = {
  ALLOWED_TAGS: policy.elements,
  ALLOWED_ATTR: policy.attributes,
  // Only URL attributes are held to the scheme list; a title such as
  // "softclip: x" is text, not a URL.
  ADD_URI_SAFE_ATTR: policy.attributes.filter(
    a => !policy.url_attributes.includes(a)
  ),
  ALLOWED_URI_REGEXP: new RegExp(
    // DOMPurify's own shape: a listed scheme, or a relative URL.
    `^(?:(?:${policy.url_schemes.join('|')}):|[^a-z]|[a-z+.\\-]+(?:[^a-z+.\\-:]|$))`,
    'i'
  ),
  FORBID_CONTENTS: policy.drop_with_content,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  RETURN_DOM_FRAGMENT: true as const
};

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * Sanitize untrusted SVG text into an `<svg>` element of `document`, or null
 * when what is left is not one SVG element.
 */
export function sanitizeSvg(text: string): SVGSVGElement | null {
  const fragment = DOMPurify.sanitize(text, CONFIG);
  const [root, ...rest] = Array.from(fragment.children);
  if (
    !root ||
    rest.length ||
    root.namespaceURI !== SVG_NS ||
    root.localName !== 'svg'
  ) {
    return null;
  }
  return root as SVGSVGElement;
}
