const jestJupyterLab = require('@jupyterlab/testutils/lib/jest-config');

// ESM-only packages that babel must transform; '@jupyter/', '@microsoft/' and
// 'exenv-es6' are reached through @jupyterlab/ui-components.
const esModules = [
  '@codemirror',
  '@jupyter/',
  '@jupyterlab/',
  '@microsoft/',
  'exenv-es6',
  'lib0',
  'nanoid',
  'vscode-ws-jsonrpc',
  'y-protocols',
  'y-websocket',
  'yjs'
].join('|');

const base = jestJupyterLab(__dirname);

module.exports = {
  ...base,
  automock: false,
  collectCoverageFrom: ['src/**/*.{ts,tsx}', '!src/**/*.d.ts'],
  globalSetup: '<rootDir>/src/__tests__/globalSetup.js',
  roots: ['<rootDir>/src'],
  setupFiles: [...base.setupFiles, '<rootDir>/src/__tests__/clipboard.ts'],
  testRegex: 'src/.*/.*.spec.ts[x]?$',
  transformIgnorePatterns: [`/node_modules/(?!${esModules}).+`]
};
