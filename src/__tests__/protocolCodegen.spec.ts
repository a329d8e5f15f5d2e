import schema from '../../jupyter_vjpviz/protocol.schema.json';
import { PROTOCOL_VERSION } from '../protocol';

// Node modules, outside the panel's types (tsconfig's types are jest's only).
declare const require: (id: string) => any;
declare const __dirname: string;
const fs = require('fs');
const { execFileSync } = require('child_process');
const path = require('path');

describe('the generated protocol files', () => {
  it('are what scripts/protocol-codegen.js makes of protocol.schema.json', () => {
    const script = path.resolve(__dirname, '../../scripts/protocol-codegen.js');
    const files: Record<string, string> = JSON.parse(
      execFileSync('node', [script, '--print'], { encoding: 'utf-8', stdio: ['ignore', 'pipe', 'ignore'] })
    );
    expect(Object.keys(files)).toHaveLength(2);
    for (const [file, text] of Object.entries(files)) {
      // Out of date: run `node scripts/protocol-codegen.js`.
      expect(fs.readFileSync(file, 'utf-8')).toBe(text);
    }
  });

  it('carry the schema version', () => {
    expect(PROTOCOL_VERSION).toBe(schema.definitions.version.const);
  });
});
