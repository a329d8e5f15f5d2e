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
 * A node of the forward graph (`Node.to_dict()`).
 */
export interface IGraphNode {
  readonly id: string;
  readonly kind: string;
  readonly label: string;
  readonly primitive?: string | null;
  readonly parent?: string | null;
  readonly name_stack?: string;
  readonly call_site?: string | null;
  readonly function?: string | null;
  readonly rule?: string | null;
  readonly in_avals?: readonly string[];
  readonly out_avals?: readonly string[];
  readonly n_eqns?: number;
  readonly custom?: boolean;
}

/**
 * An edge of the forward graph (`Edge.to_dict()`).
 */
export interface IGraphEdge {
  readonly src: string;
  readonly dst: string;
  readonly var?: string;
  readonly primal?: string;
  readonly cotangent?: string;
  readonly cotangent_got?: string | null;
  readonly mismatch?: boolean;
}

/**
 * What the primal's own derivative says of a fix: equal to it (`verified`),
 * well-typed with wrong values (`type-only`), or no judge (`unverifiable`).
 */
export type FixVerdict = 'verified' | 'type-only' | 'unverifiable' | '';

/**
 * A fix suggestion (`Fix.to_dict()`). `exact` is true only when verified;
 * `note` says what a type-only fix breaks, or why a fix is unverifiable.
 */
export interface IFix {
  readonly title: string;
  readonly code: string;
  readonly reason?: string;
  readonly exact?: boolean;
  readonly verdict?: FixVerdict;
  readonly note?: string;
}

/**
 * How one input's cotangent differs from the primal's derivative
 * (analysis/oracle.py `LeafError.to_dict()`); `max_rel` is null for a zero reference.
 */
export interface ILeafError {
  readonly index?: number;
  readonly name: string;
  readonly max_abs: number;
  readonly max_rel?: number | null;
  readonly where?: readonly number[];
  readonly reference_zero?: boolean;
  readonly got_zero?: boolean;
  readonly judged?: boolean;
  readonly ok: boolean;
}

/**
 * A problem verify still found (a bwd_value one carries `leaf_errors`).
 */
export interface IVerifyProblem {
  readonly kind?: string;
  readonly headline?: string;
  readonly path?: string | null;
  readonly leaf_errors?: readonly ILeafError[];
}

/**
 * The fields of a diagnosis the panel reads. Everything is untrusted text.
 */
export interface IDiagnosisFields {
  readonly id: string;
  readonly kind: string;
  readonly severity: 'error' | 'warning';
  readonly headline: string;
  readonly function?: string | null;
  readonly rule?: string | null;
  readonly source?: string | null;
  readonly path?: string | null;
  readonly expected?: string | null;
  readonly got?: string | null;
  readonly message?: string | null;
  readonly node?: string | null;
  readonly rule_source?: string | null;
  readonly call_site?: string | null;
  readonly name_stack?: string;
  readonly detail?: string | null;
  readonly graph: {
    readonly nodes: readonly IGraphNode[];
    readonly edges: readonly IGraphEdge[];
    readonly note?: string | null;
  };
  readonly fixes: readonly IFix[];
  readonly rule_source_text?: string | null;
  readonly rule_source_start?: number | null;
  readonly rule_source_bad_line?: number | null;
}

/**
 * A diagnosis as serialised by the kernel (`Diagnosis.to_dict()` plus the
 * rule's source text, see jupyter_vjpviz/deliver/comm.py).
 */
export type Diagnosis = ReadonlyJSONObject;

/**
 * A diagnosis read through its typed fields.
 */
export function fields(d: Diagnosis): IDiagnosisFields {
  return d as unknown as IDiagnosisFields;
}

/**
 * The result of `view`, `expand` and `collapse`.
 */
export interface IViewResult {
  readonly svg: string;
  readonly expanded: string[];
  readonly collapsed?: string[];
  readonly failed_node?: string | null;
  readonly boxes?: number;
  readonly shown?: number;
  readonly total?: number;
}

/**
 * The result of `verify`.
 */
export interface IVerifyResult {
  readonly pass: boolean;
  readonly summary?: string;
  readonly diff?: readonly IVerifyProblem[];
  readonly verdict?: FixVerdict;
  readonly note?: string;
}

/**
 * The result of `apply`.
 */
export interface IApplyResult {
  readonly applied: boolean;
  readonly problems?: ReadonlyJSONObject[];
  readonly diff?: string | null;
  readonly path?: string | null;
}

/**
 * Kernel -> panel: vjpviz was loaded; the panel answers by opening its own comm.
 */
export interface IHelloMessage {
  readonly v: typeof PROTOCOL_VERSION;
  readonly type: 'hello';
}

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
export type KernelToPanelMessage =
  | IHelloMessage
  | IDiagnosisMessage
  | IReplyMessage;

/**
 * The operations the panel can ask the kernel for.
 */
export type RequestOp =
  | 'history'
  | 'verify'
  | 'apply'
  | 'expand'
  | 'collapse'
  | 'search'
  | 'view';

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
    case 'hello':
      return data as unknown as IHelloMessage;
    case 'diagnosis':
      if (!isObject(data.diagnosis)) {
        throw new Error('vjpviz diagnosis message needs an object "diagnosis"');
      }
      checkDiagnosis(data.diagnosis);
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

function checkDiagnosis(d: Record<string, unknown>): void {
  for (const key of ['id', 'kind', 'headline']) {
    if (typeof d[key] !== 'string') {
      throw new Error(`vjpviz diagnosis needs a string "${key}"`);
    }
  }
  if (d.severity !== 'error' && d.severity !== 'warning') {
    throw new Error('vjpviz diagnosis "severity" must be "error" or "warning"');
  }
  const graph = d.graph;
  if (
    !isObject(graph) ||
    !Array.isArray(graph.nodes) ||
    !Array.isArray(graph.edges)
  ) {
    throw new Error('vjpviz diagnosis needs a "graph" with "nodes" and "edges"');
  }
  if (!Array.isArray(d.fixes)) {
    throw new Error('vjpviz diagnosis needs an array "fixes"');
  }
  for (const fix of d.fixes) {
    if (
      !isObject(fix) ||
      typeof fix.title !== 'string' ||
      typeof fix.code !== 'string'
    ) {
      throw new Error('vjpviz fix needs string "title" and "code"');
    }
  }
}
