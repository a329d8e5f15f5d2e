/**
 * The panel's side of the protocol. Types and validators are generated from
 * jupyter_vjpviz/protocol.schema.json (scripts/protocol-codegen.js), the one
 * place the protocol is written; this module names them and turns a failed
 * validation into a sentence.
 */
import type {
  Diagnosis,
  HelloMessage,
  KernelToPanelMessage,
  ReplyMessage,
  RequestMessage,
  ResultOf,
  Version
} from './protocolTypes';
import * as validators from './protocolValidators';

export type * from './protocolTypes';

export type RequestOp = RequestMessage['op'];

/**
 * The comm target the kernel opens comms on.
 */
export const COMM_TARGET = 'vjpviz';

/**
 * The protocol version carried in every message as `v`.
 */
export const PROTOCOL_VERSION: Version = 1;

/**
 * A message the kernel pushes as something happens (a diagnosis, a watch's
 * series, a vv.grads report): every kernel message but the hello and a reply.
 */
export type PushMessage = Exclude<
  KernelToPanelMessage,
  HelloMessage | ReplyMessage
>;

interface IValidator {
  (data: unknown): boolean;
  errors?: { instancePath: string; message?: string }[] | null;
}

const MESSAGE_VALIDATORS: Record<string, IValidator> =
  validators.messageValidators;

const RESULT_VALIDATORS: Record<RequestOp, IValidator> =
  validators.resultValidators;

/**
 * `data` checked by `validate`, or an Error saying where it breaks the schema.
 */
function checked<T>(data: unknown, validate: IValidator, what: string): T {
  if (validate(data)) {
    return data as T;
  }
  const error = validate.errors?.[0];
  const where = error?.instancePath ? ` at ${error.instancePath}` : '';
  throw new Error(
    `${what} is malformed${where}: ${error?.message ?? 'invalid'}`
  );
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Validate data received from the kernel against the schema.
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
  const validate =
    typeof data.type === 'string' ? MESSAGE_VALIDATORS[data.type] : undefined;
  if (!validate) {
    throw new Error(`unknown vjpviz message type ${JSON.stringify(data.type)}`);
  }
  return checked(data, validate, `vjpviz ${data.type} message`);
}

/**
 * A diagnosis checked on its own (each one of a history reply).
 */
export function parseDiagnosis(data: unknown): Diagnosis {
  return checked(data, validators.Diagnosis, 'vjpviz diagnosis');
}

/**
 * The result of an ok reply to `op`, checked against the op's result definition.
 *
 * @throws Error naming the op and what is wrong.
 */
export function parseResult<Op extends RequestOp>(
  op: Op,
  result: unknown
): ResultOf[Op] {
  return checked(result, RESULT_VALIDATORS[op], `the kernel's ${op} result`);
}
