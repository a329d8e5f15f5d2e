// Galata (JupyterLab's own browser-test harness, on @playwright/test) with Debian's
// chromium, against the servers ui-tests/run.sh starts. No browser download: the
// executable is the system's. Two projects, one per server:
//   lab        JupyterLab with Galata's settings ($VJPVIZ_GALATA_URL): every spec but notebook7's
//   notebook7  `jupyter notebook` ($VJPVIZ_NB7_URL, $VJPVIZ_TOKEN): notebook7.spec.ts
const path = require('path');
const base = require('@jupyterlab/galata/lib/playwright-config');

const output = project =>
  path.join(
    process.env.VJPVIZ_SCREENSHOTS || path.join(__dirname, '..', 'screenshots'),
    `galata-${project}`
  );

module.exports = {
  ...base,
  testDir: __dirname,
  reporter: [
    ['list'],
    ['json', { outputFile: process.env.VJPVIZ_GALATA_REPORT || 'galata.json' }]
  ],
  workers: 1,
  // One retry: CI runs these on 2 cores beside the older-JAX suites, where a page can
  // miss a deadline now and then; a test that passes only on its retry is named
  // (ui-tests/run.sh: "flaky"), and one that fails twice fails the run.
  retries: 1,
  timeout: 180000,
  expect: { timeout: 10000 },
  use: {
    ...base.use,
    viewport: { width: 1800, height: 1100 },
    video: 'off',
    trace: 'off',
    launchOptions: {
      executablePath: process.env.VJPVIZ_CHROMIUM || '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync'
      ]
    }
  },
  // Each project its own output directory: a run empties its own.
  projects: [
    {
      name: 'lab',
      testIgnore: /notebook7\.spec/,
      outputDir: output('lab'),
      use: { baseURL: process.env.VJPVIZ_GALATA_URL }
    },
    {
      name: 'notebook7',
      testMatch: /notebook7\.spec/,
      outputDir: output('notebook7'),
      use: { baseURL: process.env.VJPVIZ_NB7_URL }
    }
  ]
};
