import Ajv from 'ajv';

import {
  parseDiagnosis,
  parseKernelMessage,
  parseResult,
  PROTOCOL_VERSION
} from '../protocol';

import schema from '../../jupyter_vjpviz/protocol.schema.json';
import examplesJson from './protocol-examples.json';

const examples = examplesJson as unknown as Record<string, unknown[]>;
const cases = (name: string): [unknown][] => examples[name].map(m => [m]);

// An independent validator (compiled here from the schema, not the generated one).
const ajv = new Ajv({ strict: false, allErrors: true });
const validate = ajv.compile(schema);
const definition = (name: string) =>
  ajv.getSchema(`${schema.$id}#/definitions/${name}`)!;
const validKernel = (data: unknown) =>
  ['HelloMessage', 'DiagnosisMessage', 'WatchMessage', 'ReplyMessage'].some(
    name => definition(name)(data)
  );

describe('protocol.schema.json', () => {
  it('is a valid JSON Schema', () => {
    expect(ajv.validateSchema(schema)).toBe(true);
  });

  it('has the version the panel sends', () => {
    expect(PROTOCOL_VERSION).toBe(schema.definitions.version.const);
  });

  it.each(cases('valid_kernel_messages'))(
    'accepts kernel message %j',
    message => {
      expect(validate(message)).toBe(true);
      expect(validKernel(message)).toBe(true);
    }
  );

  it.each(cases('valid_requests'))('accepts request %j', message => {
    expect(definition('RequestMessage')(message)).toBe(true);
  });

  it.each(cases('invalid_requests'))('rejects request %j', message => {
    expect(definition('RequestMessage')(message)).toBe(false);
  });
});

describe('parseKernelMessage agrees with the schema', () => {
  it.each(cases('valid_kernel_messages'))('accepts %j', message => {
    expect(parseKernelMessage(message)).toEqual(message);
  });

  it.each(cases('invalid_kernel_messages'))('rejects %j', message => {
    expect(validKernel(message)).toBe(false);
    expect(() => parseKernelMessage(message)).toThrow();
  });

  it('names what is wrong', () => {
    expect(() =>
      parseKernelMessage({ v: 2, type: 'diagnosis', diagnosis: {} })
    ).toThrow('unsupported vjpviz protocol version 2 (expected 1)');
    expect(() => parseKernelMessage(null)).toThrow('got null');
    expect(() => parseKernelMessage([])).toThrow('got array');
    expect(() =>
      parseKernelMessage({ v: 1, type: 'reply', request_id: 'r', ok: false })
    ).toThrow(
      "vjpviz reply message is malformed: must have required property 'error'"
    );
    expect(() =>
      parseKernelMessage({
        v: 1,
        type: 'diagnosis',
        diagnosis: {
          id: 'd1',
          kind: 'bwd_type',
          severity: 'fatal',
          headline: 'h',
          graph: { nodes: [], edges: [] },
          fixes: []
        }
      })
    ).toThrow('vjpviz diagnosis message is malformed at /diagnosis/severity');
    expect(() => parseKernelMessage({ v: 1, type: 'request' })).toThrow(
      'unknown vjpviz message type "request"'
    );
  });
});

describe('request limits (deliver/comm.py reads the same numbers)', () => {
  const defs = schema.definitions;
  const request = (args: object, requestId = 'r') => ({
    v: 1,
    type: 'request',
    request_id: requestId,
    op: 'verify',
    args: { report_id: 'd1', code: '', ...args }
  });
  const limits: [string, number, (n: number) => unknown][] = [
    ['request_id', defs.token.maxLength, n => request({}, 'r'.repeat(n))],
    [
      'report_id',
      defs.token.maxLength,
      n => request({ report_id: 'd'.repeat(n) })
    ],
    ['node', defs.nodeId.maxLength, n => request({ node: 'n'.repeat(n) })],
    [
      'expanded ids',
      defs.nodeIds.maxItems,
      n => request({ expanded: Array(n).fill('e0') })
    ],
    [
      'a collapsed id',
      defs.nodeId.maxLength,
      n => request({ collapsed: ['x'.repeat(n)] })
    ],
    [
      'query',
      defs.RequestArgs.properties.query.maxLength,
      n => request({ query: 'q'.repeat(n) })
    ],
    [
      'code',
      defs.RequestArgs.properties.code.maxLength,
      n => request({ code: 'c'.repeat(n) })
    ]
  ];

  it.each(limits)(
    '%s: accepted at its limit (%d), refused past it',
    (_, limit, make) => {
      expect(definition('RequestMessage')(make(limit))).toBe(true);
      expect(definition('RequestMessage')(make(limit + 1))).toBe(false);
    }
  );

  it('states the byte limit JSON Schema cannot check', () => {
    expect(defs.RequestMessage['x-maxBytes']).toBeGreaterThanOrEqual(
      defs.RequestArgs.properties.code.maxLength * 4
    );
    expect(defs.RequestMessage.description).toContain('x-maxBytes');
  });
});

describe("results are validated against their op's definition (x-results)", () => {
  const view = { svg: '<svg/>', expanded: [] };
  const results: [string, unknown, unknown][] = [
    ['history', { diagnoses: [] }, { diagnoses: 'none' }],
    ['view', view, { svg: 5, expanded: [] }],
    ['expand', view, { expanded: [] }],
    ['search', { matches: ['e1'], view }, { matches: ['e1'] }],
    [
      'verify',
      { pass: true, problems: [], verdict: 'verified' },
      { pass: true, verdict: 'maybe' }
    ],
    [
      'apply',
      {
        applied: false,
        problems: [{ id: 'd2', kind: 'bwd_type', headline: 'h' }]
      },
      { applied: 'yes' }
    ]
  ];

  it.each(results)(
    '%s: a good result passes, a bad one is named',
    (op, good, bad) => {
      const key = op as Parameters<typeof parseResult>[0];
      expect(parseResult(key, good)).toEqual(good);
      expect(() => parseResult(key, bad)).toThrow(
        `the kernel's ${op} result is malformed`
      );
    }
  );

  it('agrees with the schema on every example diagnosis', () => {
    for (const message of examples['valid_kernel_messages'] as {
      type: string;
      diagnosis?: unknown;
    }[]) {
      if (message.type === 'diagnosis') {
        expect(parseDiagnosis(message.diagnosis)).toEqual(message.diagnosis);
        expect(definition('Diagnosis')(message.diagnosis)).toBe(true);
      }
    }
  });
});
