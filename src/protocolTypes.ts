/* Generated from jupyter_vjpviz/protocol.schema.json by scripts/protocol-codegen.js: do not edit. */

/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "version".
 */
export type Version = 1;
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "nullableString".
 */
export type NullableString = string | null;
/**
 * a diagnosis kind: a name in the kind registry (base/kinds.py; tests/test_architecture.py checks the two agree)
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "diagnosisKind".
 */
export type DiagnosisKind =
  | 'bwd_type'
  | 'silent_dtype'
  | 'bwd_structure'
  | 'bwd_value'
  | 'fwd_type'
  | 'fwd_structure'
  | 'accumulator_type'
  | 'ref_grad_unbound'
  | 'ref_grad_as_value'
  | 'grad_ref_type'
  | 'vjp_cotangent_type'
  | 'vjp_cotangent_structure'
  | 'nonfinite_cotangent'
  | 'jvp_tangent_type';
/**
 * what the primal's own derivative says of a fix: verified (equal to it), type-only (well-typed, wrong values), unverifiable (no judge); "" when not ranked
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "FixVerdict".
 */
export type FixVerdict = 'verified' | 'type-only' | 'unverifiable' | '';
/**
 * an id one side made up: request_id, diagnosis_id
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "token".
 */
export type Token = string;
/**
 * panel -> kernel. Ops: history {} -> {diagnoses: [Diagnosis]}; view {diagnosis_id, expanded?, collapsed?} -> View; expand/collapse {diagnosis_id, node, expanded?, collapsed?} -> View; search {diagnosis_id, query, expanded?, collapsed?} -> {matches: [node id], view: View}; verify {diagnosis_id, code} -> VerifyResult; apply {diagnosis_id, code} -> ApplyResult. The view state (expanded/collapsed) lives in the panel, so the kernel keeps none. Limits (generous for real use, read by deliver/comm.py from this file): each string and list below has a maxLength/maxItems, and the whole request, as compact UTF-8 JSON, is at most x-maxBytes bytes (a size JSON Schema cannot express). The kernel refuses anything over a limit with an error reply. x-results names each op's result definition: the panel validates every ok reply's result against it.
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "RequestMessage".
 */
export type RequestMessage = {
  [k: string]: unknown | undefined;
} & {
  v: Version;
  type: 'request';
  request_id: Token;
  op: 'history' | 'view' | 'expand' | 'collapse' | 'search' | 'verify' | 'apply';
  args: RequestArgs;
};
/**
 * a graph node or cluster id (render.views ids; cluster ids carry scope names)
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "nodeId".
 */
export type NodeId = string;
/**
 * cluster or equation ids the user opened (expanded) or closed (collapsed)
 *
 * @maxItems 1000
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "nodeIds".
 */
export type NodeIds = NodeId[];
/**
 * Every message on the `vjpviz` comm target. On %load_ext the kernel sends a hello message on a comm it never opens (a comm_msg that frontends without a panel drop unread; the panel reads it off iopub); once a panel has opened its own comm, the kernel opens a fresh comm per diagnosis push (data = a diagnosis message); the panel may open its own comm (data = a request) to ask for history after a page reload. Requests go panel -> kernel; every request gets exactly one reply with the same request_id. Both src/protocol.ts and jupyter_vjpviz/deliver/comm.py are tested against this file.
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "ProtocolMessage".
 */
export type ProtocolMessage = HelloMessage | DiagnosisMessage | FixesMessage | RequestMessage | ReplyMessage;

export interface Protocol {}
/**
 * kernel -> panel: a new diagnosis (Diagnosis.to_dict() plus what the panel needs to show it), pushed before its fixes are judged (a fixes message follows), with view: its default view, drawn, so the panel shows the graph without asking.
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "DiagnosisMessage".
 */
export interface DiagnosisMessage {
  v: Version;
  type: 'diagnosis';
  diagnosis: Diagnosis;
  view?: View;
}
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "Diagnosis".
 */
export interface Diagnosis {
  id: string;
  kind: DiagnosisKind;
  severity: 'error' | 'warning';
  headline: string;
  function?: NullableString;
  rule?: NullableString;
  /**
   * file:line of the primal definition
   */
  source?: string | null;
  /**
   * pytree path of the mismatching leaf, e.g. [1] or ['w']
   */
  path?: string | null;
  expected?: NullableString;
  got?: NullableString;
  /**
   * JAX's own text; null for warnings
   */
  message?: string | null;
  /**
   * id of the failing graph node
   */
  node?: string | null;
  /**
   * file:line of the bwd rule
   */
  rule_source?: string | null;
  call_site?: NullableString;
  /**
   * the failing input as the user named it: x, p['w']
   */
  argument?: string | null;
  /**
   * that input's primal aval
   */
  primal?: string | null;
  /**
   * which of several identical blocks: model.layers[3]
   */
  instance?: string | null;
  name_stack?: string;
  detail?: NullableString;
  hijax?: boolean;
  graph: Graph;
  fixes: Fix[];
  /**
   * bwd_value: per input leaf, how the rule's cotangent differs from the primal's derivative
   */
  leaf_errors?: LeafError[];
  /**
   * the expected-vs-got table (analysis/diagnosis.py MismatchedLeaf): every leaf the rule application got wrong, the one the diagnosis leads with first; for the structure kinds every leaf of either tree. Empty for a diagnosis read from JAX's message
   */
  leaves?: DiagnosisLeaf[];
  /**
   * added by deliver/comm.py: the rule's source text
   */
  rule_source_text?: string | null;
  /**
   * added by deliver/comm.py: line number of rule_source_text's first line
   */
  rule_source_start?: number | null;
  /**
   * added by deliver/comm.py: line number of rule_source_text's last line (the rule's definition spans rule_source_start..rule_source_end, decorators included)
   */
  rule_source_end?: number | null;
  /**
   * added by deliver/comm.py: the line (file numbering) of the return statement that produced the failing cotangent (fixes/returns.py), null when not known
   */
  rule_source_bad_line?: number | null;
  cell_index?: number | null;
}
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "Graph".
 */
export interface Graph {
  nodes: GraphNode[];
  edges: GraphEdge[];
  note?: NullableString;
}
/**
 * a node of the forward graph (analysis/graph.py Node)
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "GraphNode".
 */
export interface GraphNode {
  id: string;
  /**
   * input (differentiated), static (not differentiated), output or eqn
   */
  kind: string;
  label: string;
  primitive?: NullableString;
  parent?: NullableString;
  name_stack?: string;
  call_site?: NullableString;
  /**
   * custom rules: the primal function
   */
  function?: string | null;
  /**
   * custom rules: the rule
   */
  rule?: string | null;
  in_avals?: string[];
  out_avals?: string[];
  n_eqns?: number;
  custom?: boolean;
  frames?: string;
  scope?: string;
}
/**
 * an edge of the forward graph (analysis/graph.py Edge): a variable and its avals
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "GraphEdge".
 */
export interface GraphEdge {
  src: string;
  dst: string;
  var?: string;
  primal?: string;
  cotangent?: string;
  cotangent_got?: NullableString;
  mismatch?: boolean;
  /**
   * the failing rule's input this edge feeds, spelled as the diagnosis's argument
   */
  argument?: string | null;
  /**
   * bwd_value: the cotangent is well-typed but its values differ from the primal's derivative, e.g. rel 0.31
   */
  value_error?: string | null;
}
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "Fix".
 */
export interface Fix {
  title: string;
  code: string;
  reason?: string;
  /**
   * true only when verified equal to the primal's own derivative
   */
  exact?: boolean;
  verdict?: FixVerdict;
  /**
   * type-only: what the fix breaks ("the gradient of `scale` becomes zero"); unverifiable: why (no oracle, out of time)
   */
  note?: string;
}
/**
 * how one input's cotangent differs from the primal's derivative (analysis/oracle.py LeafError)
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "LeafError".
 */
export interface LeafError {
  index?: number;
  name: string;
  max_abs: number;
  /**
   * null when the reference is zero
   */
  max_rel?: number | null;
  where?: number[];
  reference_zero?: boolean;
  got_zero?: boolean;
  judged?: boolean;
  ok: boolean;
  /**
   * the reference at where (on the draw with the worst error)
   */
  reference_at?: number;
  /**
   * the rule's cotangent there
   */
  got_at?: number;
  /**
   * the largest reference magnitude
   */
  scale?: number;
}
/**
 * one row of a diagnosis's expected-vs-got table; expected and got are avals (str_short), a Python type's name, None, or missing (that side has no such leaf)
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "DiagnosisLeaf".
 */
export interface DiagnosisLeaf {
  /**
   * the leaf's key path in the cotangent tree, as data
   */
  path: KeyEntry[];
  /**
   * the leaf as the user would type it: x, p['w'], out[0]
   */
  argument?: string | null;
  primal?: NullableString;
  expected: NullableString;
  got: NullableString;
}
/**
 * one step of a pytree key path (capture/leaf_paths.py Key): index = a sequence's [0], key = a dict's ['w'] or [1], attr = a field's .w, flat = a custom node's child without a key, other = any other key, spelled as jax.tree_util.keystr spells it
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "KeyEntry".
 */
export interface KeyEntry {
  kind: 'index' | 'key' | 'attr' | 'flat' | 'other';
  key: number | string;
}
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "View".
 */
export interface View {
  /**
   * graphviz SVG; each box is a <g> whose id attribute is the graph node or cluster id; clusters have class vjpviz-cluster, an opened equation's body is <g class="cluster" id="body:<node id>">, the failing box has class vjpviz-node-failed
   */
  svg: string;
  expanded: string[];
  failed_node?: NullableString;
  shown?: number;
  total?: number;
  collapsed?: string[];
  /**
   * boxes laid out
   */
  boxes?: number;
}
/**
 * kernel -> panel: the fixes of a diagnosis already pushed, judged after it was delivered (the diagnosis is pushed as soon as its graph exists); they replace that diagnosis's fixes.
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "FixesMessage".
 */
export interface FixesMessage {
  v: Version;
  type: 'fixes';
  diagnosis_id: Token;
  fixes: Fix[];
}
/**
 * every op's arguments; which are required depends on the op (RequestMessage)
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "RequestArgs".
 */
export interface RequestArgs {
  diagnosis_id?: Token;
  node?: NodeId;
  expanded?: NodeIds;
  collapsed?: NodeIds;
  query?: string;
  /**
   * the edited rule(s), Python source
   */
  code?: string;
}
/**
 * kernel -> panel: the one answer to a message on a vjpviz comm. ok=false carries an error string; a message the kernel cannot parse gets request_id "" unless it had a string request_id within the token limit, which is echoed.
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "ReplyMessage".
 */
export interface ReplyMessage {
  v: Version;
  type: 'reply';
  request_id: string;
  ok: boolean;
  result?: unknown;
  error?: string;
}
/**
 * the diagnoses this kernel keeps, oldest first; the panel validates each one on its own
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "HistoryResult".
 */
export interface HistoryResult {
  diagnoses: {}[];
}
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "SearchResult".
 */
export interface SearchResult {
  /**
   * ids of the graph nodes matching the query
   */
  matches: string[];
  view: View;
}
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "VerifyResult".
 */
export interface VerifyResult {
  pass: boolean;
  summary?: string;
  /**
   * the problems still found
   */
  problems?: VerifyProblem[];
  /**
   * what the primal's own derivative says of a fix: verified (equal to it), type-only (well-typed, wrong values), unverifiable (no judge); "" when not ranked
   */
  verdict?: 'verified' | 'type-only' | 'unverifiable' | '';
  /**
   * the oracle's reason for the verdict
   */
  note?: string;
}
/**
 * a problem verify or apply still found (deliver/comm.py _problem); a bwd_value one (well-typed, wrong values) adds leaf_errors
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "VerifyProblem".
 */
export interface VerifyProblem {
  id: string;
  kind: DiagnosisKind;
  headline: string;
  path?: NullableString;
  expected?: NullableString;
  got?: NullableString;
  leaf_errors?: LeafError[];
}
/**
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "ApplyResult".
 */
export interface ApplyResult {
  applied: boolean;
  problems?: VerifyProblem[];
  /**
   * for rules defined in a .py file: a unified diff to apply by hand
   */
  patch?: string | null;
  path?: string | null;
}
/**
 * kernel -> panel: vjpviz was loaded in this kernel. A panel answers by opening its own comm (a history request), so the kernel knows a panel listens before the first diagnosis.
 *
 * This interface was referenced by `Protocol`'s JSON-Schema
 * via the `definition` "HelloMessage".
 */
export interface HelloMessage {
  v: Version;
  type: 'hello';
}

/**
 * The result of each op's ok reply (RequestMessage's x-results).
 */
export interface ResultOf {
  history: HistoryResult;
  view: View;
  expand: View;
  collapse: View;
  search: SearchResult;
  verify: VerifyResult;
  apply: ApplyResult;
}
