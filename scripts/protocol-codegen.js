/**
 * The panel's side of protocol.schema.json, generated: TypeScript types
 * (json-schema-to-typescript) and precompiled validators (ajv standalone).
 * `node scripts/protocol-codegen.js` writes them to src/ (git ignores them): the
 * build (build:lib, build:lib:prod) and jest (src/__tests__/globalSetup.js) run it
 * first, so they are never stale. A file whose text is unchanged is not rewritten,
 * which keeps tsc's incremental build and setup.sh's stamp still.
 */
const fs = require('fs');
const path = require('path');
const Ajv = require('ajv');
const standaloneCode = require('ajv/dist/standalone').default;
const { compile } = require('json-schema-to-typescript');

const ROOT = path.resolve(__dirname, '..');
const SCHEMA_PATH = path.join(ROOT, 'jupyter_vjpviz', 'protocol.schema.json');
const TYPES_PATH = path.join(ROOT, 'src', 'protocolTypes.ts');
const VALIDATORS_PATH = path.join(ROOT, 'src', 'protocolValidators.ts');

const BANNER =
  '/* Generated from jupyter_vjpviz/protocol.schema.json by ' +
  'scripts/protocol-codegen.js: do not edit. */';

function readSchema() {
  return JSON.parse(fs.readFileSync(SCHEMA_PATH, 'utf-8'));
}

/**
 * The messages the kernel sends the panel, by their `type`: every message of the
 * schema's root but the request, so a new one needs no edit here or in protocol.ts.
 */
function kernelMessages(schema) {
  const names = schema.oneOf
    .map(ref => ref.$ref.split('/').pop())
    .filter(name => name !== 'RequestMessage');
  return Object.fromEntries(
    names.map(name => [schema.definitions[name].properties.type.const, name])
  );
}

/** The definitions the panel validates messages and results against. */
function validated(schema) {
  return [
    ...new Set([
      ...Object.values(kernelMessages(schema)),
      'Diagnosis', // each of a history reply, on its own
      ...Object.values(resultsByOp(schema))
    ])
  ];
}

async function types(schema) {
  // A union root hides the definitions nothing references (the results): an empty
  // object root lists every definition, the messages' union among them.
  const definitions = {
    ...schema.definitions,
    ProtocolMessage: { description: schema.description, oneOf: schema.oneOf }
  };
  const root = {
    $id: schema.$id,
    title: 'Protocol',
    type: 'object',
    additionalProperties: false,
    definitions,
    $defs: definitions
  };
  const generated = await compile(root, 'Protocol', {
    bannerComment: BANNER,
    additionalProperties: false,
    unreachableDefinitions: true,
    maxItems: -1,
    strictIndexSignatures: true,
    format: true,
    style: { singleQuote: true, trailingComma: 'none', arrowParens: 'avoid' }
  });
  const results = Object.entries(resultsByOp(schema)).map(
    ([op, name]) => `  ${op}: ${name};`
  );
  const messages = Object.values(kernelMessages(schema));
  return `${generated}
/**
 * The result of each op's ok reply (RequestMessage's x-results).
 */
export interface ResultOf {
${results.join('\n')}
}

/**
 * A message the kernel sends the panel: every message of the protocol but the request.
 */
export type KernelToPanelMessage =
${messages.map(name => `  | ${name}`).join('\n')};
`;
}

function resultsByOp(schema) {
  return schema.definitions.RequestMessage['x-results'];
}

function validators(schema) {
  // The x- keywords are the kernel's (byte limit, results by op): known, not checked here.
  // unicode: false counts a string's length in UTF-16 units, so the code needs no
  // runtime helper from ajv; the only length the panel checks is a non-empty id.
  const ajv = new Ajv({
    allErrors: false,
    unicode: false,
    strictTypes: false,
    code: { source: true, esm: true, lines: true },
    keywords: ['x-maxBytes', 'x-results']
  });
  ajv.addSchema(schema);
  const refs = Object.fromEntries(
    validated(schema).map(name => [
      name,
      `${schema.$id}#/definitions/${name}`
    ])
  );
  const entries = byKey =>
    Object.entries(byKey)
      .map(([key, name]) => `  ${key}: ${name}`)
      .join(',\n');
  return `${BANNER}
// @ts-nocheck
${standaloneCode(ajv, refs)}
/** Each op's result validator (RequestMessage's x-results). */
export const resultValidators = {
${entries(resultsByOp(schema))}
};

/** Each kernel message's validator, by its type. */
export const messageValidators = {
${entries(kernelMessages(schema))}
};
`;
}

async function generate() {
  const schema = readSchema();
  return { [TYPES_PATH]: await types(schema), [VALIDATORS_PATH]: validators(schema) };
}

generate().then(files => {
  for (const [file, text] of Object.entries(files)) {
    if (fs.existsSync(file) && fs.readFileSync(file, 'utf-8') === text) {
      continue;
    }
    fs.writeFileSync(file, text);
    console.log(`wrote ${path.relative(ROOT, file)}`);
  }
});
