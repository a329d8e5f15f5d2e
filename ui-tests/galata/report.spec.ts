// What a user sees of vv.grads and vv.watch (issue 41): cells named as IPython names
// them, with a click going to the cell and line; the panel showing itself for a report
// and for a watch's first event; a watch's events one line per block and event; a
// compact legend inline; leaf paths readable at the panel's width; a rule's logs
// (defvjp_with_logs) listed beside its diagnosis as JAX returned them. Its first two
// screenshots are the README's pictures of the gradient report and the watch plot.
// Not in the core suite (VJPVIZ_SUITE=core skips @extra): its notebook needs flax and
// optax, and JAX 0.12's gradient logs, which the wheel's oldest-JAX venv has not.
import { expect, test, Vjpviz } from './vjpviz';

const extra = { tag: '@extra' };

const CELLS = { load: 0, frozen: 1, watched: 2, rule: 3, logs: 4 };

/** The hidden panel shows itself for `what`. */
async function panelShownFor(vv: Vjpviz, what: string): Promise<void> {
  await expect(vv.panel, `the panel shows itself for ${what}`).toBeVisible({
    timeout: 30000
  });
}

test(
  'vv.grads and vv.watch: cells named, the panel shown, events per block',
  extra,
  async ({ vv, page }) => {
    await vv.open('report.ipynb');
    await vv.hidePanel();
    await vv.runCells(CELLS.load, CELLS.frozen);

    // The report the user just asked for shows the panel, as a diagnosis does.
    await panelShownFor(vv, 'a vv.grads report');
    const grads = vv.panel.locator('.jp-Vjpviz-grads');
    await expect(grads.locator('.jp-Vjpviz-gradsHeadline')).toContainText(
      '4 leaves with no gradient',
      { timeout: 30000 }
    );
    const zero = grads.locator('.jp-Vjpviz-gradsZero tbody tr');
    await expect(zero).toHaveCount(4);
    // The line that cut the frozen body, named as IPython's traceback names it.
    const place = zero.first().locator('button.jp-Vjpviz-place');
    await expect(place).toHaveText('Cell In[2], line 7');
    await expect(grads).not.toContainText('ipykernel');

    // A leaf path stays readable at the panel's width: broken (if at all) between keys,
    // never one bracket a line.
    const path = zero.nth(1).locator('.jp-Vjpviz-leafPath');
    await expect(path).toHaveText("['params']['body']['kernel']");
    const pieces = await path.evaluate(
      span =>
        // One text fragment per line box: where the browser broke the path.
        Array.from(span.getClientRects(), r => Math.round(r.top)).filter(
          (top, i, tops) => tops.indexOf(top) === i
        ).length
    );
    vv.log(`['params']['body']['kernel'] takes ${pieces} line(s) in the panel`);
    expect(
      pieces,
      "['params']['body']['kernel'] in the panel: its lines"
    ).toBeLessThanOrEqual(2);
    await vv.shot('16-grads-panel', grads);

    // A click on the place goes to that cell, its cursor on that line.
    await place.click();
    const at = await page.evaluate(() => {
      const content = (window as any).jupyterapp.shell.currentWidget.content;
      return {
        cell: content.activeCellIndex,
        line: content.activeCell.editor.getCursorPosition().line
      };
    });
    expect(at).toEqual({ cell: CELLS.frozen, line: 6 });

    // The inline report: the cell named, the legend compact (unframed, no arrowheads
    // pointing at nothing).
    const inline = vv
      .cell(CELLS.frozen)
      .locator('.jp-OutputArea-output')
      .last();
    await expect(inline).toContainText('Cell In[2], line 7');
    await expect(inline).not.toContainText('ipykernel');
    const legend = await inline.evaluate(out => {
      const frame = out.querySelector(
        'g#vjpviz-legend > polygon, g#vjpviz-legend > path'
      );
      const arrows = Array.from(out.querySelectorAll('g.edge'))
        .filter(e =>
          /^legend_/.test(e.querySelector('title')?.textContent ?? '')
        )
        .filter(e => e.querySelector('polygon')).length;
      return {
        framed: !!frame,
        arrows,
        samples: out.querySelectorAll('g.node title').length
      };
    });
    expect(legend.framed, 'the legend has no frame').toBe(false);
    expect(legend.arrows, 'legend edges with an arrowhead').toBe(0);
    await vv.shot('16-grads-report', inline);

    // A watched loop: its first event shows the panel again; one line per block and event.
    await vv.hidePanel();
    await vv.runCell(CELLS.watched);
    await panelShownFor(vv, "a watch's first event");
    const events = vv.panel.locator('.jp-Vjpviz-watchEvent');
    await expect(events).toHaveCount(3, { timeout: 30000 });
    const texts = await events.evaluateAll(els =>
      els.map(el => el.firstChild!.textContent!.trim())
    );
    expect(texts).toEqual([
      "step 0: ['params']['body'] (2 leaves): no gradient, for 3+ steps",
      "step 0: ['params']['head'] (2 leaves): no gradient, for 3+ steps",
      "step 10: ['params']['out'] (2 leaves): non-finite"
    ]);
    const printed = await vv.outputText(CELLS.watched);
    expect(printed).toContain(
      "step 0: ['params']['body'] (2 leaves): no gradient, for 3+ steps"
    );
    expect(printed.split('\n')).toHaveLength(4);
    await vv.shot(
      '17-watch',
      vv.panel.locator('.jp-Vjpviz-watchSeries').first()
    );

    // A diagnosis names its rule's cell so too, and goes there.
    await vv.runCell(CELLS.rule);
    const location = vv.panel.locator('.jp-Vjpviz-location');
    await expect(location).toHaveText(/^rule_41_bwd — Cell In\[4\], line 11$/, {
      timeout: 30000
    });
    await expect(vv.panel.locator('.jp-Vjpviz-headline')).not.toContainText(
      'ipykernel'
    );
    await location.click();
    expect(
      await page.evaluate(
        () =>
          (window as any).jupyterapp.shell.currentWidget.content.activeCellIndex
      )
    ).toBe(CELLS.rule);
  }
);

test(
  'a rule with logs: its diagnosis lists them as JAX returned them',
  extra,
  async ({ vv }) => {
    await vv.open('report.ipynb');
    await vv.runCells(CELLS.load, CELLS.logs);
    expect(await vv.hasError(CELLS.logs), 'the logging cell raised').toBe(
      false
    );

    // What JAX returned, as the cell printed it: "LOG name = values".
    const printed = (await vv.outputText(CELLS.logs))
      .split('\n')
      .map(line => /^LOG (.+?) = (.+)$/.exec(line.trim()))
      .filter((m): m is RegExpExecArray => m !== null)
      .map(m => [m[1], m[2]]);
    // The constructed values: |g| summed over 3 ones, and cos(0), cos(1), cos(2).
    expect(printed).toEqual([
      ['gnorm', '3'],
      ["stats['cos']", '1, 0.5403, -0.4161']
    ]);

    // The bfloat16 cotangent JAX let through: a diagnosis, its logs beside it.
    await vv.showPanel();
    await vv.item('logged_sin').click({ timeout: 30000 });
    await expect(vv.panel.locator('.jp-Vjpviz-location')).toHaveText(
      /^logged_sin_bwd — Cell In\[\d+\], line \d+$/,
      { timeout: 30000 }
    );
    await expect(
      vv.panel.locator('h4.jp-Vjpviz-section', {
        hasText: 'Logs the rule wrote'
      })
    ).toBeVisible();
    const table = vv.panel.locator('table.jp-Vjpviz-logs');
    const rows = table.locator('tbody tr');
    await expect(rows).toHaveCount(printed.length);
    const shown = await rows.evaluateAll(trs =>
      trs.map(tr => Array.from(tr.querySelectorAll('td'), td => td.textContent))
    );
    vv.log(`logs table: ${JSON.stringify(shown)}`);
    // log, type, stacked, values: names and values as printed, types as JAX made them.
    expect(shown.map(([name, , , values]) => [name, values])).toEqual(printed);
    expect(shown.map(([, type, stacked]) => [type, stacked])).toEqual([
      ['float32[]', ''],
      ['float32[3]', '']
    ]);
    await vv.shot('18-rule-logs', vv.panel);
  }
);
