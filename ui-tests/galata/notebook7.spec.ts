// The panel in Notebook 7's right sidebar, against `jupyter notebook` (project
// notebook7 of playwright.config.js: $VJPVIZ_NB7_URL, $VJPVIZ_TOKEN). Galata's page
// fixture drives JupyterLab only, so this uses @playwright/test's own.
import { expect, test } from '@playwright/test';
import * as path from 'path';

const NOTEBOOK = 'nb7.ipynb'; // ui-tests/make_notebook.py: load, define softclip, failing grad
/**
 * Page errors of Notebook 7 itself: an unhandled rejection at start-up that
 * Notebook 7.6.5 raises with this extension blocked as well (checked by aborting
 * the requests for jupyter-vjpviz's files).
 */
const KNOWN_NOTEBOOK_ERRORS = [
  "TypeError: Cannot read properties of undefined (reading 'schema')"
];

test('notebook 7: failing cell -> the right sidebar shows the diagnosis and the failing node', async ({
  page
}) => {
  const errors: string[] = [];
  page.on('pageerror', e => errors.push(e.stack || String(e)));
  const panel = page.locator('#jp-vjpviz-panel');
  await page.goto(`/notebooks/${NOTEBOOK}?token=${process.env.VJPVIZ_TOKEN}`);
  await page.waitForFunction(
    () => {
      const w = (window as any).jupyterapp?.shell?.currentWidget;
      return (
        w?.sessionContext?.session?.kernel?.status === 'idle' &&
        document.querySelector('.jp-NotebookPanel .jp-Cell')
      );
    },
    null,
    { timeout: 60000 }
  );
  await page.waitForFunction(
    () => (window as any).jupyterapp.commands.hasCommand('vjpviz:open-panel'),
    null,
    { timeout: 30000 }
  );
  // Notebook 7 starts with the right sidebar collapsed: the panel is there, hidden.
  await expect(panel).toBeAttached();
  expect(
    await panel.evaluate(el => el.closest('#jp-right-stack') !== null),
    'the panel is in the right sidebar'
  ).toBe(true);
  await expect(panel, 'the right sidebar starts collapsed').toBeHidden();
  // %load_ext vjpviz, define softclip, the failing grad: each run as the Run button does.
  for (const i of [0, 1, 2]) {
    await page.evaluate(async index => {
      const { jupyterapp } = window as any;
      jupyterapp.shell.currentWidget.content.activeCellIndex = index;
      await jupyterapp.commands.execute('notebook:run-cell');
    }, i);
    await page.waitForFunction(
      index => {
        const model = (window as any).jupyterapp.shell.currentWidget.content
          .widgets[index]?.model;
        return (
          typeof model?.executionCount === 'number' &&
          document
            .querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')
            [index]?.querySelector('.jp-InputPrompt')
            ?.textContent?.includes(`[${model.executionCount}]`)
        );
      },
      i,
      { timeout: 60000 }
    );
  }
  const grad = page.locator('.jp-NotebookPanel .jp-Notebook .jp-Cell').nth(2);
  await expect(
    grad.locator('[data-mime-type="application/vnd.jupyter.stderr"]'),
    'the grad cell fails'
  ).not.toHaveCount(0);
  // The diagnosis opens the sidebar (autoOpen, app.shell.activateById).
  await expect(panel).toBeVisible({ timeout: 15000 });
  await expect(
    panel.locator(
      '[data-vjpviz-kind="bwd_type"][data-vjpviz-function="softclip"]'
    )
  ).toBeVisible();
  await expect(
    panel.locator(
      '[data-vjpviz-path="w"][data-vjpviz-expected="float32[5,3]"][data-vjpviz-got="float32[3,5]"]'
    )
  ).toBeVisible();
  await expect(panel.locator('.jp-Vjpviz-headline')).toContainText('softclip');
  await expect(
    panel
      .locator(
        '.jp-Vjpviz-graph[data-vjpviz-graph="ready"] .vjpviz-node-failed'
      )
      .first()
  ).toBeVisible({ timeout: 30000 });
  // Drawn on screen, inside the graph viewport, inside the right sidebar beside the notebook.
  const geo = await page.evaluate(() => {
    const rect = (sel: string) =>
      document.querySelector(sel)!.getBoundingClientRect().toJSON();
    return {
      node: rect('#jp-vjpviz-panel .vjpviz-node-failed'),
      viewport: rect('#jp-vjpviz-panel .jp-Vjpviz-viewport'),
      stack: rect('#jp-right-stack'),
      main: rect('.jp-NotebookPanel')
    };
  });
  console.log(
    `notebook 7: failing node ${JSON.stringify(geo.node)}; right stack x=${geo.stack.x.toFixed(0)} ` +
      `w=${geo.stack.width.toFixed(0)}; notebook right=${geo.main.right.toFixed(0)}`
  );
  const inside = (a: DOMRect, b: DOMRect) =>
    a.left >= b.left - 1 &&
    a.right <= b.right + 1 &&
    a.top >= b.top - 1 &&
    a.bottom <= b.bottom + 1;
  expect(
    geo.stack.width > 200 && geo.stack.left >= geo.main.right - 1,
    `the right sidebar is beside the notebook: ${JSON.stringify(geo)}`
  ).toBe(true);
  expect(
    inside(geo.node, geo.viewport) && inside(geo.viewport, geo.stack),
    `the failing node is drawn inside the sidebar's graph: ${JSON.stringify(geo)}`
  ).toBe(true);
  expect(
    geo.node.height,
    "the failing node's height (px)"
  ).toBeGreaterThanOrEqual(20);
  const shots = process.env.VJPVIZ_SCREENSHOTS ?? test.info().outputDir;
  await page.screenshot({ path: path.join(shots, '20-notebook7.png') });
  await panel.screenshot({ path: path.join(shots, '20-notebook7-panel.png') });
  expect(
    errors.filter(e => !KNOWN_NOTEBOOK_ERRORS.some(k => e.includes(k))),
    'page errors'
  ).toEqual([]);
});
