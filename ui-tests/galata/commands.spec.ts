// The plugin's commands: in the palette, with shortcuts that move through the list
// and verify from the fix editor.
import { CELL, EVIL, expect, FIXED_BWD, test } from './vjpviz';

const COMMANDS = [
  'vjpviz:open-panel',
  'vjpviz:open-graph',
  'vjpviz:verify',
  'vjpviz:apply',
  'vjpviz:next-diagnosis',
  'vjpviz:previous-diagnosis'
];

test('commands: in the palette, with shortcuts', async ({ vv, page }) => {
  await vv.softclip();
  await vv.runCell(CELL.evil);
  await expect(vv.item(EVIL)).toBeAttached({ timeout: 30000 });
  const listed = await page.evaluate(ids => {
    const { commands } = (window as any).jupyterapp;
    return ids.map(id => ({
      id,
      has: commands.hasCommand(id) as boolean,
      keys: commands.keyBindings
        .filter((k: any) => k.command === id)
        .map((k: any) => k.keys.join(' ')) as string[]
    }));
  }, COMMANDS);
  vv.log(`commands: ${JSON.stringify(listed)}`);
  expect(
    listed.filter(c => !c.has || !c.keys.length),
    'commands without a shortcut'
  ).toEqual([]);
  await page.keyboard.press('Control+Shift+c');
  await page.locator('.lm-CommandPalette-input').first().fill('Diagnosis');
  const items = page.locator('.lm-CommandPalette-item', {
    hasText: 'Diagnosis'
  });
  await expect(items.filter({ hasText: 'Next Diagnosis' })).toHaveCount(1);
  await expect(items.filter({ hasText: 'Previous Diagnosis' })).toHaveCount(1);
  await page.keyboard.press('Escape');
  // Alt+. shows the next diagnosis down the list, Alt+, the one before.
  const ids = await vv.panel
    .locator('.jp-Vjpviz-item')
    .evaluateAll(l => l.map(li => (li as HTMLElement).dataset.vjpvizId));
  expect(ids.length, 'two diagnoses listed').toBe(2);
  const selected = vv.panel.locator('.jp-Vjpviz-item.jp-mod-selected');
  const before = await selected.getAttribute('data-vjpviz-id');
  await vv.cell(CELL.load).locator('.jp-InputPrompt').first().click();
  await page.keyboard.press('Alt+.');
  await expect(selected).toHaveAttribute(
    'data-vjpviz-id',
    ids[(ids.indexOf(before!) + 1) % ids.length]!
  );
  await page.keyboard.press('Alt+,');
  await expect(selected).toHaveAttribute('data-vjpviz-id', before!);
  // Alt+Enter in the fix editor verifies (the editor keeps Ctrl+Enter).
  await vv.item('softclip').click();
  await vv.waitGraph();
  await vv.typeFix(FIXED_BWD);
  await page.keyboard.press('Alt+Enter');
  expect(await vv.verdict(), 'Alt+Enter in the fix editor').toMatch(/^pass/);
});
