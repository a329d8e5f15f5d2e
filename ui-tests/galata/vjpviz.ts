// What the panel's Galata tests share: Galata's `test` with two more fixtures, and
// `Vjpviz`, a page object for the panel (as Galata's own helpers are for JupyterLab).
//   vv          the page object, bound to the test's page and directory
//   pageErrors  (automatic) fails the test on any page error or unexpected dialog
// Each test gets its own page, directory and kernels from Galata: none needs another.
import {
  expect,
  IJupyterLabPageFixture,
  test as base
} from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import * as path from 'path';

/** Cells of ui-tests/make_notebook.py's panel.ipynb (and apply.ipynb's first three). */
export const CELL = {
  load: 0,
  define: 1,
  grad: 2,
  compare: 3,
  evil: 4,
  big: 5
};

/** The name of make_notebook.py's function with HTML in it. */
export const EVIL = '<img src=x onerror="window.__vjpvizXss=1">';

/** The right softclip rule: what the tests type into the fix editor. */
export const FIXED_BWD = `def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, x.T @ gy
`;

/**
 * After Fit the graph's own boxes fill the viewport, the legend left out: the
 * failing node is drawn at a readable size and every graph node is in view.
 * The failing node of the softclip graph is two lines of 10 pt text in a 0.3 in
 * box. In a 356x322 px sidebar viewport, fitting the whole SVG (legend beside the
 * graph) drew it 21 px tall, its text about 5 px: unreadable; fitting the graph
 * alone draws it 40 px tall, text about 10 px. 30 px (text about 7-8 px, the
 * smallest still legible) lies between the two; the run logs both numbers.
 */
export const MIN_FAILED_PX = 30;

const SHOTS = process.env.VJPVIZ_SCREENSHOTS;
const NOTEBOOKS = process.env.VJPVIZ_NOTEBOOKS!;
const GRAPH_READY = '.jp-Vjpviz-graph[data-vjpviz-graph="ready"]';

export class Vjpviz {
  constructor(
    readonly page: IJupyterLabPageFixture,
    readonly dir: string
  ) {}

  get panel(): Locator {
    return this.page.locator('#jp-vjpviz-panel');
  }

  /** The main-area graph view ("Open in main area"). */
  get mainGraph(): Locator {
    return this.page
      .locator('.jp-Vjpviz-graphMain:not(.lm-mod-hidden)')
      .first();
  }

  get sidebarTab(): Locator {
    return this.page.locator('.jp-SideBar [data-id="jp-vjpviz-panel"]').first();
  }

  get notebook(): Locator {
    return this.page.locator('.jp-NotebookPanel:not(.lm-mod-hidden)');
  }

  cell(i: number): Locator {
    return this.notebook.locator('.jp-Notebook .jp-Cell').nth(i);
  }

  /** A panel list item by its function name. */
  item(fn: string): Locator {
    return this.panel
      .locator(`[data-vjpviz-function="${fn.replace(/"/g, '\\"')}"]`)
      .first();
  }

  log(message: string): void {
    console.log(`[${test.info().title}] ${message}`);
  }

  async shot(
    name: string,
    target: { screenshot(o: { path: string }): Promise<unknown> } = this.page
  ) {
    await target.screenshot({
      path: SHOTS
        ? path.join(SHOTS, `${name}.png`)
        : test.info().outputPath(`${name}.png`)
    });
  }

  /** Upload make_notebook.py's `name` into the test's directory, open it, wait for its kernel. */
  async open(name: string): Promise<void> {
    await this.page.contents.uploadFile(
      path.join(NOTEBOOKS, name),
      `${this.dir}/${name}`
    );
    await this.page.notebook.openByPath(`${this.dir}/${name}`);
    await this.waitNotebook(name);
  }

  /** `name` is the visible notebook and its kernel idle. */
  async waitNotebook(name: string): Promise<void> {
    await this.page.waitForFunction(
      n => {
        const w = (window as any).jupyterapp.shell.currentWidget;
        return (
          w?.context?.path?.endsWith(`/${n}`) &&
          w.sessionContext?.session?.kernel?.status === 'idle'
        );
      },
      name,
      { timeout: 60000 }
    );
    await this.cell(0).waitFor({ timeout: 60000 });
  }

  /** Bring an open notebook's tab forward. */
  async activate(name: string): Promise<void> {
    await this.page.activity.activateTab(name);
    await this.waitNotebook(name);
  }

  /**
   * Run cell i of the visible notebook as the toolbar's Run button does, and wait
   * until it has an execution count and the kernel is idle. (Not a key press: a
   * key can reach the page before the cell has the focus, and the cell never runs.)
   */
  async runCell(i: number): Promise<void> {
    await this.page.evaluate(async index => {
      const { galata, jupyterapp } = window as any;
      galata.resetExecutionCount(index);
      jupyterapp.shell.currentWidget.content.activeCellIndex = index;
      await jupyterapp.commands.execute('notebook:run-cell');
    }, i);
    await this.page.waitForFunction(
      index => {
        const w = (window as any).jupyterapp.shell.currentWidget;
        return (
          (window as any).galata.haveBeenExecuted(index) &&
          w.sessionContext.session?.kernel?.status === 'idle'
        );
      },
      i,
      { timeout: 120000 }
    );
  }

  async runCells(...cells: number[]): Promise<void> {
    for (const i of cells) {
      await this.runCell(i);
    }
  }

  async hasError(i: number): Promise<boolean> {
    return (
      (await this.cell(i)
        .locator('[data-mime-type="application/vnd.jupyter.stderr"]')
        .count()) > 0
    );
  }

  async outputText(i: number): Promise<string> {
    return (
      await this.cell(i).locator('.jp-OutputArea').first().innerText()
    ).trim();
  }

  async showPanel(): Promise<void> {
    if (!(await this.panel.isVisible())) {
      await this.sidebarTab.click();
    }
    await expect(this.panel).toBeVisible();
  }

  async hidePanel(): Promise<void> {
    if (await this.panel.isVisible()) {
      await this.sidebarTab.click();
    }
    await expect(this.panel).toBeHidden();
  }

  /** Open `notebook`, run `cells`, and show the diagnosis of `fn` with its graph. */
  async diagnosed(
    notebook: string,
    cells: number[],
    fn: string
  ): Promise<void> {
    await this.open(notebook);
    await this.runCells(...cells);
    await this.showPanel();
    await this.item(fn).click({ timeout: 30000 });
    await this.waitGraph();
  }

  softclip(): Promise<void> {
    return this.diagnosed(
      'panel.ipynb',
      [CELL.load, CELL.define, CELL.grad],
      'softclip'
    );
  }

  /** The unscoped 2,100-equation model (a plain Python loop of tanh layers). */
  bigModel(): Promise<void> {
    return this.diagnosed(
      'panel.ipynb',
      [CELL.load, CELL.define, CELL.big],
      'big_rule'
    );
  }

  /** The panel's graph is drawn with a failing node (`failedId`'s, if given). */
  async waitGraph(failedId?: string): Promise<void> {
    const node = failedId
      ? `[data-vjpviz-node="${failedId}"].vjpviz-node-failed`
      : '.vjpviz-node-failed';
    try {
      await this.panel
        .locator(`${GRAPH_READY} ${node}`)
        .first()
        .waitFor({ state: 'attached', timeout: 30000 });
    } catch (error) {
      const state = await this.page.evaluate(() => {
        const g = document.querySelector<HTMLElement>(
          '#jp-vjpviz-panel .jp-Vjpviz-graph'
        );
        return (
          g && {
            state: g.dataset.vjpvizGraph,
            status: g.querySelector('.jp-Vjpviz-graphStatus')?.textContent,
            nodes: Array.from(g.querySelectorAll('g.node')).map(
              n => `${n.id}: ${n.getAttribute('class')}`
            )
          }
        );
      });
      throw new Error(
        `no failing node in the graph: ${JSON.stringify(state)}\n${error}`
      );
    }
  }

  /** The functions of the diagnoses the panel lists, top to bottom. */
  shownFunctions(): Promise<(string | null)[]> {
    return this.panel
      .locator('.jp-Vjpviz-item:visible')
      .evaluateAll(items =>
        items.map(li => li.getAttribute('data-vjpviz-function'))
      );
  }

  /** Wait until the panel lists exactly these functions. */
  async waitFunctions(expected: string[]): Promise<void> {
    await expect
      .poll(() => this.shownFunctions(), { timeout: 30000 })
      .toEqual(expected);
  }

  /** The softclip diagnosis is the one shown: diff row, headline, bad line. */
  async expectSoftclipShown(): Promise<void> {
    await expect(
      this.panel.locator(
        '[data-vjpviz-path="w"][data-vjpviz-expected="float32[5,3]"][data-vjpviz-got="float32[3,5]"]'
      )
    ).toBeVisible();
    await expect(this.panel.locator('.jp-Vjpviz-headline')).toContainText(
      'softclip'
    );
    await expect(
      this.panel.locator('.jp-Vjpviz-line.jp-mod-bad')
    ).toContainText('return gy @ w.T');
  }

  /** Two animation frames: panzoom draws a new transform on the next one. */
  frames(): Promise<void> {
    return this.page.evaluate(
      () =>
        new Promise<void>(r =>
          requestAnimationFrame(() => requestAnimationFrame(() => r()))
        )
    );
  }

  /** After Fit: the failing node readable and every graph node in view (logs both sizes). */
  async expectFitted(label: string): Promise<void> {
    await this.frames();
    const m = await this.panel.evaluate(p => {
      const rect = (sel: string) =>
        p.querySelector(sel)!.getBoundingClientRect();
      const vp = rect('.jp-Vjpviz-viewport');
      const f = rect('.vjpviz-node-failed');
      const nodes = Array.from(
        p.querySelectorAll('.jp-Vjpviz-svg .node:not(.vjpviz-legend)')
      ).map(n => n.getBoundingClientRect());
      const out = nodes.filter(
        r =>
          r.left < vp.left - 1 ||
          r.right > vp.right + 1 ||
          r.top < vp.top - 1 ||
          r.bottom > vp.bottom + 1
      ).length;
      // What fitting the whole SVG (legend included) would draw, for comparison.
      const svg = p.querySelector('.jp-Vjpviz-svg')!;
      const [w, h] = ['width', 'height'].map(a =>
        parseFloat(svg.getAttribute(a)!)
      );
      const scale = svg.getBoundingClientRect().width / w;
      const whole = Math.min(vp.width / w, vp.height / h, 1.5);
      return {
        failedH: f.height,
        failedW: f.width,
        viewport: [vp.width, vp.height],
        nodes: nodes.length,
        out,
        legend: !!p.querySelector('.jp-Vjpviz-svg .vjpviz-legend'),
        wholeH: (f.height / scale) * whole
      };
    });
    this.log(
      `${label}: failing node ${m.failedW.toFixed(0)}x${m.failedH.toFixed(0)} px in a ` +
        `${m.viewport.map(v => v.toFixed(0)).join('x')} viewport (fitting the whole SVG: ` +
        `${m.wholeH.toFixed(0)} px); ${m.nodes} nodes, ${m.out} out of view`
    );
    expect(m.legend, 'a legend marked in the graph').toBe(true);
    expect(
      m.failedH,
      `${label}: the failing node's height (px)`
    ).toBeGreaterThanOrEqual(MIN_FAILED_PX);
    expect(m.out, `${label}: graph nodes out of view`).toBe(0);
  }

  /** How far (px) the failing node's centre is from its viewport's centre, in `scope`. */
  async failedOffCentre(scope: Locator): Promise<number> {
    await this.frames();
    return scope.evaluate(el => {
      const vp = el
        .querySelector('.jp-Vjpviz-viewport')!
        .getBoundingClientRect();
      const f = el
        .querySelector('.vjpviz-node-failed')!
        .getBoundingClientRect();
      return Math.hypot(
        f.left + f.width / 2 - (vp.left + vp.width / 2),
        f.top + f.height / 2 - (vp.top + vp.height / 2)
      );
    });
  }

  /** Search the graph in `scope` (the panel or the main-area view); some box matches. */
  async search(scope: Locator, query: string): Promise<void> {
    await scope.locator('.jp-Vjpviz-search').fill(query);
    await scope.locator('.jp-Vjpviz-search').press('Enter');
    const status = scope.locator('.jp-Vjpviz-graphStatus', {
      hasText: /match/
    });
    await expect(status).not.toHaveText(/^0 matches/, { timeout: 30000 });
    await expect(scope.locator('.vjpviz-node-match').first()).toBeAttached();
  }

  /** Put `code` into the fix editor. */
  async typeFix(code: string): Promise<void> {
    const editor = this.panel.locator('.vjpviz-fix-editor .cm-content');
    await editor.click();
    await this.page.keyboard.press('Control+a');
    await this.page.keyboard.insertText(code);
    await expect(editor).toContainText(code.trim().split('\n').pop()!.trim());
  }

  /** Verify's answer, 'pass' or 'fail', with the panel's text for the message. */
  async verdict(): Promise<string> {
    const result = this.panel.locator('[data-vjpviz-verify]');
    await result.waitFor({ timeout: 60000 });
    const verdict = await result.getAttribute('data-vjpviz-verify');
    return `${verdict}: ${await this.panel.locator('.jp-Vjpviz-verifyResult').innerText()}`;
  }

  /** The kernel id of the open notebook `name`. */
  kernelOf(name: string): Promise<string | undefined> {
    return this.page.evaluate(n => {
      const { shell } = (window as any).jupyterapp;
      const w = Array.from(shell.widgets('main') as Iterable<any>).find(x =>
        x.context?.path?.endsWith(`/${n}`)
      );
      return w?.sessionContext?.session?.kernel?.id;
    }, name);
  }

  /**
   * Set a setting of the panel as the settings editor does: through the app's
   * setting registry (Galata keeps the test's settings in memory).
   */
  async setSetting(key: string, value: boolean): Promise<void> {
    const composite = await this.page.evaluate(
      async ([k, v]) => {
        const registry = await (window as any).galata.getPlugin(
          '@jupyterlab/apputils-extension:settings'
        );
        await registry.set('jupyter-vjpviz:plugin', k, v);
        return (await registry.get('jupyter-vjpviz:plugin', k)).composite;
      },
      [key, value] as const
    );
    expect(composite, `setting ${key}`).toBe(value);
  }
}

export const test = base.extend<{ vv: Vjpviz; pageErrors: string[] }>({
  vv: async ({ page, tmpPath }, use) => {
    await use(new Vjpviz(page, tmpPath));
  },
  pageErrors: [
    async ({ page }, use) => {
      const errors: string[] = [];
      page.on('pageerror', e => errors.push(e.stack || String(e)));
      page.on('dialog', d => {
        if (d.type() === 'beforeunload') {
          void d.accept(); // "leave with unsaved changes?" on reload
          return;
        }
        errors.push(`unexpected ${d.type()} dialog: ${d.message()}`);
        void d.dismiss();
      });
      await use(errors);
      expect(errors, 'page errors').toEqual([]);
    },
    { auto: true }
  ]
});

export { expect };
