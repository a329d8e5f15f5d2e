// The panel follows kernels and settings: one list per kernel, emptied by a restart;
// autoOpen; Copy. Not in the core suite (VJPVIZ_SUITE=core skips @extra).
import { expect, test } from './vjpviz';

const extra = { tag: '@extra' };

test(
  'several notebooks: each kernel has its own list; the panel follows the active one',
  extra,
  async ({ vv }) => {
    await vv.open('nb_a.ipynb');
    await vv.runCells(0, 1);
    expect(await vv.hasError(1), 'nb_a: the grad fails').toBe(true);
    await expect(vv.panel).toBeVisible({ timeout: 15000 });
    await vv.waitFunctions(['rule_a']);
    await vv.open('nb_b.ipynb');
    await vv.waitFunctions([]); // nb_b's kernel has no diagnosis yet
    await vv.runCells(0, 1);
    await vv.waitFunctions(['rule_b']);
    const [a, b] = [
      await vv.kernelOf('nb_a.ipynb'),
      await vv.kernelOf('nb_b.ipynb')
    ];
    expect(a && b && a !== b, `two kernels, got ${a} and ${b}`).toBe(true);
    await vv.activate('nb_a.ipynb');
    await vv.waitFunctions(['rule_a']);
    await expect(vv.panel.locator('.jp-Vjpviz-headline')).toContainText(
      'rule_a'
    );
    await expect(vv.sidebarTab).toHaveAttribute('title', /1 diagnosis/);
    await vv.activate('nb_b.ipynb');
    await vv.waitFunctions(['rule_b']);
    await vv.shot('09-two-notebooks');
  }
);

test.describe('with kernels not proxied', () => {
  // Through Galata's kernels proxy the page never saw the restarted kernel idle (its
  // status stayed "starting"); without it, it does. The test's sessions still end it.
  test.use({ kernels: null });

  test(
    'kernel restart empties the list; %load_ext + a failing cell shows the new diagnosis',
    extra,
    async ({ vv, page }) => {
      await vv.open('restart.ipynb');
      await vv.runCells(0, 1);
      await expect(vv.panel).toBeVisible({ timeout: 15000 });
      await vv.waitFunctions(['rule_r']);
      await vv.waitGraph();
      const kernelBefore = await vv.kernelOf('restart.ipynb');
      // Restart from the notebook toolbar and confirm the dialog.
      await vv.notebook
        .locator('.jp-Toolbar [data-command="notebook:restart-kernel"]')
        .first()
        .click();
      await page.locator('.jp-Dialog .jp-mod-accept').click();
      await vv.waitFunctions([]);
      await expect(vv.panel.locator('.jp-Vjpviz-empty')).toContainText(
        '%load_ext vjpviz'
      );
      await expect(vv.sidebarTab).toHaveAttribute('title', 'VJP debugger');
      await vv.waitNotebook('restart.ipynb');
      expect(
        await vv.kernelOf('restart.ipynb'),
        'a restart keeps the kernel id'
      ).toBe(kernelBefore);
      await vv.runCells(0, 1);
      await vv.waitFunctions(['rule_r']);
      await expect(vv.panel.locator('.jp-Vjpviz-headline')).toContainText(
        'rule_r'
      );
      await vv.waitGraph();
      // The new kernel process answers requests: Verify the suggested fix.
      await vv.panel.locator('[data-vjpviz-action="verify"]').click();
      expect(await vv.verdict(), 'verify after restart').toMatch(/^pass/);
      await vv.shot('10-after-restart');
    }
  );
});

test(
  'autoOpen off: a new diagnosis does not open the panel (on again: it does)',
  extra,
  async ({ vv }) => {
    await vv.open('autooff.ipynb');
    await vv.setSetting('autoOpen', false);
    await vv.hidePanel();
    await vv.runCells(0, 1);
    expect(await vv.hasError(1), 'autooff: the grad fails').toBe(true);
    // The tab's caption counts the diagnosis in the same call that would open the panel.
    await expect(vv.sidebarTab).toHaveAttribute('title', /1 diagnosis/, {
      timeout: 30000
    });
    await expect(vv.panel, 'autoOpen is off').toBeHidden();
    await vv.shot('11-autoopen-off');
    // Control: with the setting back on, the next diagnosis opens it.
    await vv.setSetting('autoOpen', true);
    await vv.runCell(1);
    await expect(vv.panel).toBeVisible({ timeout: 15000 });
    const shown = await vv.shownFunctions();
    expect(
      shown.length >= 1 && shown.every(f => f === 'rule_q'),
      `listed: ${JSON.stringify(shown)}`
    ).toBe(true);
  }
);

test.describe('with the clipboard', () => {
  test.use({ permissions: ['clipboard-read', 'clipboard-write'] });

  test('Copy puts the fix in the clipboard', extra, async ({ vv, page }) => {
    await vv.open('copy.ipynb');
    await vv.runCells(0, 1);
    await expect(vv.panel).toBeVisible({ timeout: 15000 });
    await vv.waitFunctions(['rule_c']);
    await vv.panel.locator('.vjpviz-fix-editor .cm-content').waitFor();
    await page.evaluate(() =>
      navigator.clipboard.writeText('nothing copied yet')
    );
    await vv.panel.locator('[data-vjpviz-action="copy"]').click();
    await expect(vv.panel.locator('[data-vjpviz-copied="true"]')).toBeAttached({
      timeout: 20000
    });
    const [clip, code] = await page.evaluate(async () => {
      const content = document.querySelector(
        '#jp-vjpviz-panel .vjpviz-fix-editor .cm-content'
      ) as any;
      const view = content.cmView?.view ?? content.cmView?.rootView?.view;
      const text = view
        ? view.state.doc.toString()
        : Array.from(
            content.querySelectorAll('.cm-line') as NodeListOf<Element>
          )
            .map(l => l.textContent)
            .join('\n');
      return [await navigator.clipboard.readText(), text];
    });
    expect(clip).toContain('def rule_c_bwd(res, g):');
    expect(clip).toContain('x.T @ gy');
    expect(clip, 'the clipboard holds what the editor shows').toBe(code);
  });
});
