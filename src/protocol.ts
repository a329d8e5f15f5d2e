import {
  JSONObject,
  ReadonlyJSONObject,
  ReadonlyJSONValue
} from '@lumino/coreutils';

/**
 * The comm target the kernel opens comms on.
 */
export const COMM_TARGET = 'vjpviz';

/**
 * The protocol version carried in every message as `v`.
 */
export const PROTOCOL_VERSION = 1;

/**
 * A diagnosis as serialised by the kernel (`Diagnosis.to_dict()`).
 */
export type Diagnosis = ReadonlyJSONObject;

/**
 * Kernel -> panel: a new diagnosis.
 */
export interface IDiagnosisMessage {
  readonly v: typeof PROTOCOL_VERSION;
  readonly type: 'diagnosis';
  readonly diagnosis: Diagnosis;
}

/**
 * Kernel -> panel: the answer to a request; `error` is set when `ok` is false.
 */
export interface IReplyMessage {
  readonly v: typeof PROTOCOL_VERSION;
  readonly type: 'reply';
  readonly request_id: string;
  readonly ok: boolean;
  readonly result?: ReadonlyJSONValue;
  readonly error?: string;
}

/**
 * A message sent by the kernel to the panel.
 */
export type KernelToPanelMessage = IDiagnosisMessage | IReplyMessage;

/**
 * The operations the panel can ask the kernel for.
 */
export type RequestOp =
  'verify' | 'apply' | 'expand' | 'collapse' | 'search' | 'view';

/**
 * Panel -> kernel: a request, answered by a reply with the same `request_id`.
 */
export interface IRequestMessage extends JSONObject {
  v: typeof PROTOCOL_VERSION;
  type: 'request';
  request_id: string;
  op: RequestOp;
  args: JSONObject;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Validate data received from the kernel.
 *
 * @throws Error naming what is wrong when `data` is not a valid message.
 */
export function parseKernelMessage(data: unknown): KernelToPanelMessage {
  if (!isObject(data)) {
    const got =
      data === null ? 'null' : Array.isArray(data) ? 'array' : typeof data;
    throw new Error(`vjpviz message must be a JSON object, got ${got}`);
  }
  if (data.v !== PROTOCOL_VERSION) {
    throw new Error(
      `unsupported vjpviz protocol version ${JSON.stringify(data.v)} (expected ${PROTOCOL_VERSION})`
    );
  }
  switch (data.type) {
    case 'diagnosis':
      if (!isObject(data.diagnosis)) {
        throw new Error('vjpviz diagnosis message needs an object "diagnosis"');
      }
      return data as unknown as IDiagnosisMessage;
    case 'reply':
      if (typeof data.request_id !== 'string') {
        throw new Error('vjpviz reply needs a string "request_id"');
      }
      if (typeof data.ok !== 'boolean') {
        throw new Error('vjpviz reply needs a boolean "ok"');
      }
      if (data.error !== undefined && typeof data.error !== 'string') {
        throw new Error('vjpviz reply "error" must be a string');
      }
      if (!data.ok && data.error === undefined) {
        throw new Error('vjpviz reply with "ok": false needs an "error"');
      }
      return data as unknown as IReplyMessage;
    default:
      throw new Error(
        `unknown vjpviz message type ${JSON.stringify(data.type)}`
      );
  }
}
