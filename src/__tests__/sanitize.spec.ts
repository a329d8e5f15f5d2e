import { sanitizeSvg } from '../sanitize';

const wrap = (inner: string, rootAttrs = '') =>
  `<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 10 10"${rootAttrs}>${inner}</svg>`;

describe('sanitizeSvg', () => {
  it('keeps graphviz drawing', () => {
    const svg = sanitizeSvg(
      wrap(
        '<g id="node1" class="node vjpviz-node-failed"><title>e0</title><path d="M0,0L1,1" fill="#fff"/><text x="1" y="2">softclip</text></g>'
      )
    )!;
    expect(svg.localName).toBe('svg');
    expect(svg.querySelector('g.node title')!.textContent).toBe('e0');
    expect(svg.querySelector('.vjpviz-node-failed')).not.toBeNull();
    expect(svg.querySelector('path')!.getAttribute('d')).toBe('M0,0L1,1');
  });

  it('removes script, foreignObject and other active elements', () => {
    const svg = sanitizeSvg(
      wrap(
        '<script>alert(1)</script><foreignObject><div xmlns="http://www.w3.org/1999/xhtml"><img src="x" onerror="alert(1)"/></div></foreignObject>' +
          '<g><script type="text/javascript">alert(2)</script><animate attributeName="href" to="javascript:alert(3)"/><set attributeName="onclick" to="alert(4)"/>' +
          '<iframe src="javascript:alert(5)"/><use href="#x"/><image href="x.png"/><style>*{background:url(javascript:alert(6))}</style></g>'
      )
    )!;
    const html = svg.outerHTML.toLowerCase();
    for (const bad of [
      'script',
      'foreignobject',
      'animate',
      '<set',
      'iframe',
      '<use',
      '<image',
      '<style',
      'alert'
    ]) {
      expect(html).not.toContain(bad);
    }
  });

  it('removes event handler attributes everywhere, root included', () => {
    const svg = sanitizeSvg(
      wrap(
        '<g onclick="alert(1)" ONMOUSEOVER="alert(2)"><text onload="alert(3)">t</text></g>',
        ' onload="alert(0)"'
      )
    )!;
    expect(svg.outerHTML).not.toMatch(/\son\w+=/i);
    expect(svg.querySelector('text')!.textContent).toBe('t');
  });

  it('removes javascript: and data:text/html URLs, however spelled', () => {
    const svg = sanitizeSvg(
      wrap(
        '<a href="javascript:alert(1)"><text>a</text></a>' +
          '<a xlink:href=" JaVaScRiPt:alert(2)"><text>b</text></a>' +
          '<a href="java&#x09;script:alert(3)"><text>c</text></a>' +
          '<a href="data:text/html,&lt;script&gt;alert(4)&lt;/script&gt;"><text>d</text></a>' +
          '<a href="https://example.org/"><text>ok</text></a>' +
          '<g style="background:url(javascript:alert(5))"><text>e</text></g>'
      )
    )!;
    const links = Array.from(svg.querySelectorAll('a'));
    expect(links.map(a => a.getAttribute('href'))).toEqual([
      null,
      null,
      null,
      null,
      'https://example.org/'
    ]);
    expect(
      links[1].getAttributeNS('http://www.w3.org/1999/xlink', 'href')
    ).toBeNull();
    expect(svg.querySelector('g[style]')).toBeNull();
  });

  it('keeps titles and other text that is not a URL', () => {
    const svg = sanitizeSvg(
      wrap(
        '<g><a xlink:title="softclip: bwd rule"><text font-family="Times,serif">x</text></a></g>'
      )
    )!;
    expect(svg.querySelector('a')!.getAttribute('xlink:title')).toBe(
      'softclip: bwd rule'
    );
    expect(svg.querySelector('text')!.getAttribute('font-family')).toBe(
      'Times,serif'
    );
  });

  it('drops data and style attributes and what the policy does not list', () => {
    const svg = sanitizeSvg(
      wrap(
        '<g data-x="1" style="fill:red" filter="url(#f)"><marker id="m"/><text>t</text></g>'
      )
    )!;
    const g = svg.querySelector('g')!;
    expect(g.getAttributeNames()).toEqual([]);
    expect(svg.querySelector('marker')).toBeNull();
  });

  it('keeps kernel text inert: labels are text, not markup', () => {
    const svg = sanitizeSvg(
      wrap('<text>&lt;img src=x onerror=alert(1)&gt;</text>')
    )!;
    expect(svg.querySelector('img')).toBeNull();
    expect(svg.querySelector('text')!.textContent).toBe(
      '<img src=x onerror=alert(1)>'
    );
  });

  it('rejects what is not SVG', () => {
    expect(sanitizeSvg('<img src=x onerror=alert(1)>')).toBeNull();
    expect(
      sanitizeSvg('<svg xmlns="http://www.w3.org/2000/svg"/><svg/>')
    ).toBeNull();
    expect(sanitizeSvg('not xml at all')).toBeNull();
    expect(sanitizeSvg('')).toBeNull();
  });
});
