// The dark theme: what must be read in the panel, the graph and the diff keeps a WCAG
// contrast (4.5 text, 3 large text and graphics), and the failure still stands out red.
import { expect, test } from './vjpviz';

/**
 * In the page: WCAG contrast of what is drawn, semi-transparent colours composited
 * over what lies beneath them.
 */
function installContrast() {
  type RGBA = number[];
  const parse = (s: string | null): RGBA | null => {
    const m = /rgba?\(([^)]*)\)/.exec(s || '');
    if (!m) {
      return null;
    }
    const p = m[1]
      .split(/[\s,/]+/)
      .filter(Boolean)
      .map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (fg: RGBA, bg: RGBA) =>
    [0, 1, 2].map(i => fg[i] * fg[3] + bg[i] * (1 - fg[3])).concat(1);
  const lum = (c: RGBA) => {
    const [r, g, b] = c.slice(0, 3).map(v => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratio = (a: RGBA, b: RGBA) => {
    const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  };
  // The opaque colour behind an element: its and its ancestors' backgrounds, composited.
  const backdrop = (el: Element) => {
    const layers: RGBA[] = [];
    for (let e: Element | null = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) {
        layers.push(c);
        if (c[3] >= 1) {
          break;
        }
      }
    }
    let acc =
      layers.length && layers[layers.length - 1][3] >= 1
        ? layers.pop()!
        : [255, 255, 255, 1];
    while (layers.length) {
      acc = over(layers.pop()!, acc);
    }
    return acc;
  };
  const paint = (
    el: Element,
    prop: 'color' | 'fill' | 'stroke',
    under: RGBA
  ) => {
    const c = parse(getComputedStyle(el)[prop]);
    return c ? over(c, under) : under; // 'none': what is beneath shows
  };
  (window as any).__vjpvizContrast = {
    // HTML text against its backdrop.
    text: (el: Element) => {
      const bg = backdrop(el);
      return ratio(paint(el, 'color', bg), bg);
    },
    // SVG text on a shape (or the viewport) inside the graph viewport.
    svg: (textEl: Element, shapeEl: Element | null, viewport: Element) => {
      const vbg = backdrop(viewport);
      const under = shapeEl ? paint(shapeEl, 'fill', vbg) : vbg;
      return ratio(paint(textEl, 'fill', under), under);
    },
    // An SVG stroke against the viewport.
    stroke: (el: Element, viewport: Element) => {
      const vbg = backdrop(viewport);
      return ratio(paint(el, 'stroke', vbg), vbg);
    }
  };
}

/** [measured contrast, its minimum] of each thing that must be read; null: not found. */
function measure() {
  const C = (window as any).__vjpvizContrast;
  const p = document.getElementById('jp-vjpviz-panel')!;
  const q = (sel: string) => p.querySelector(sel);
  const text = (sel: string, min = 4.5) =>
    q(sel) ? [C.text(q(sel)), min] : null;
  const viewport = q('.jp-Vjpviz-viewport');
  const failed = q('.vjpviz-node-failed');
  const failedShape = failed?.querySelector('path, polygon, ellipse');
  const node = q('.jp-Vjpviz-svg .node:not(.vjpviz-node-failed)');
  const nodeShape = node?.querySelector('path, polygon, ellipse');
  const edge = q('.jp-Vjpviz-svg .edge path');
  const svgText = (
    t: Element | null | undefined,
    shape: Element | null | undefined,
    min = 4.5
  ) => (t ? [C.svg(t, shape ?? null, viewport), min] : null);
  return {
    headline: text('.jp-Vjpviz-headline'),
    location: text('.jp-Vjpviz-location'),
    listItem: text('.jp-Vjpviz-itemFunction'),
    badge: text('.jp-Vjpviz-badge', 3),
    diffExpected: text('.jp-Vjpviz-diffRow td:nth-child(2)'),
    diffGot: text('.jp-Vjpviz-diffRow td:last-child'),
    diffHeader: text('.jp-Vjpviz-diff th'),
    ruleLine: text('.jp-Vjpviz-line:not(.jp-mod-bad)'),
    badLine: text('.jp-Vjpviz-line.jp-mod-bad'),
    lineNo: text('.jp-Vjpviz-lineNo', 3),
    graphStatus: text('.jp-Vjpviz-graphStatus', 3),
    failedNodeText: svgText(failed?.querySelector('text'), failedShape),
    failedNodeBorder: failedShape ? [C.stroke(failedShape, viewport), 3] : null,
    nodeText: svgText(node?.querySelector('text'), nodeShape),
    nodeBorder: nodeShape ? [C.stroke(nodeShape, viewport), 3] : null,
    edge: edge ? [C.stroke(edge, viewport), 3] : null,
    edgeLabel: svgText(q('.jp-Vjpviz-svg .edge text'), null, 3),
    editorText: text('.vjpviz-fix-editor .cm-line'),
    fixReason: text('.jp-Vjpviz-fixReason'),
    details: text('.jp-Vjpviz-nodeDetails dd')
  };
}

/** The computed strokes that mark the failure, and another node's for comparison. */
function strokes() {
  const p = document.getElementById('jp-vjpviz-panel')!;
  const stroke = (sel: string) => {
    const el = p.querySelector(sel);
    return el ? getComputedStyle(el).stroke : null;
  };
  const plain =
    '.jp-Vjpviz-svg .node:not(.vjpviz-node-failed):not(.vjpviz-node-selected)';
  return {
    failed: stroke('.vjpviz-node-failed path, .vjpviz-node-failed polygon'),
    other: stroke(`${plain} path, ${plain} polygon`),
    mismatchEdge: stroke('.jp-Vjpviz-svg .edge.vjpviz-edge-mismatch path'),
    legendFailed: stroke(
      '.jp-Vjpviz-svg .node.vjpviz-legend-failed path, .jp-Vjpviz-svg .node.vjpviz-legend-failed polygon'
    )
  };
}

const isRed = (c: string | null) => {
  const [r, g, b] = (/rgba?\(([^)]*)\)/.exec(c ?? '')?.[1] ?? '0,0,0')
    .split(/[\s,]+/)
    .map(Number);
  return r > 150 && r > g + 60 && r > b + 60;
};

test(
  'dark theme: the panel, graph and diff stay readable',
  { tag: '@extra' },
  async ({ vv, page }) => {
    await vv.open('dark.ipynb');
    await vv.runCells(0, 1);
    await expect(vv.panel).toBeVisible({ timeout: 15000 });
    await vv.waitFunctions(['rule_d']);
    await vv.waitGraph();
    await page.theme.setDarkTheme();
    await expect(page.locator('body')).toHaveAttribute(
      'data-jp-theme-light',
      'false'
    );
    await vv.panel.locator('[data-vjpviz-action="fit"]').click();
    // Details of another node (a selected node's outline would hide the failed one's).
    await vv.panel
      .locator('.jp-Vjpviz-svg .node:not(.vjpviz-node-failed)')
      .first()
      .click();
    await vv.panel.locator('.jp-Vjpviz-nodeDetails dd').first().waitFor();
    await vv.panel.evaluate(el => el.scrollTo(0, 0));
    await vv.shot('12-dark');
    await vv.shot('12-dark-panel', vv.panel);
    await page.evaluate(installContrast);
    const report = await page.evaluate(measure);
    // The failure must still stand out: a red outline unlike the other nodes', red mismatch edges.
    const marks = await page.evaluate(strokes);
    vv.log(`dark strokes: ${JSON.stringify(marks)}`);
    // Pan (arrow keys) until the legend, which Fit leaves out, is in view, and look at it.
    await vv.panel.locator('.jp-Vjpviz-viewport').focus();
    for (let i = 0; i < 150; i++) {
      const off = await vv.panel.evaluate(p => {
        const vp = p
          .querySelector('.jp-Vjpviz-viewport')!
          .getBoundingClientRect();
        const lg = p
          .querySelector('.jp-Vjpviz-svg .cluster.vjpviz-legend')!
          .getBoundingClientRect();
        return { right: lg.right - vp.right, bottom: lg.bottom - vp.bottom };
      });
      if (off.right <= 0 && off.bottom <= 0) {
        break;
      }
      // panzoom glides a step (5% of the viewport) per press.
      await page.keyboard.press(off.right > 0 ? 'ArrowRight' : 'ArrowDown');
      await page.waitForTimeout(60);
    }
    await vv.shot('12-dark-legend', vv.panel.locator('.jp-Vjpviz-viewport'));
    expect(
      isRed(marks.failed) && marks.failed !== marks.other,
      `the failed node is marked red: ${JSON.stringify(marks)}`
    ).toBe(true);
    expect(
      isRed(marks.legendFailed) && marks.legendFailed === marks.failed,
      `the legend's failing-node sample is red like the failing node: ${JSON.stringify(marks)}`
    ).toBe(true);
    expect(
      marks.mismatchEdge === null || isRed(marks.mismatchEdge),
      `the mismatch edge is red: ${marks.mismatchEdge}`
    ).toBe(true);
    vv.log(
      `dark contrast: ${Object.entries(report)
        .map(([k, v]) => `${k}=${v ? v[0].toFixed(1) : 'n/a'}`)
        .join(' ')}`
    );
    expect(
      Object.entries(report)
        .filter(([, v]) => !v)
        .map(([k]) => k),
      'not found to measure'
    ).toEqual([]);
    expect(
      Object.entries(report)
        .filter(([, v]) => v![0] < v![1])
        .map(([k, v]) => `${k} ${v![0].toFixed(2)} < ${v![1]}`),
      'low contrast in the dark theme'
    ).toEqual([]);
  }
);
