import { PROTOCOL_VERSION, parseKernelMessage } from '../protocol';

describe('parseKernelMessage', () => {
  it('accepts a diagnosis', () => {
    const data = { v: 1, type: 'diagnosis', diagnosis: { kind: 'bwd_aval' } };
    expect(parseKernelMessage(data)).toEqual(data);
  });

  it('accepts ok and failed replies', () => {
    const ok = { v: 1, type: 'reply', request_id: 'r1', ok: true, result: [1] };
    const failed = {
      v: 1,
      type: 'reply',
      request_id: 'r2',
      ok: false,
      error: 'no'
    };
    expect(parseKernelMessage(ok)).toEqual(ok);
    expect(parseKernelMessage(failed)).toEqual(failed);
  });

  it('rejects another protocol version', () => {
    expect(() =>
      parseKernelMessage({ v: 2, type: 'diagnosis', diagnosis: {} })
    ).toThrow(
      `unsupported vjpviz protocol version 2 (expected ${PROTOCOL_VERSION})`
    );
    expect(() =>
      parseKernelMessage({ type: 'diagnosis', diagnosis: {} })
    ).toThrow(/protocol version undefined/);
  });

  it('rejects missing or mistyped fields', () => {
    expect(() => parseKernelMessage({ v: 1, type: 'diagnosis' })).toThrow(
      'object "diagnosis"'
    );
    expect(() =>
      parseKernelMessage({ v: 1, type: 'diagnosis', diagnosis: [] })
    ).toThrow('object "diagnosis"');
    expect(() => parseKernelMessage({ v: 1, type: 'reply', ok: true })).toThrow(
      'string "request_id"'
    );
    expect(() =>
      parseKernelMessage({ v: 1, type: 'reply', request_id: 'r', ok: 'yes' })
    ).toThrow('boolean "ok"');
    expect(() =>
      parseKernelMessage({ v: 1, type: 'reply', request_id: 'r', ok: false })
    ).toThrow('needs an "error"');
    expect(() =>
      parseKernelMessage({
        v: 1,
        type: 'reply',
        request_id: 'r',
        ok: true,
        error: 3
      })
    ).toThrow('"error" must be a string');
    expect(() => parseKernelMessage({ v: 1, type: 'request' })).toThrow(
      'unknown vjpviz message type "request"'
    );
  });

  it('rejects non-objects', () => {
    expect(() => parseKernelMessage(null)).toThrow('got null');
    expect(() => parseKernelMessage([])).toThrow('got array');
    expect(() => parseKernelMessage('{"v": 1}')).toThrow('got string');
    expect(() => parseKernelMessage(1)).toThrow('got number');
    expect(() => parseKernelMessage(undefined)).toThrow('got undefined');
  });
});
