// The generated protocol files (git ignores them) are made before any test imports
// them, in plain node: json-schema-to-typescript's prettier does not run in jest's VM.
const { execFileSync } = require('child_process');
const path = require('path');

module.exports = () => {
  execFileSync(
    'node',
    [path.resolve(__dirname, '../../scripts/protocol-codegen.js')],
    {
      stdio: 'inherit'
    }
  );
};
