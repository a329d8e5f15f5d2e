// What both browser suites share: Debian chromium, a tiny test runner that
// never stops at the first failure, screenshots, and the closing line CI reads:
// "N passed, M failed", printed, or written to $VJPVIZ_SUMMARY for run.sh to print once.
import { chromium } from 'playwright-core';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const FILTER = process.env.VJPVIZ_TESTS ? new RegExp(process.env.VJPVIZ_TESTS) : null;

export function harness(prefix = '') {
  const t0 = Date.now();
  const results = [];
  const h = {
    page: null,
    context: null,
    log: msg => console.log(`[${prefix}${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`),

    /** Launch Debian's chromium headless, as root, without the network chatter. */
    async launch(viewport) {
      h.context = await chromium.launchPersistentContext(process.env.VJPVIZ_PROFILE, {
        executablePath: process.env.VJPVIZ_CHROMIUM || '/usr/bin/chromium',
        headless: true,
        viewport,
        args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
          '--disable-background-networking', '--disable-component-update', '--disable-sync']
      });
      h.page = h.context.pages()[0] ?? (await h.context.newPage());
      return h.page;
    },

    /** One test; a failure is recorded with a screenshot and the next test runs. */
    async test(name, body, { skip = false } = {}) {
      if (skip || (FILTER && !FILTER.test(name))) {
        return;
      }
      const start = Date.now();
      try {
        await body();
        results.push({ name, ok: true });
        h.log(`PASS ${name} (${((Date.now() - start) / 1000).toFixed(1)}s)`);
      } catch (error) {
        results.push({ name, ok: false, error });
        h.log(`FAIL ${name}: ${error && error.stack ? error.stack : error}`);
        await h.shot(`FAILED-${name.replace(/\W+/g, '-')}`).catch(() => undefined);
      }
    },

    check(condition, message) {
      if (!condition) {
        throw new Error(message);
      }
    },

    async shot(name) {
      const path = join(process.env.VJPVIZ_SCREENSHOTS, `${name}.png`);
      await h.page.screenshot({ path });
      h.log(`screenshot ${path}`);
    },

    /** Run the suite, print the closing line and exit with its status. */
    async run(main, label = '') {
      let crashed = false;
      try {
        await main();
      } catch (error) {
        crashed = true;
        h.log(`CRASH ${error && error.stack ? error.stack : error}`);
        await h.context?.close().catch(() => undefined);
      }
      const passed = results.filter(r => r.ok).length;
      const failed = results.length - passed + (crashed ? 1 : 0);
      const summary = `${passed} passed, ${failed} failed`;
      if (process.env.VJPVIZ_SUMMARY) {
        // run.sh prints the closing line, once, with every suite it ran added up.
        writeFileSync(process.env.VJPVIZ_SUMMARY, summary);
        h.log(`${label}${summary} in this suite`);
      } else {
        console.log(label + summary);
      }
      process.exit(failed ? 1 : 0);
    }
  };
  return h;
}
