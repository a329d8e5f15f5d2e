// Browser test of the VJP debugger panel, run by ui-tests/run.sh (which starts
// JupyterLab and sets VJPVIZ_URL, VJPVIZ_TOKEN, ...). playwright-core + Debian
// chromium; no Playwright browser download.
import { chromium } from 'playwright-core';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const URL = process.env.VJPVIZ_URL;
const TOKEN = process.env.VJPVIZ_TOKEN;
const SHOTS = process.env.VJPVIZ_SCREENSHOTS;
const NOTEBOOK = 'panel.ipynb';

const FIXED_BWD = `def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, x.T @ gy
`;

const CELL = { load: 0, define: 1, grad: 2, compare: 3, evil: 4, big: 5 };
const t0 = Date.now();
const log = msg => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

const results = [];
let page;
let context;

async function test(name, body) {
  const start = Date.now();
  try {
    await body();
    results.push({ name, ok: true });
    log(`PASS ${name} (${((Date.now() - start) / 1000).toFixed(1)}s)`);
  } catch (error) {
    results.push({ name, ok: false, error });
    log(`FAIL ${name}: ${error && error.stack ? error.stack : error}`);
    await shot(`FAILED-${name.replace(/\W+/g, '-')}`).catch(() => undefined);
  }
}

function check(condition, message) {
  if (!condition) {
    throw new Error(message);
  }
}

async function shot(name) {
  const path = join(SHOTS, `${name}.png`);
  await page.screenshot({ path });
  log(`screenshot ${path}`);
}

const notebook = () => page.locator('.jp-NotebookPanel:not(.lm-mod-hidden)');
const cell = i => notebook().locator('.jp-Notebook .jp-Cell').nth(i);
const panel = () => page.locator('#jp-vjpviz-panel');

async function openNotebook() {
  await page.goto(`${URL}/lab/tree/${NOTEBOOK}?reset&token=${TOKEN}`);
  await notebook().locator('.jp-Cell').first().waitFor({ timeout: 60000 });
  // The kernel is up when the toolbar says idle.
  await page.waitForFunction(
    () => {
      const el = document.querySelector(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator'
      );
      return el && el.getAttribute('data-status') === 'idle';
    },
    null,
    { timeout: 60000 }
  );
}

async function promptOf(i) {
  return (await cell(i).locator('.jp-InputPrompt').first().textContent()) ?? '';
}

/** Run cell i (command mode, Shift+Enter) and wait until it finished. */
async function runCell(i, timeout = 120000) {
  const before = await promptOf(i);
  const press = async () => {
    await cell(i).locator('.jp-InputPrompt').first().click();
    await page.keyboard.press('Escape');
    await cell(i).locator('.jp-InputPrompt').first().click();
    await page.keyboard.press('Shift+Enter');
  };
  await press();
  const deadline = Date.now() + timeout;
  let retry = Date.now() + 5000;
  for (;;) {
    const now = await promptOf(i);
    if (/\[\d+\]/.test(now) && now !== before) {
      return;
    }
    if (now === before && Date.now() > retry) {
      // The key press went nowhere (focus elsewhere): press again.
      log(`cell ${i} did not start; pressing Shift+Enter again`);
      await press();
      retry = Date.now() + 5000;
    }
    check(Date.now() < deadline, `cell ${i} did not finish (prompt ${now})`);
    await page.waitForTimeout(100);
  }
}

async function outputText(i) {
  return (await cell(i).locator('.jp-OutputArea').first().innerText()).trim();
}

async function hasError(i) {
  return (
    (await cell(i)
      .locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
      .count()) > 0
  );
}

async function waitGraph(failedId) {
  const sel = failedId
    ? `#jp-vjpviz-panel .jp-Vjpviz-graph[data-vjpviz-graph="ready"] [data-vjpviz-node="${failedId}"].vjpviz-node-failed`
    : '#jp-vjpviz-panel .jp-Vjpviz-graph[data-vjpviz-graph="ready"] .vjpviz-node-failed';
  try {
    await page.locator(sel).first().waitFor({ state: 'attached', timeout: 30000 });
  } catch (error) {
    const state = await page.evaluate(() => {
      const g = document.querySelector('#jp-vjpviz-panel .jp-Vjpviz-graph');
      return g && {
        state: g.dataset.vjpvizGraph,
        status: g.querySelector('.jp-Vjpviz-graphStatus')?.textContent,
        nodes: Array.from(g.querySelectorAll('g.node')).map(n => `${n.id}: ${n.getAttribute('class')}`)
      };
    });
    throw new Error(`no failing node in the graph: ${JSON.stringify(state)}\n${error}`);
  }
}

async function main() {
  context = await chromium.launchPersistentContext(process.env.VJPVIZ_PROFILE, {
    executablePath: process.env.VJPVIZ_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1800, height: 1100 },
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync'
    ]
  });
  page = context.pages()[0] ?? (await context.newPage());
  const pageErrors = [];
  page.on('pageerror', e => pageErrors.push(String(e)));
  page.on('dialog', d => {
    if (d.type() === 'beforeunload') {
      void d.accept(); // "leave with unsaved changes?" on reload
      return;
    }
    pageErrors.push(`unexpected ${d.type()} dialog: ${d.message()}`);
    void d.dismiss();
  });
  log('browser launched');

  await test('notebook opens, panel shows the empty state', async () => {
    await openNotebook();
    await page.locator('.jp-SideBar [data-id="jp-vjpviz-panel"]').first().click();
    await panel().waitFor({ state: 'visible', timeout: 10000 });
    const text = await panel().innerText();
    check(text.includes('%load_ext vjpviz'), `empty state: ${text}`);
    await shot('01-empty');
  });

  await test('failing cell -> panel opens with the diff and the failing node', async () => {
    // Collapse the right sidebar so the auto-open is what shows it.
    await page.locator('.jp-SideBar [data-id="jp-vjpviz-panel"]').first().click();
    await panel().waitFor({ state: 'hidden', timeout: 5000 });
    await runCell(CELL.load);
    await runCell(CELL.define);
    await runCell(CELL.grad);
    check(await hasError(CELL.grad), 'the grad cell should fail');
    await panel().waitFor({ state: 'visible', timeout: 15000 });
    const item = panel().locator('[data-vjpviz-kind="bwd_type"][data-vjpviz-function="softclip"]');
    await item.waitFor({ timeout: 10000 });
    const row = panel().locator(
      '[data-vjpviz-path="[1]"][data-vjpviz-expected="float32[5,3]"][data-vjpviz-got="float32[3,5]"]'
    );
    await row.waitFor({ timeout: 10000 });
    const headline = await panel().locator('.jp-Vjpviz-headline').innerText();
    check(headline.includes('softclip'), `headline: ${headline}`);
    await waitGraph(null);
    const bad = await panel().locator('.jp-Vjpviz-line.jp-mod-bad').innerText();
    check(bad.includes('return gy @ w.T'), `bad line: ${bad}`);
    const label = await page
      .locator('.jp-SideBar [data-id="jp-vjpviz-panel"]')
      .first()
      .getAttribute('title');
    check(label && label.includes('1 diagnosis'), `tab caption: ${label}`);
    await shot('02-diagnosis');
  });

  await test('graph: click a node shows details; fit and centre work', async () => {
    const failed = panel().locator('.vjpviz-node-failed').first();
    await panel().locator('[data-vjpviz-action="fit"]').click();
    await failed.click();
    const details = await panel().locator('.jp-Vjpviz-nodeDetails').innerText();
    check(details.includes('softclip'), `details: ${details}`);
    await panel().locator('[data-vjpviz-action="centre"]').click();
  });

  await test('click the source location -> the defining cell is active', async () => {
    await cell(CELL.load).locator('.jp-InputPrompt').first().click();
    await panel().locator('[data-vjpviz-action="jump"]').click();
    await page.waitForFunction(
      index => document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')[index]
        ?.classList.contains('jp-mod-active'),
      CELL.define,
      { timeout: 5000 }
    );
  });

  await test('edit the fix -> Verify passes', async () => {
    const editor = panel().locator('.vjpviz-fix-editor .cm-content');
    await editor.waitFor({ timeout: 10000 });
    await editor.click();
    await page.keyboard.press('Control+a');
    await page.keyboard.insertText(FIXED_BWD);
    const text = await editor.innerText();
    check(text.includes('x.T @ gy'), `editor text: ${text}`);
    await panel().locator('[data-vjpviz-action="verify"]').click();
    const result = panel().locator('[data-vjpviz-verify]');
    await result.waitFor({ timeout: 60000 });
    const verdict = await result.getAttribute('data-vjpviz-verify');
    check(verdict === 'pass', `verify: ${verdict}: ${await result.innerText()}`);
    await shot('03-verified');
  });

  await test('Apply -> cell updated -> re-run: no error, grad equals plain autodiff', async () => {
    await panel().locator('[data-vjpviz-action="apply"]').click();
    await panel().locator('[data-vjpviz-applied]').waitFor({ timeout: 60000 });
    const applied = await panel().locator('[data-vjpviz-applied]').getAttribute('data-vjpviz-applied');
    const message = await panel().locator('.jp-Vjpviz-verifyResult').innerText();
    check(applied === 'true', `apply: ${message}`);
    const source = await cell(CELL.define).locator('.jp-InputArea-editor').innerText();
    check(source.includes('return gy @ w.T, x.T @ gy') && !source.includes('(x.T @ gy).T'),
      `cell source after apply: ${source}`);
    // Notebook undo takes the edit back, redo puts it again.
    const editorOf = () => cell(CELL.define).locator('.jp-InputArea-editor');
    await editorOf().locator('.cm-content').click();
    await page.keyboard.press('Control+z');
    const undone = await editorOf().innerText();
    check(undone.includes('(x.T @ gy).T'), `undo did not restore the old rule: ${undone}`);
    await page.keyboard.press('Control+Shift+z');
    const redone = await editorOf().innerText();
    check(redone.includes('return gy @ w.T, x.T @ gy') && !redone.includes('(x.T @ gy).T'),
      `redo did not re-apply the fix: ${redone}`);
    await page.keyboard.press('Escape');
    await runCell(CELL.grad);
    check(!(await hasError(CELL.grad)), `grad cell still fails: ${await outputText(CELL.grad)}`);
    await runCell(CELL.compare);
    const out = await outputText(CELL.compare);
    check(out.includes('MATCH True'), `compare: ${out}`);
    await shot('04-applied');
  });

  await test('a function named <img src=x onerror=...> renders inert', async () => {
    await runCell(CELL.evil);
    const item = panel().locator('[data-vjpviz-function^="<img"]');
    await item.waitFor({ timeout: 15000 });
    await waitGraph(null);
    const headline = await panel().locator('.jp-Vjpviz-headline').innerText();
    check(headline.includes('<img src=x'), `headline shows the name as text: ${headline}`);
    check((await panel().locator('img').count()) === 0, 'an <img> element got into the panel');
    await page.waitForTimeout(300);
    const xss = await page.evaluate(() => window.__vjpvizXss);
    check(xss === undefined, 'the onerror handler ran');
    await shot('05-xss-inert');
  });

  let timing = null;
  await test('2k-node model: time from cell error to the panel', async () => {
    await page.evaluate(index => {
      const cellEl = document.querySelectorAll(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell'
      )[index];
      const t = (window.__vjpvizT = {});
      performance.clearMarks();
      const seen = () => {
        const now = performance.now();
        const p = document.getElementById('jp-vjpviz-panel');
        if (!t.error && cellEl.querySelector('[data-mime-type="application/vnd.jupyter.stderr"]')) {
          t.error = now;
        }
        const h = p && p.querySelector('.jp-Vjpviz-headline');
        if (!t.panel && h && h.textContent.includes('big_rule') && p.offsetParent) {
          t.panel = now;
        }
        if (!t.graph && t.panel && p.querySelector('.jp-Vjpviz-graph[data-vjpviz-graph="ready"] .vjpviz-node-failed')) {
          t.graph = now;
        }
        if (t.error && t.panel && t.graph) {
          obs.disconnect();
        }
      };
      const obs = new MutationObserver(seen);
      obs.observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
    }, CELL.big);
    await runCell(CELL.big);
    await page.waitForFunction(() => window.__vjpvizT.panel && window.__vjpvizT.graph && window.__vjpvizT.error, null, {
      timeout: 60000
    });
    const t = await page.evaluate(() => {
      const mark = name => performance.getEntriesByName(name).pop()?.startTime;
      return {
        ...window.__vjpvizT,
        received: mark('vjpviz:diagnosis-received'),
        shown: mark('vjpviz:diagnosis-shown'),
        graphRequested: mark('vjpviz:graph-requested'),
        graphReceived: mark('vjpviz:graph-received'),
        graphShown: mark('vjpviz:graph-shown'),
        nodes: document.querySelectorAll('#jp-vjpviz-panel .jp-Vjpviz-svg g.node').length
      };
    });
    timing = t;
    const ms = x => `${Math.round(x)} ms`;
    log(`TIMING 2k-node diagnosis: panel shown ${ms(t.panel - t.error)} after the cell error appeared ` +
      `(negative: before it); graph shown ${ms(t.graph - t.error)} after the error`);
    if (t.received !== undefined && t.shown !== undefined) {
      log(`TIMING kernel push received -> diagnosis drawn: ${ms(t.shown - t.received)}; ` +
        `graph request -> reply: ${ms(t.graphReceived - t.graphRequested)}; ` +
        `graph reply -> drawn: ${ms(t.graphShown - t.graphReceived)}; ${t.nodes} boxes drawn`);
      check(t.shown - t.received < 1000, 'the panel took over 1 s after the kernel answered');
      check(t.graphShown - t.graphReceived < 1000, 'drawing the graph took over 1 s after the kernel answered');
    }
    await shot('06-big-model');
  });

  await test('expand a cluster (kernel round trip) and search', async () => {
    const expandable = panel().locator('.vjpviz-expandable').first();
    if ((await expandable.count()) > 0) {
      const before = await panel().locator('.jp-Vjpviz-svg g.node').count();
      const id = await expandable.getAttribute('data-vjpviz-node');
      await expandable.dblclick();
      await page.waitForFunction(
        n => document.querySelectorAll('#jp-vjpviz-panel .jp-Vjpviz-svg g.node').length !== n,
        before,
        { timeout: 30000 }
      );
      log(`expanded ${id}: ${before} -> ${await panel().locator('.jp-Vjpviz-svg g.node').count()} boxes`);
    } else {
      log('no expandable box in this view (nothing folded)');
    }
    await panel().locator('.jp-Vjpviz-search').fill('sin');
    await panel().locator('.jp-Vjpviz-search').press('Enter');
    await page.waitForFunction(
      () => /match/.test(document.querySelector('#jp-vjpviz-panel .jp-Vjpviz-graphStatus')?.textContent ?? ''),
      null,
      { timeout: 30000 }
    );
    const status = await panel().locator('.jp-Vjpviz-graphStatus').innerText();
    check(!/^0 matches/.test(status), `search: ${status}`);
    await shot('07-search');
  });

  await test('reload the page -> the panel still works (history, graph, verify)', async () => {
    await page.reload();
    await notebook().locator('.jp-Cell').first().waitFor({ timeout: 60000 });
    const tab = page.locator('.jp-SideBar [data-id="jp-vjpviz-panel"]').first();
    await tab.waitFor({ timeout: 30000 });
    if (!(await panel().isVisible())) {
      await tab.click();
    }
    await panel().locator('[data-vjpviz-function="softclip"]').waitFor({ timeout: 30000 });
    const n = await panel().locator('.jp-Vjpviz-item').count();
    check(n >= 3, `expected the 3 diagnoses after reload, got ${n}`);
    await panel().locator('[data-vjpviz-function="softclip"]').click();
    await waitGraph(null);
    const editor = panel().locator('.vjpviz-fix-editor .cm-content');
    await editor.click();
    await page.keyboard.press('Control+a');
    await page.keyboard.insertText(FIXED_BWD);
    await panel().locator('[data-vjpviz-action="verify"]').click();
    await panel().locator('[data-vjpviz-verify]').waitFor({ timeout: 60000 });
    const verdict = await panel().locator('[data-vjpviz-verify]').getAttribute('data-vjpviz-verify');
    check(verdict === 'pass', `verify after reload: ${verdict}`);
    await shot('08-after-reload');
  });

  await test('no page errors', async () => {
    check(pageErrors.length === 0, pageErrors.join('\n'));
  });

  await context.close();
  return timing;
}

let crashed = false;
try {
  await main();
} catch (error) {
  crashed = true;
  log(`CRASH ${error && error.stack ? error.stack : error}`);
  await context?.close().catch(() => undefined);
}
const passed = results.filter(r => r.ok).length;
const failed = results.length - passed + (crashed ? 1 : 0);
const summary = `${passed} passed, ${failed} failed`;
if (process.env.VJPVIZ_SUMMARY) {
  writeFileSync(process.env.VJPVIZ_SUMMARY, summary);
}
console.log(summary);
process.exit(failed ? 1 : 0);
