// The panel's browser tests under Galata: each test gets its own directory, page and
// kernel from Galata's fixtures. The notebooks are ui-tests/make_notebook.py's
// ($VJPVIZ_NOTEBOOKS), uploaded into the test's directory.
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const CELL = { load: 0, define: 1, evil: 4 };

test('a function named <img src=x onerror=...> renders inert', async ({ page, tmpPath }) => {
  const evil = '<img src=x onerror="window.__vjpvizXss=1">';
  await page.contents.uploadFile(
    path.join(process.env.VJPVIZ_NOTEBOOKS!, 'panel.ipynb'),
    `${tmpPath}/panel.ipynb`
  );
  await page.notebook.openByPath(`${tmpPath}/panel.ipynb`);
  for (const i of [CELL.load, CELL.define, CELL.evil]) {
    await page.notebook.runCell(i);
  }
  const panel = page.locator('#jp-vjpviz-panel');
  const item = panel.locator(`[data-vjpviz-function="${evil.replace(/"/g, '\\"')}"]`).first();
  await expect(item).toBeVisible({ timeout: 30000 });
  await item.click();
  await expect(panel.locator('.jp-Vjpviz-headline')).toContainText('<img src=x');
  await expect(panel.locator('img')).toHaveCount(0);
  await page.waitForTimeout(300);
  expect(await page.evaluate(() => (window as any).__vjpvizXss)).toBeUndefined();
  await page.screenshot({ path: test.info().outputPath('05-xss-inert.png') });
});
