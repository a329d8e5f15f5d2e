// The panel's core flow: a failing cell opens it with the diff and the graph;
// the graph's tools, the jump to the source, Verify and Apply; HTML in names
// stays inert; a reloaded page still works; a vv.grads report shows with its graph.
import type { JupyterLabPage } from '@jupyterlab/galata';

import { CELL, EVIL, expect, FIXED_BWD, test } from './vjpviz';

test('notebook opens, panel shows the empty state', async ({ vv }) => {
  await vv.open('empty.ipynb');
  await vv.showPanel();
  await expect(vv.panel).toContainText('%load_ext vjpviz');
  await vv.shot('01-empty');
});

test('failing cell -> panel opens with the diff and the failing node', async ({
  vv
}) => {
  await vv.open('panel.ipynb');
  // Collapse the right sidebar so the auto-open is what shows it.
  await vv.hidePanel();
  await vv.runCells(CELL.load, CELL.define, CELL.grad);
  expect(await vv.hasError(CELL.grad), 'the grad cell fails').toBe(true);
  await expect(vv.panel).toBeVisible({ timeout: 15000 });
  await expect(
    vv.panel
      .locator('[data-vjpviz-kind="bwd_type"][data-vjpviz-function="softclip"]')
      .first()
  ).toBeVisible();
  await vv.expectSoftclipShown();
  await vv.waitGraph();
  await vv.expectFitted('initial view');
  // The diagnosis comes with its fixes judged: the editor offers them, not the rule as written.
  const options = vv.panel.locator('.jp-Vjpviz-picker option');
  await expect(options.first()).toBeAttached({ timeout: 15000 });
  await expect(
    options.filter({ hasText: 'The rule as written' }),
    'the fixes pushed with the diagnosis'
  ).toHaveCount(0, { timeout: 15000 });
  await expect(vv.sidebarTab).toHaveAttribute('title', /\d+ diagnos[ie]s/);
  await vv.shot('02-diagnosis');
});

test('graph: click a node shows details; fit and centre work', async ({
  vv
}) => {
  await vv.softclip();
  await vv.panel.locator('[data-vjpviz-action="fit"]').click();
  await vv.expectFitted('fit');
  await vv.panel.locator('.vjpviz-node-failed').first().click();
  await expect(vv.panel.locator('.jp-Vjpviz-nodeDetails')).toContainText(
    'softclip'
  );
  await vv.panel.locator('[data-vjpviz-action="centre"]').click();
  expect(
    await vv.failedOffCentre(vv.panel),
    'the failing node off centre (px)'
  ).toBeLessThan(2);
});

test('click the source location -> the defining cell is active', async ({
  vv
}) => {
  await vv.softclip();
  await vv.cell(CELL.load).locator('.jp-InputPrompt').first().click();
  await vv.panel.locator('[data-vjpviz-action="jump"]').click();
  await expect(vv.cell(CELL.define)).toHaveClass(/jp-mod-active/, {
    timeout: 5000
  });
});

test('edit the fix -> Verify passes', async ({ vv }) => {
  await vv.softclip();
  await vv.typeFix(FIXED_BWD);
  await vv.panel.locator('[data-vjpviz-action="verify"]').click();
  expect(await vv.verdict()).toMatch(/^pass/);
  await vv.shot('03-verified');
});

test('Apply -> cell updated -> re-run: no error, grad equals plain autodiff', async ({
  vv,
  page
}) => {
  await vv.diagnosed(
    'apply.ipynb',
    [CELL.load, CELL.define, CELL.grad],
    'softclip'
  );
  await vv.typeFix(FIXED_BWD);
  await vv.panel.locator('[data-vjpviz-action="apply"]').click();
  await expect(vv.panel.locator('[data-vjpviz-applied]')).toHaveAttribute(
    'data-vjpviz-applied',
    'true',
    { timeout: 60000 }
  );
  const editor = vv.cell(CELL.define).locator('.jp-InputArea-editor');
  await expect(editor).toContainText('return gy @ w.T, x.T @ gy');
  await expect(editor).not.toContainText('(x.T @ gy).T');
  // Notebook undo takes the edit back, redo puts it again.
  await editor.locator('.cm-content').click();
  await page.keyboard.press('Control+z');
  await expect(editor, 'undo restores the old rule').toContainText(
    '(x.T @ gy).T'
  );
  await page.keyboard.press('Control+Shift+z');
  await expect(editor, 'redo re-applies the fix').not.toContainText(
    '(x.T @ gy).T'
  );
  await page.keyboard.press('Escape');
  await vv.runCell(CELL.grad);
  expect(
    await vv.hasError(CELL.grad),
    `the grad cell: ${await vv.outputText(CELL.grad)}`
  ).toBe(false);
  await vv.runCell(CELL.compare);
  expect(await vv.outputText(CELL.compare)).toContain('MATCH True');
  await vv.shot('04-applied');
});

test('a function named <img src=x onerror=...> renders inert', async ({
  vv,
  page
}) => {
  await vv.diagnosed('panel.ipynb', [CELL.load, CELL.define, CELL.evil], EVIL);
  await expect(vv.panel.locator('.jp-Vjpviz-headline')).toContainText(
    '<img src=x'
  );
  await expect(vv.panel.locator('img')).toHaveCount(0);
  await page.waitForTimeout(300);
  expect(
    await page.evaluate(() => (window as any).__vjpvizXss)
  ).toBeUndefined();
  await vv.shot('05-xss-inert');
});

test('reload the page -> the panel still works (history, graph, verify)', async ({
  vv,
  page
}) => {
  await vv.softclip();
  // Galata's reload, told not to wait for the Launcher: the restored workspace shows the notebook.
  await (page as unknown as JupyterLabPage).reload({ waitForIsReady: false });
  await vv.waitNotebook('panel.ipynb');
  await vv.showPanel();
  await vv.item('softclip').click({ timeout: 30000 });
  await vv.waitGraph();
  await vv.typeFix(FIXED_BWD);
  await vv.panel.locator('[data-vjpviz-action="verify"]').click();
  expect(await vv.verdict(), 'verify after reload').toMatch(/^pass/);
  await vv.shot('08-after-reload');
});

test('%vjpviz grads -> the panel shows the leaf with no gradient and the graph', async ({
  vv
}) => {
  await vv.open('grads.ipynb');
  await vv.showPanel();
  await vv.runCells(0, 1);
  const grads = vv.panel.locator('.jp-Vjpviz-grads');
  await expect(grads.locator('.jp-Vjpviz-gradsHeadline')).toContainText(
    'vjpviz grads of <lambda>: 1 leaf with no gradient',
    { timeout: 30000 }
  );
  await expect(grads.locator('.jp-Vjpviz-gradsZero tbody tr')).toHaveText(
    /\['frozen'\]\s*stopped\s*stop_gradient/
  );
  // The graph came drawn with the push, centred on the stop_gradient that cut it.
  await grads
    .locator('.jp-Vjpviz-canvas .vjpviz-node-failed')
    .first()
    .waitFor({ state: 'attached', timeout: 30000 });
  await vv.shot('10-grads');
});
