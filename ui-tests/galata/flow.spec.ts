// vv.watch(step, flow=True) in the panel (issue 49): a watched plain-JAX stack whose
// third layer's backward goes NaN at step 5. The chain runs from the loss to the input;
// at step 5 (the slider) the first two blocks' cotangents are marked non-finite and the
// last two are not, as the cell's print says, and the events are listed per block under
// the norm plot; its screenshot is the README's picture.
import { expect, test } from './vjpviz';

test('vv.watch(step, flow=True): the backward flow from the loss to the input', async ({
  vv
}) => {
  await vv.open('flow.ipynb');
  await vv.runCells(0, 1);
  const printed = await vv.outputText(1);
  expect(printed).toContain(
    "backward flow: step 5: the cotangent first went non-finite at ['layers'][1]'s " +
      "output: made in ['layers'][2]"
  );
  await vv.showPanel();
  const flow = vv.panel.locator('.jp-Vjpviz-watchFlow').first();
  const links = flow.locator('.jp-Vjpviz-flowLink');
  await expect(links).toHaveCount(5, { timeout: 30000 });
  const slider = flow.locator('input.jp-Vjpviz-flowStep');
  // The watch's last pushes may still be arriving (the slider's range grows with them):
  // set step 5 until it holds.
  await expect(async () => {
    await slider.fill('5');
    await expect(flow.locator('.jp-Vjpviz-flowStepLabel')).toHaveText(
      ' step 5',
      {
        timeout: 1000
      }
    );
  }).toPass({ timeout: 30000 });
  const shown = await links.evaluateAll(lis =>
    lis.map(li => [
      li.querySelector('.jp-Vjpviz-flowBlock')?.textContent ?? li.textContent,
      li.classList.contains('jp-mod-nonfinite')
    ])
  );
  expect(shown).toEqual([
    ['loss', false],
    ["['layers'][3]", false],
    ["['layers'][2]", false],
    ["['layers'][1]", true],
    ["['layers'][0]", true]
  ]);
  // Under the norm plot, the events per block (kind and step): the first three layers'
  // gradients and the first two blocks' output cotangents non-finite at step 5; from step
  // 6 on the parameters are NaN (step 5's update), so every other block's too.
  const series = vv.panel.locator('.jp-Vjpviz-watchSeries').first();
  const perBlock = await series
    .locator('.jp-Vjpviz-watchBlockEvents')
    .evaluateAll(parts =>
      parts.map(part => [
        part.querySelector('.jp-Vjpviz-watchBlockName')?.textContent,
        Array.from(part.querySelectorAll('li'), li => [
          li.className.replace('jp-Vjpviz-watchEvent jp-mod-', ''),
          li.firstChild?.textContent?.match(/^step (\d+)/)?.[1]
        ])
      ])
    );
  const both = (gradient: string, cotangent: string) => [
    ['first_nonfinite', gradient],
    ['cotangent_nonfinite', cotangent]
  ];
  expect(perBlock).toEqual([
    ["['layers'][0]", both('5', '5')],
    ["['layers'][1]", both('5', '5')],
    ["['layers'][2]", both('5', '6')],
    ["['layers'][3]", both('6', '6')]
  ]);
  await expect(
    series.locator('.jp-Vjpviz-watchEvent.jp-mod-cotangent_nonfinite').first()
  ).toHaveText("step 5: ['layers'][0]'s output cotangent went non-finite");
  await slider.fill('4'); // the step before: every block finite
  await expect(
    flow.locator('.jp-Vjpviz-flowLink.jp-mod-nonfinite')
  ).toHaveCount(0);
  await vv.shot(
    '19-watch-flow',
    vv.panel.locator('.jp-Vjpviz-watchSeries').first()
  );
});
