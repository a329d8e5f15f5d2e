// Galata (JupyterLab's own browser-test harness, on @playwright/test) with Debian's
// chromium, against the server ui-tests/run.sh starts ($VJPVIZ_GALATA_URL). No browser
// download: the executable is the system's, as in harness.mjs.
const path = require('path');
const base = require('@jupyterlab/galata/lib/playwright-config');

module.exports = {
  ...base,
  testDir: __dirname,
  outputDir: path.join(process.env.VJPVIZ_SCREENSHOTS || path.join(__dirname, '..', 'test-results'), 'galata'),
  reporter: [['list'], ['json', { outputFile: process.env.VJPVIZ_GALATA_REPORT || 'galata.json' }]],
  workers: 1,
  timeout: 120000,
  use: {
    ...base.use,
    baseURL: process.env.VJPVIZ_GALATA_URL,
    viewport: { width: 1800, height: 1100 },
    video: 'off',
    trace: 'off',
    launchOptions: {
      executablePath: process.env.VJPVIZ_CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync']
    }
  }
};
