// Big graphs: a 2,100-equation model reaches the panel drawn with its diagnosis,
// folds around the failure, expands and searches, in the sidebar and in the main area.
import type { Locator } from '@playwright/test';

import { CELL, expect, MIN_FAILED_PX, test, Vjpviz } from './vjpviz';

/**
 * The graph's note (what the view folds) in `scope`: its text, and whether its box
 * lies inside its graph widget's and inside `scope`'s (it wraps: nothing cut off).
 */
function graphNote(scope: Locator) {
  return scope.evaluate(el => {
    const note = el.querySelector('.jp-Vjpviz-graphNote');
    if (!note) {
      return { text: null, inside: false };
    }
    const box = (r: DOMRect) =>
      [r.left, r.top, r.right, r.bottom].map(Math.round);
    const n = box(note.getBoundingClientRect());
    const holders = [note.closest('.jp-Vjpviz-graph')!, el].map(h =>
      box(h.getBoundingClientRect())
    );
    const within = (h: number[]) =>
      n[0] >= h[0] && n[1] >= h[1] && n[2] <= h[2] && n[3] <= h[3];
    return {
      text: note.textContent,
      note: n,
      holders,
      inside: holders.every(within) && note.scrollWidth <= note.clientWidth
    };
  });
}

async function expectFoldNote(vv: Vjpviz, scope: Locator, where: string) {
  const note = await graphNote(scope);
  vv.log(`${where} note: ${JSON.stringify(note)}`);
  expect(note.text, `${where}: the fold note`).toMatch(/collapsed/);
  expect(
    note.inside,
    `${where}: the fold note fits: ${JSON.stringify(note)}`
  ).toBe(true);
}

/** The page's times (ms) from the big model's cell error to the panel and its graph. */
async function timeBigModel(vv: Vjpviz) {
  await vv.page.evaluate(index => {
    const cellEl = document.querySelectorAll(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell'
    )[index];
    const t: Record<string, number> = ((window as any).__vjpvizT = {});
    performance.clearMarks();
    const obs = new MutationObserver(() => {
      const now = performance.now();
      const p = document.getElementById('jp-vjpviz-panel');
      if (
        !t.error &&
        cellEl.querySelector(
          '[data-mime-type="application/vnd.jupyter.stderr"]'
        )
      ) {
        t.error = now;
      }
      if (
        !t.panel &&
        p?.offsetParent &&
        p
          .querySelector('.jp-Vjpviz-headline')
          ?.textContent?.includes('big_rule')
      ) {
        t.panel = now;
      }
      if (
        !t.graph &&
        t.panel &&
        p!.querySelector(
          '.jp-Vjpviz-graph[data-vjpviz-graph="ready"] .vjpviz-node-failed'
        )
      ) {
        t.graph = now;
      }
      if (t.error && t.panel && t.graph) {
        obs.disconnect();
      }
    });
    obs.observe(document.body, {
      subtree: true,
      childList: true,
      attributes: true,
      characterData: true
    });
  }, CELL.big);
  await vv.runCell(CELL.big);
  await vv.page.waitForFunction(
    () => {
      const t = (window as any).__vjpvizT;
      return t.panel && t.graph && t.error;
    },
    null,
    { timeout: 60000 }
  );
  return vv.page.evaluate(() => {
    const mark = (name: string) =>
      performance.getEntriesByName(name).pop()?.startTime;
    const first = (name: string) =>
      performance.getEntriesByName(name)[0]?.startTime;
    return {
      ...((window as any).__vjpvizT as {
        error: number;
        panel: number;
        graph: number;
      }),
      received: mark('vjpviz:diagnosis-received'),
      shown: mark('vjpviz:diagnosis-shown'),
      graphReceived: mark('vjpviz:graph-received'),
      graphShown: mark('vjpviz:graph-shown'),
      fromPush: first('vjpviz:graph-from-push'),
      nodes: document.querySelectorAll('#jp-vjpviz-panel .jp-Vjpviz-svg g.node')
        .length
    };
  });
}

test('2k-node model: the panel and its graph come with the error, no round trip', async ({
  vv
}) => {
  await vv.open('panel.ipynb');
  await vv.runCells(CELL.load, CELL.define);
  await vv.showPanel();
  const t = await timeBigModel(vv);
  // Times are logged (benchmarks judge speed); what is asserted is how the graph came.
  const ms = (x?: number) => `${Math.round(x ?? NaN)} ms`;
  vv.log(
    `TIMING 2k-node diagnosis: panel shown ${ms(t.panel - t.error)} after the cell error appeared ` +
      `(negative: before it); graph shown ${ms(t.graph - t.error)} after the error; ` +
      `kernel push -> diagnosis drawn ${ms(t.shown! - t.received!)}; ` +
      `graph reply -> drawn ${ms(t.graphShown! - t.graphReceived!)}; ${t.nodes} boxes drawn`
  );
  expect(t.received, 'the diagnosis was marked received').toBeDefined();
  expect(t.shown, 'the diagnosis was marked shown').toBeGreaterThanOrEqual(
    t.received!
  );
  // The graph first drawn came with the push, not by a round trip to a busy kernel.
  expect(t.fromPush, 'the default view came with the push').toBeLessThanOrEqual(
    t.graph
  );
  await vv.shot('06-big-model');
});

test('expand a cluster (kernel round trip) and search', async ({ vv }) => {
  await vv.bigModel();
  const boxes = vv.panel.locator('.jp-Vjpviz-svg g.node');
  const expandable = vv.panel.locator('.vjpviz-expandable').first();
  await expect(
    expandable,
    'the big model folds around the failure'
  ).toBeAttached();
  const before = await boxes.count();
  await expandable.dblclick();
  await expect(boxes).not.toHaveCount(before, { timeout: 30000 });
  vv.log(`expanded: ${before} -> ${await boxes.count()} boxes`);
  await vv.search(vv.panel, 'sin');
  await vv.shot('07-search');
});

test('open in main area: the unscoped model large, searchable, expandable, centred on the failure', async ({
  vv,
  page
}) => {
  await vv.bigModel();
  // The sidebar centred on the failure (as it opens when Fit would draw too small), then fitted.
  await vv.panel.locator('[data-vjpviz-action="centre"]').click();
  await vv.frames();
  await vv.shot('13-unscoped-panel', vv.panel);
  await vv.panel.locator('[data-vjpviz-action="fit"]').click();
  await vv.frames();
  await vv.shot(
    '13-unscoped-panel-fit',
    vv.panel.locator('.jp-Vjpviz-viewport')
  );
  await expectFoldNote(vv, vv.panel, 'sidebar');
  await vv.panel.locator('[data-vjpviz-action="open-main"]').click();
  const main = vv.mainGraph;
  await main
    .locator('.jp-Vjpviz-graph[data-vjpviz-graph="ready"] .vjpviz-node-failed')
    .first()
    .waitFor({ state: 'attached', timeout: 30000 });
  await vv.frames();
  const m = await main.evaluate(el => {
    const vp = el.querySelector('.jp-Vjpviz-viewport')!.getBoundingClientRect();
    const f = el.querySelector('.vjpviz-node-failed')!.getBoundingClientRect();
    const side = document
      .querySelector('#jp-vjpviz-panel .jp-Vjpviz-viewport')!
      .getBoundingClientRect();
    return {
      vp: [vp.width, vp.height],
      side: [side.width, side.height],
      failedH: f.height,
      inView:
        f.left >= vp.left &&
        f.right <= vp.right &&
        f.top >= vp.top &&
        f.bottom <= vp.bottom
    };
  });
  vv.log(
    `main-area graph: viewport ${m.vp.map(Math.round).join('x')} (sidebar ${m.side.map(Math.round).join('x')}), ` +
      `failing node ${m.failedH.toFixed(0)} px tall, in view: ${m.inView}`
  );
  expect(
    m.vp[0] * m.vp[1],
    'the main-area view is larger than the sidebar one'
  ).toBeGreaterThan(2 * m.side[0] * m.side[1]);
  expect(
    m.inView && m.failedH >= MIN_FAILED_PX,
    `main area opens on the failing node: ${JSON.stringify(m)}`
  ).toBe(true);
  await vv.shot('14-unscoped-main', main);
  await expectFoldNote(vv, main, 'main-area');
  // Its own toolbar: search, select + expand/collapse, fit, centre.
  await vv.search(main, 'tanh');
  await main.locator('[data-vjpviz-action="fit"]').click();
  const boxes = main.locator('.jp-Vjpviz-svg g.node');
  const before = await boxes.count();
  await main.locator('.vjpviz-expandable[data-vjpviz-node]').first().click();
  await main.locator('[data-vjpviz-action="expand"]:not([disabled])').click();
  await expect(boxes).not.toHaveCount(before, { timeout: 30000 });
  vv.log(`main area: expanded ${before} -> ${await boxes.count()} boxes`);
  await main.locator('[data-vjpviz-action="centre"]').click();
  expect(
    await vv.failedOffCentre(main),
    'main area: the failing node off centre (px)'
  ).toBeLessThan(2);
  await vv.shot('15-unscoped-main-expanded', main);
  // The same command again brings the open view forward, no second one.
  await page.keyboard.press('Alt+g');
  await page.waitForTimeout(300);
  await expect(
    page.locator('.jp-Vjpviz-graphMain'),
    'Alt+G opens no second view'
  ).toHaveCount(1);
});
