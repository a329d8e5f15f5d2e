/* Generated from jupyter_vjpviz/protocol.schema.json by scripts/protocol-codegen.js: do not edit. */
// @ts-nocheck
"use strict";
export const HelloMessage = validate41;
const schema12 = {"description":"kernel -> panel: vjpviz was loaded in this kernel. A panel answers by opening its own comm (a history request), so the kernel knows a panel listens before the first diagnosis.","type":"object","required":["v","type"],"properties":{"v":{"$ref":"#/definitions/version"},"type":{"const":"hello"}},"additionalProperties":false};
const schema13 = {"const":1};

function validate41(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((data.v === undefined) && (missing0 = "v")) || ((data.type === undefined) && (missing0 = "type"))){
validate41.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
const _errs1 = errors;
for(const key0 in data){
if(!((key0 === "v") || (key0 === "type"))){
validate41.errors = [{instancePath,schemaPath:"#/additionalProperties",keyword:"additionalProperties",params:{additionalProperty: key0},message:"must NOT have additional properties"}];
return false;
break;
}
}
if(_errs1 === errors){
if(data.v !== undefined){
const _errs2 = errors;
if(1 !== data.v){
validate41.errors = [{instancePath:instancePath+"/v",schemaPath:"#/definitions/version/const",keyword:"const",params:{allowedValue: 1},message:"must be equal to constant"}];
return false;
}
var valid0 = _errs2 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.type !== undefined){
const _errs4 = errors;
if("hello" !== data.type){
validate41.errors = [{instancePath:instancePath+"/type",schemaPath:"#/properties/type/const",keyword:"const",params:{allowedValue: "hello"},message:"must be equal to constant"}];
return false;
}
var valid0 = _errs4 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
else {
validate41.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate41.errors = vErrors;
return errors === 0;
}

export const DiagnosisMessage = validate42;
const schema14 = {"description":"kernel -> panel: a new diagnosis (Diagnosis.to_dict() plus what the panel needs to show it), pushed before its fixes are judged (a fixes message follows), with view: its default view, drawn, so the panel shows the graph without asking.","type":"object","required":["v","type","diagnosis"],"properties":{"v":{"$ref":"#/definitions/version"},"type":{"const":"diagnosis"},"diagnosis":{"$ref":"#/definitions/Diagnosis"},"view":{"$ref":"#/definitions/View"}}};
const schema16 = {"type":"object","required":["id","kind","severity","headline","graph","fixes"],"properties":{"id":{"type":"string","minLength":1},"kind":{"$ref":"#/definitions/diagnosisKind"},"severity":{"enum":["error","warning"]},"headline":{"type":"string"},"function":{"$ref":"#/definitions/nullableString"},"rule":{"$ref":"#/definitions/nullableString"},"source":{"$ref":"#/definitions/nullableString","description":"file:line of the primal definition"},"path":{"$ref":"#/definitions/nullableString","description":"pytree path of the mismatching leaf, e.g. [1] or ['w']"},"expected":{"$ref":"#/definitions/nullableString"},"got":{"$ref":"#/definitions/nullableString"},"message":{"$ref":"#/definitions/nullableString","description":"JAX's own text; null for warnings"},"node":{"$ref":"#/definitions/nullableString","description":"id of the failing graph node"},"rule_source":{"$ref":"#/definitions/nullableString","description":"file:line of the bwd rule"},"call_site":{"$ref":"#/definitions/nullableString"},"argument":{"$ref":"#/definitions/nullableString","description":"the failing input as the user named it: x, p['w']"},"primal":{"$ref":"#/definitions/nullableString","description":"that input's primal aval"},"instance":{"$ref":"#/definitions/nullableString","description":"which of several identical blocks: model.layers[3]"},"name_stack":{"type":"string"},"detail":{"$ref":"#/definitions/nullableString"},"hijax":{"type":"boolean"},"graph":{"$ref":"#/definitions/Graph"},"fixes":{"type":"array","items":{"$ref":"#/definitions/Fix"}},"leaf_errors":{"type":"array","items":{"$ref":"#/definitions/LeafError"},"description":"bwd_value: per input leaf, how the rule's cotangent differs from the primal's derivative"},"leaves":{"type":"array","items":{"$ref":"#/definitions/DiagnosisLeaf"},"description":"the expected-vs-got table (analysis/diagnosis.py MismatchedLeaf): every leaf the rule application got wrong, the one the diagnosis leads with first; for the structure kinds every leaf of either tree. Empty for a diagnosis read from JAX's message"},"rule_source_text":{"$ref":"#/definitions/nullableString","description":"added by deliver/comm.py: the rule's source text"},"rule_source_start":{"type":["integer","null"],"description":"added by deliver/comm.py: line number of rule_source_text's first line"},"rule_source_end":{"type":["integer","null"],"description":"added by deliver/comm.py: line number of rule_source_text's last line (the rule's definition spans rule_source_start..rule_source_end, decorators included)"},"rule_source_bad_line":{"type":["integer","null"],"description":"added by deliver/comm.py: the line (file numbering) of the return statement that produced the failing cotangent (fixes/returns.py), null when not known"},"cell_index":{"type":["integer","null"]}}};
const schema17 = {"description":"a diagnosis kind: a name in the kind registry (base/kinds.py; tests/test_architecture.py checks the two agree)","enum":["bwd_type","silent_dtype","bwd_structure","bwd_value","fwd_type","fwd_structure","accumulator_type","ref_grad_unbound","ref_grad_as_value","grad_ref_type","vjp_cotangent_type","vjp_cotangent_structure","nonfinite_cotangent","jvp_tangent_type"]};
const schema18 = {"type":["string","null"]};
const schema46 = {"description":"how one input's cotangent differs from the primal's derivative (analysis/oracle.py LeafError)","type":"object","required":["name","max_abs","ok"],"properties":{"index":{"type":"integer"},"name":{"type":"string"},"max_abs":{"type":"number"},"max_rel":{"type":["number","null"],"description":"null when the reference is zero"},"where":{"type":"array","items":{"type":"integer"}},"reference_zero":{"type":"boolean"},"got_zero":{"type":"boolean"},"judged":{"type":"boolean"},"ok":{"type":"boolean"},"reference_at":{"type":"number","description":"the reference at where (on the draw with the worst error)"},"got_at":{"type":"number","description":"the rule's cotangent there"},"scale":{"type":"number","description":"the largest reference magnitude"}}};
const schema32 = {"type":"object","required":["nodes","edges"],"properties":{"nodes":{"type":"array","items":{"$ref":"#/definitions/GraphNode"}},"edges":{"type":"array","items":{"$ref":"#/definitions/GraphEdge"}},"note":{"$ref":"#/definitions/nullableString"}}};
const schema33 = {"type":"object","required":["id","kind","label"],"properties":{"id":{"type":"string"},"kind":{"type":"string","description":"input (differentiated), static (not differentiated), output or eqn"},"label":{"type":"string"},"primitive":{"$ref":"#/definitions/nullableString"},"parent":{"$ref":"#/definitions/nullableString"},"name_stack":{"type":"string"},"call_site":{"$ref":"#/definitions/nullableString"},"function":{"$ref":"#/definitions/nullableString","description":"custom rules: the primal function"},"rule":{"$ref":"#/definitions/nullableString","description":"custom rules: the rule"},"in_avals":{"type":"array","items":{"type":"string"}},"out_avals":{"type":"array","items":{"type":"string"}},"n_eqns":{"type":"integer"},"custom":{"type":"boolean"},"frames":{"type":"string"},"scope":{"type":"string"}},"description":"a node of the forward graph (analysis/graph.py Node)"};

function validate16(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((((data.id === undefined) && (missing0 = "id")) || ((data.kind === undefined) && (missing0 = "kind"))) || ((data.label === undefined) && (missing0 = "label"))){
validate16.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.id !== undefined){
const _errs1 = errors;
if(typeof data.id !== "string"){
validate16.errors = [{instancePath:instancePath+"/id",schemaPath:"#/properties/id/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.kind !== undefined){
const _errs3 = errors;
if(typeof data.kind !== "string"){
validate16.errors = [{instancePath:instancePath+"/kind",schemaPath:"#/properties/kind/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.label !== undefined){
const _errs5 = errors;
if(typeof data.label !== "string"){
validate16.errors = [{instancePath:instancePath+"/label",schemaPath:"#/properties/label/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.primitive !== undefined){
let data3 = data.primitive;
const _errs7 = errors;
if((typeof data3 !== "string") && (data3 !== null)){
validate16.errors = [{instancePath:instancePath+"/primitive",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs7 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.parent !== undefined){
let data4 = data.parent;
const _errs10 = errors;
if((typeof data4 !== "string") && (data4 !== null)){
validate16.errors = [{instancePath:instancePath+"/parent",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs10 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.name_stack !== undefined){
const _errs13 = errors;
if(typeof data.name_stack !== "string"){
validate16.errors = [{instancePath:instancePath+"/name_stack",schemaPath:"#/properties/name_stack/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs13 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.call_site !== undefined){
let data6 = data.call_site;
const _errs15 = errors;
if((typeof data6 !== "string") && (data6 !== null)){
validate16.errors = [{instancePath:instancePath+"/call_site",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs15 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.function !== undefined){
let data7 = data.function;
const _errs18 = errors;
if((typeof data7 !== "string") && (data7 !== null)){
validate16.errors = [{instancePath:instancePath+"/function",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs18 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule !== undefined){
let data8 = data.rule;
const _errs21 = errors;
if((typeof data8 !== "string") && (data8 !== null)){
validate16.errors = [{instancePath:instancePath+"/rule",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs21 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.in_avals !== undefined){
let data9 = data.in_avals;
const _errs24 = errors;
if(errors === _errs24){
if(Array.isArray(data9)){
var valid6 = true;
const len0 = data9.length;
for(let i0=0; i0<len0; i0++){
const _errs26 = errors;
if(typeof data9[i0] !== "string"){
validate16.errors = [{instancePath:instancePath+"/in_avals/" + i0,schemaPath:"#/properties/in_avals/items/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid6 = _errs26 === errors;
if(!valid6){
break;
}
}
}
else {
validate16.errors = [{instancePath:instancePath+"/in_avals",schemaPath:"#/properties/in_avals/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs24 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.out_avals !== undefined){
let data11 = data.out_avals;
const _errs28 = errors;
if(errors === _errs28){
if(Array.isArray(data11)){
var valid7 = true;
const len1 = data11.length;
for(let i1=0; i1<len1; i1++){
const _errs30 = errors;
if(typeof data11[i1] !== "string"){
validate16.errors = [{instancePath:instancePath+"/out_avals/" + i1,schemaPath:"#/properties/out_avals/items/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid7 = _errs30 === errors;
if(!valid7){
break;
}
}
}
else {
validate16.errors = [{instancePath:instancePath+"/out_avals",schemaPath:"#/properties/out_avals/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs28 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.n_eqns !== undefined){
let data13 = data.n_eqns;
const _errs32 = errors;
if(!(((typeof data13 == "number") && (!(data13 % 1) && !isNaN(data13))) && (isFinite(data13)))){
validate16.errors = [{instancePath:instancePath+"/n_eqns",schemaPath:"#/properties/n_eqns/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid0 = _errs32 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.custom !== undefined){
const _errs34 = errors;
if(typeof data.custom !== "boolean"){
validate16.errors = [{instancePath:instancePath+"/custom",schemaPath:"#/properties/custom/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid0 = _errs34 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.frames !== undefined){
const _errs36 = errors;
if(typeof data.frames !== "string"){
validate16.errors = [{instancePath:instancePath+"/frames",schemaPath:"#/properties/frames/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs36 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.scope !== undefined){
const _errs38 = errors;
if(typeof data.scope !== "string"){
validate16.errors = [{instancePath:instancePath+"/scope",schemaPath:"#/properties/scope/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs38 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
else {
validate16.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate16.errors = vErrors;
return errors === 0;
}

const schema39 = {"type":"object","required":["src","dst"],"properties":{"src":{"type":"string"},"dst":{"type":"string"},"var":{"type":"string"},"primal":{"type":"string"},"cotangent":{"type":"string"},"cotangent_got":{"$ref":"#/definitions/nullableString"},"mismatch":{"type":"boolean"},"argument":{"$ref":"#/definitions/nullableString","description":"the failing rule's input this edge feeds, spelled as the diagnosis's argument"},"value_error":{"$ref":"#/definitions/nullableString","description":"bwd_value: the cotangent is well-typed but its values differ from the primal's derivative, e.g. rel 0.31"}},"description":"an edge of the forward graph (analysis/graph.py Edge): a variable and its avals"};

function validate18(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((data.src === undefined) && (missing0 = "src")) || ((data.dst === undefined) && (missing0 = "dst"))){
validate18.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.src !== undefined){
const _errs1 = errors;
if(typeof data.src !== "string"){
validate18.errors = [{instancePath:instancePath+"/src",schemaPath:"#/properties/src/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.dst !== undefined){
const _errs3 = errors;
if(typeof data.dst !== "string"){
validate18.errors = [{instancePath:instancePath+"/dst",schemaPath:"#/properties/dst/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.var !== undefined){
const _errs5 = errors;
if(typeof data.var !== "string"){
validate18.errors = [{instancePath:instancePath+"/var",schemaPath:"#/properties/var/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.primal !== undefined){
const _errs7 = errors;
if(typeof data.primal !== "string"){
validate18.errors = [{instancePath:instancePath+"/primal",schemaPath:"#/properties/primal/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs7 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.cotangent !== undefined){
const _errs9 = errors;
if(typeof data.cotangent !== "string"){
validate18.errors = [{instancePath:instancePath+"/cotangent",schemaPath:"#/properties/cotangent/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs9 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.cotangent_got !== undefined){
let data5 = data.cotangent_got;
const _errs11 = errors;
if((typeof data5 !== "string") && (data5 !== null)){
validate18.errors = [{instancePath:instancePath+"/cotangent_got",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs11 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.mismatch !== undefined){
const _errs14 = errors;
if(typeof data.mismatch !== "boolean"){
validate18.errors = [{instancePath:instancePath+"/mismatch",schemaPath:"#/properties/mismatch/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid0 = _errs14 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.argument !== undefined){
let data7 = data.argument;
const _errs16 = errors;
if((typeof data7 !== "string") && (data7 !== null)){
validate18.errors = [{instancePath:instancePath+"/argument",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs16 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.value_error !== undefined){
let data8 = data.value_error;
const _errs19 = errors;
if((typeof data8 !== "string") && (data8 !== null)){
validate18.errors = [{instancePath:instancePath+"/value_error",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs19 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
}
}
}
else {
validate18.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate18.errors = vErrors;
return errors === 0;
}


function validate15(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((data.nodes === undefined) && (missing0 = "nodes")) || ((data.edges === undefined) && (missing0 = "edges"))){
validate15.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.nodes !== undefined){
let data0 = data.nodes;
const _errs1 = errors;
if(errors === _errs1){
if(Array.isArray(data0)){
var valid1 = true;
const len0 = data0.length;
for(let i0=0; i0<len0; i0++){
const _errs3 = errors;
if(!(validate16(data0[i0], {instancePath:instancePath+"/nodes/" + i0,parentData:data0,parentDataProperty:i0,rootData}))){
vErrors = vErrors === null ? validate16.errors : vErrors.concat(validate16.errors);
errors = vErrors.length;
}
var valid1 = _errs3 === errors;
if(!valid1){
break;
}
}
}
else {
validate15.errors = [{instancePath:instancePath+"/nodes",schemaPath:"#/properties/nodes/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.edges !== undefined){
let data2 = data.edges;
const _errs4 = errors;
if(errors === _errs4){
if(Array.isArray(data2)){
var valid2 = true;
const len1 = data2.length;
for(let i1=0; i1<len1; i1++){
const _errs6 = errors;
if(!(validate18(data2[i1], {instancePath:instancePath+"/edges/" + i1,parentData:data2,parentDataProperty:i1,rootData}))){
vErrors = vErrors === null ? validate18.errors : vErrors.concat(validate18.errors);
errors = vErrors.length;
}
var valid2 = _errs6 === errors;
if(!valid2){
break;
}
}
}
else {
validate15.errors = [{instancePath:instancePath+"/edges",schemaPath:"#/properties/edges/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs4 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.note !== undefined){
let data4 = data.note;
const _errs7 = errors;
if((typeof data4 !== "string") && (data4 !== null)){
validate15.errors = [{instancePath:instancePath+"/note",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs7 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
else {
validate15.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate15.errors = vErrors;
return errors === 0;
}

const schema44 = {"type":"object","required":["title","code"],"properties":{"title":{"type":"string"},"code":{"type":"string"},"reason":{"type":"string"},"exact":{"type":"boolean","description":"true only when verified equal to the primal's own derivative"},"verdict":{"$ref":"#/definitions/FixVerdict"},"note":{"type":"string","description":"type-only: what the fix breaks (\"the gradient of `scale` becomes zero\"); unverifiable: why (no oracle, out of time)"}}};
const schema45 = {"description":"what the primal's own derivative says of a fix: verified (equal to it), type-only (well-typed, wrong values), unverifiable (no judge); \"\" when not ranked","enum":["verified","type-only","unverifiable",""]};

function validate21(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((data.title === undefined) && (missing0 = "title")) || ((data.code === undefined) && (missing0 = "code"))){
validate21.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.title !== undefined){
const _errs1 = errors;
if(typeof data.title !== "string"){
validate21.errors = [{instancePath:instancePath+"/title",schemaPath:"#/properties/title/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.code !== undefined){
const _errs3 = errors;
if(typeof data.code !== "string"){
validate21.errors = [{instancePath:instancePath+"/code",schemaPath:"#/properties/code/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.reason !== undefined){
const _errs5 = errors;
if(typeof data.reason !== "string"){
validate21.errors = [{instancePath:instancePath+"/reason",schemaPath:"#/properties/reason/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.exact !== undefined){
const _errs7 = errors;
if(typeof data.exact !== "boolean"){
validate21.errors = [{instancePath:instancePath+"/exact",schemaPath:"#/properties/exact/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid0 = _errs7 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.verdict !== undefined){
let data4 = data.verdict;
const _errs9 = errors;
if(!((((data4 === "verified") || (data4 === "type-only")) || (data4 === "unverifiable")) || (data4 === ""))){
validate21.errors = [{instancePath:instancePath+"/verdict",schemaPath:"#/definitions/FixVerdict/enum",keyword:"enum",params:{allowedValues: schema45.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid0 = _errs9 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.note !== undefined){
const _errs11 = errors;
if(typeof data.note !== "string"){
validate21.errors = [{instancePath:instancePath+"/note",schemaPath:"#/properties/note/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs11 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
else {
validate21.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate21.errors = vErrors;
return errors === 0;
}

const schema47 = {"description":"one row of a diagnosis's expected-vs-got table; expected and got are avals (str_short), a Python type's name, None, or missing (that side has no such leaf)","type":"object","required":["path","expected","got"],"properties":{"path":{"type":"array","items":{"$ref":"#/definitions/KeyEntry"},"description":"the leaf's key path in the cotangent tree, as data"},"argument":{"$ref":"#/definitions/nullableString","description":"the leaf as the user would type it: x, p['w'], out[0]"},"primal":{"$ref":"#/definitions/nullableString"},"expected":{"$ref":"#/definitions/nullableString"},"got":{"$ref":"#/definitions/nullableString"}}};
const schema48 = {"description":"one step of a pytree key path (capture/leaf_paths.py Key): index = a sequence's [0], key = a dict's ['w'] or [1], attr = a field's .w, flat = a custom node's child without a key, other = any other key, spelled as jax.tree_util.keystr spells it","type":"object","required":["kind","key"],"properties":{"kind":{"enum":["index","key","attr","flat","other"]},"key":{"type":["integer","string"]}}};

function validate23(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((((data.path === undefined) && (missing0 = "path")) || ((data.expected === undefined) && (missing0 = "expected"))) || ((data.got === undefined) && (missing0 = "got"))){
validate23.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.path !== undefined){
let data0 = data.path;
const _errs1 = errors;
if(errors === _errs1){
if(Array.isArray(data0)){
var valid1 = true;
const len0 = data0.length;
for(let i0=0; i0<len0; i0++){
let data1 = data0[i0];
const _errs3 = errors;
const _errs4 = errors;
if(errors === _errs4){
if(data1 && typeof data1 == "object" && !Array.isArray(data1)){
let missing1;
if(((data1.kind === undefined) && (missing1 = "kind")) || ((data1.key === undefined) && (missing1 = "key"))){
validate23.errors = [{instancePath:instancePath+"/path/" + i0,schemaPath:"#/definitions/KeyEntry/required",keyword:"required",params:{missingProperty: missing1},message:"must have required property '"+missing1+"'"}];
return false;
}
else {
if(data1.kind !== undefined){
let data2 = data1.kind;
const _errs6 = errors;
if(!(((((data2 === "index") || (data2 === "key")) || (data2 === "attr")) || (data2 === "flat")) || (data2 === "other"))){
validate23.errors = [{instancePath:instancePath+"/path/" + i0+"/kind",schemaPath:"#/definitions/KeyEntry/properties/kind/enum",keyword:"enum",params:{allowedValues: schema48.properties.kind.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid3 = _errs6 === errors;
}
else {
var valid3 = true;
}
if(valid3){
if(data1.key !== undefined){
let data3 = data1.key;
const _errs7 = errors;
if((!(((typeof data3 == "number") && (!(data3 % 1) && !isNaN(data3))) && (isFinite(data3)))) && (typeof data3 !== "string")){
validate23.errors = [{instancePath:instancePath+"/path/" + i0+"/key",schemaPath:"#/definitions/KeyEntry/properties/key/type",keyword:"type",params:{type: schema48.properties.key.type},message:"must be integer,string"}];
return false;
}
var valid3 = _errs7 === errors;
}
else {
var valid3 = true;
}
}
}
}
else {
validate23.errors = [{instancePath:instancePath+"/path/" + i0,schemaPath:"#/definitions/KeyEntry/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
var valid1 = _errs3 === errors;
if(!valid1){
break;
}
}
}
else {
validate23.errors = [{instancePath:instancePath+"/path",schemaPath:"#/properties/path/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.argument !== undefined){
let data4 = data.argument;
const _errs9 = errors;
if((typeof data4 !== "string") && (data4 !== null)){
validate23.errors = [{instancePath:instancePath+"/argument",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs9 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.primal !== undefined){
let data5 = data.primal;
const _errs12 = errors;
if((typeof data5 !== "string") && (data5 !== null)){
validate23.errors = [{instancePath:instancePath+"/primal",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs12 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.expected !== undefined){
let data6 = data.expected;
const _errs15 = errors;
if((typeof data6 !== "string") && (data6 !== null)){
validate23.errors = [{instancePath:instancePath+"/expected",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs15 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.got !== undefined){
let data7 = data.got;
const _errs18 = errors;
if((typeof data7 !== "string") && (data7 !== null)){
validate23.errors = [{instancePath:instancePath+"/got",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs18 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
else {
validate23.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate23.errors = vErrors;
return errors === 0;
}


function validate14(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((((((data.id === undefined) && (missing0 = "id")) || ((data.kind === undefined) && (missing0 = "kind"))) || ((data.severity === undefined) && (missing0 = "severity"))) || ((data.headline === undefined) && (missing0 = "headline"))) || ((data.graph === undefined) && (missing0 = "graph"))) || ((data.fixes === undefined) && (missing0 = "fixes"))){
validate14.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.id !== undefined){
let data0 = data.id;
const _errs1 = errors;
if(errors === _errs1){
if(typeof data0 === "string"){
if(data0.length < 1){
validate14.errors = [{instancePath:instancePath+"/id",schemaPath:"#/properties/id/minLength",keyword:"minLength",params:{limit: 1},message:"must NOT have fewer than 1 characters"}];
return false;
}
}
else {
validate14.errors = [{instancePath:instancePath+"/id",schemaPath:"#/properties/id/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.kind !== undefined){
let data1 = data.kind;
const _errs3 = errors;
if(!((((((((((((((data1 === "bwd_type") || (data1 === "silent_dtype")) || (data1 === "bwd_structure")) || (data1 === "bwd_value")) || (data1 === "fwd_type")) || (data1 === "fwd_structure")) || (data1 === "accumulator_type")) || (data1 === "ref_grad_unbound")) || (data1 === "ref_grad_as_value")) || (data1 === "grad_ref_type")) || (data1 === "vjp_cotangent_type")) || (data1 === "vjp_cotangent_structure")) || (data1 === "nonfinite_cotangent")) || (data1 === "jvp_tangent_type"))){
validate14.errors = [{instancePath:instancePath+"/kind",schemaPath:"#/definitions/diagnosisKind/enum",keyword:"enum",params:{allowedValues: schema17.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.severity !== undefined){
let data2 = data.severity;
const _errs5 = errors;
if(!((data2 === "error") || (data2 === "warning"))){
validate14.errors = [{instancePath:instancePath+"/severity",schemaPath:"#/properties/severity/enum",keyword:"enum",params:{allowedValues: schema16.properties.severity.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.headline !== undefined){
const _errs6 = errors;
if(typeof data.headline !== "string"){
validate14.errors = [{instancePath:instancePath+"/headline",schemaPath:"#/properties/headline/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs6 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.function !== undefined){
let data4 = data.function;
const _errs8 = errors;
if((typeof data4 !== "string") && (data4 !== null)){
validate14.errors = [{instancePath:instancePath+"/function",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs8 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule !== undefined){
let data5 = data.rule;
const _errs11 = errors;
if((typeof data5 !== "string") && (data5 !== null)){
validate14.errors = [{instancePath:instancePath+"/rule",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs11 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.source !== undefined){
let data6 = data.source;
const _errs14 = errors;
if((typeof data6 !== "string") && (data6 !== null)){
validate14.errors = [{instancePath:instancePath+"/source",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs14 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.path !== undefined){
let data7 = data.path;
const _errs17 = errors;
if((typeof data7 !== "string") && (data7 !== null)){
validate14.errors = [{instancePath:instancePath+"/path",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs17 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.expected !== undefined){
let data8 = data.expected;
const _errs20 = errors;
if((typeof data8 !== "string") && (data8 !== null)){
validate14.errors = [{instancePath:instancePath+"/expected",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs20 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.got !== undefined){
let data9 = data.got;
const _errs23 = errors;
if((typeof data9 !== "string") && (data9 !== null)){
validate14.errors = [{instancePath:instancePath+"/got",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs23 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.message !== undefined){
let data10 = data.message;
const _errs26 = errors;
if((typeof data10 !== "string") && (data10 !== null)){
validate14.errors = [{instancePath:instancePath+"/message",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs26 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.node !== undefined){
let data11 = data.node;
const _errs29 = errors;
if((typeof data11 !== "string") && (data11 !== null)){
validate14.errors = [{instancePath:instancePath+"/node",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs29 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source !== undefined){
let data12 = data.rule_source;
const _errs32 = errors;
if((typeof data12 !== "string") && (data12 !== null)){
validate14.errors = [{instancePath:instancePath+"/rule_source",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs32 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.call_site !== undefined){
let data13 = data.call_site;
const _errs35 = errors;
if((typeof data13 !== "string") && (data13 !== null)){
validate14.errors = [{instancePath:instancePath+"/call_site",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs35 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.argument !== undefined){
let data14 = data.argument;
const _errs38 = errors;
if((typeof data14 !== "string") && (data14 !== null)){
validate14.errors = [{instancePath:instancePath+"/argument",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs38 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.primal !== undefined){
let data15 = data.primal;
const _errs41 = errors;
if((typeof data15 !== "string") && (data15 !== null)){
validate14.errors = [{instancePath:instancePath+"/primal",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs41 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.instance !== undefined){
let data16 = data.instance;
const _errs44 = errors;
if((typeof data16 !== "string") && (data16 !== null)){
validate14.errors = [{instancePath:instancePath+"/instance",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs44 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.name_stack !== undefined){
const _errs47 = errors;
if(typeof data.name_stack !== "string"){
validate14.errors = [{instancePath:instancePath+"/name_stack",schemaPath:"#/properties/name_stack/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs47 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.detail !== undefined){
let data18 = data.detail;
const _errs49 = errors;
if((typeof data18 !== "string") && (data18 !== null)){
validate14.errors = [{instancePath:instancePath+"/detail",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs49 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.hijax !== undefined){
const _errs52 = errors;
if(typeof data.hijax !== "boolean"){
validate14.errors = [{instancePath:instancePath+"/hijax",schemaPath:"#/properties/hijax/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid0 = _errs52 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.graph !== undefined){
const _errs54 = errors;
if(!(validate15(data.graph, {instancePath:instancePath+"/graph",parentData:data,parentDataProperty:"graph",rootData}))){
vErrors = vErrors === null ? validate15.errors : vErrors.concat(validate15.errors);
errors = vErrors.length;
}
var valid0 = _errs54 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.fixes !== undefined){
let data21 = data.fixes;
const _errs55 = errors;
if(errors === _errs55){
if(Array.isArray(data21)){
var valid16 = true;
const len0 = data21.length;
for(let i0=0; i0<len0; i0++){
const _errs57 = errors;
if(!(validate21(data21[i0], {instancePath:instancePath+"/fixes/" + i0,parentData:data21,parentDataProperty:i0,rootData}))){
vErrors = vErrors === null ? validate21.errors : vErrors.concat(validate21.errors);
errors = vErrors.length;
}
var valid16 = _errs57 === errors;
if(!valid16){
break;
}
}
}
else {
validate14.errors = [{instancePath:instancePath+"/fixes",schemaPath:"#/properties/fixes/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs55 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.leaf_errors !== undefined){
let data23 = data.leaf_errors;
const _errs58 = errors;
if(errors === _errs58){
if(Array.isArray(data23)){
var valid17 = true;
const len1 = data23.length;
for(let i1=0; i1<len1; i1++){
let data24 = data23[i1];
const _errs60 = errors;
const _errs61 = errors;
if(errors === _errs61){
if(data24 && typeof data24 == "object" && !Array.isArray(data24)){
let missing1;
if((((data24.name === undefined) && (missing1 = "name")) || ((data24.max_abs === undefined) && (missing1 = "max_abs"))) || ((data24.ok === undefined) && (missing1 = "ok"))){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1,schemaPath:"#/definitions/LeafError/required",keyword:"required",params:{missingProperty: missing1},message:"must have required property '"+missing1+"'"}];
return false;
}
else {
if(data24.index !== undefined){
let data25 = data24.index;
const _errs63 = errors;
if(!(((typeof data25 == "number") && (!(data25 % 1) && !isNaN(data25))) && (isFinite(data25)))){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/index",schemaPath:"#/definitions/LeafError/properties/index/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid19 = _errs63 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.name !== undefined){
const _errs65 = errors;
if(typeof data24.name !== "string"){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/name",schemaPath:"#/definitions/LeafError/properties/name/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid19 = _errs65 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.max_abs !== undefined){
let data27 = data24.max_abs;
const _errs67 = errors;
if(!((typeof data27 == "number") && (isFinite(data27)))){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/max_abs",schemaPath:"#/definitions/LeafError/properties/max_abs/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs67 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.max_rel !== undefined){
let data28 = data24.max_rel;
const _errs69 = errors;
if((!((typeof data28 == "number") && (isFinite(data28)))) && (data28 !== null)){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/max_rel",schemaPath:"#/definitions/LeafError/properties/max_rel/type",keyword:"type",params:{type: schema46.properties.max_rel.type},message:"must be number,null"}];
return false;
}
var valid19 = _errs69 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.where !== undefined){
let data29 = data24.where;
const _errs71 = errors;
if(errors === _errs71){
if(Array.isArray(data29)){
var valid20 = true;
const len2 = data29.length;
for(let i2=0; i2<len2; i2++){
let data30 = data29[i2];
const _errs73 = errors;
if(!(((typeof data30 == "number") && (!(data30 % 1) && !isNaN(data30))) && (isFinite(data30)))){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/where/" + i2,schemaPath:"#/definitions/LeafError/properties/where/items/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid20 = _errs73 === errors;
if(!valid20){
break;
}
}
}
else {
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/where",schemaPath:"#/definitions/LeafError/properties/where/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid19 = _errs71 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.reference_zero !== undefined){
const _errs75 = errors;
if(typeof data24.reference_zero !== "boolean"){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/reference_zero",schemaPath:"#/definitions/LeafError/properties/reference_zero/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs75 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.got_zero !== undefined){
const _errs77 = errors;
if(typeof data24.got_zero !== "boolean"){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/got_zero",schemaPath:"#/definitions/LeafError/properties/got_zero/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs77 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.judged !== undefined){
const _errs79 = errors;
if(typeof data24.judged !== "boolean"){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/judged",schemaPath:"#/definitions/LeafError/properties/judged/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs79 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.ok !== undefined){
const _errs81 = errors;
if(typeof data24.ok !== "boolean"){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/ok",schemaPath:"#/definitions/LeafError/properties/ok/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs81 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.reference_at !== undefined){
let data35 = data24.reference_at;
const _errs83 = errors;
if(!((typeof data35 == "number") && (isFinite(data35)))){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/reference_at",schemaPath:"#/definitions/LeafError/properties/reference_at/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs83 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.got_at !== undefined){
let data36 = data24.got_at;
const _errs85 = errors;
if(!((typeof data36 == "number") && (isFinite(data36)))){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/got_at",schemaPath:"#/definitions/LeafError/properties/got_at/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs85 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.scale !== undefined){
let data37 = data24.scale;
const _errs87 = errors;
if(!((typeof data37 == "number") && (isFinite(data37)))){
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/scale",schemaPath:"#/definitions/LeafError/properties/scale/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs87 === errors;
}
else {
var valid19 = true;
}
}
}
}
}
}
}
}
}
}
}
}
}
}
else {
validate14.errors = [{instancePath:instancePath+"/leaf_errors/" + i1,schemaPath:"#/definitions/LeafError/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
var valid17 = _errs60 === errors;
if(!valid17){
break;
}
}
}
else {
validate14.errors = [{instancePath:instancePath+"/leaf_errors",schemaPath:"#/properties/leaf_errors/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs58 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.leaves !== undefined){
let data38 = data.leaves;
const _errs89 = errors;
if(errors === _errs89){
if(Array.isArray(data38)){
var valid21 = true;
const len3 = data38.length;
for(let i3=0; i3<len3; i3++){
const _errs91 = errors;
if(!(validate23(data38[i3], {instancePath:instancePath+"/leaves/" + i3,parentData:data38,parentDataProperty:i3,rootData}))){
vErrors = vErrors === null ? validate23.errors : vErrors.concat(validate23.errors);
errors = vErrors.length;
}
var valid21 = _errs91 === errors;
if(!valid21){
break;
}
}
}
else {
validate14.errors = [{instancePath:instancePath+"/leaves",schemaPath:"#/properties/leaves/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs89 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_text !== undefined){
let data40 = data.rule_source_text;
const _errs92 = errors;
if((typeof data40 !== "string") && (data40 !== null)){
validate14.errors = [{instancePath:instancePath+"/rule_source_text",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs92 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_start !== undefined){
let data41 = data.rule_source_start;
const _errs95 = errors;
if((!(((typeof data41 == "number") && (!(data41 % 1) && !isNaN(data41))) && (isFinite(data41)))) && (data41 !== null)){
validate14.errors = [{instancePath:instancePath+"/rule_source_start",schemaPath:"#/properties/rule_source_start/type",keyword:"type",params:{type: schema16.properties.rule_source_start.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs95 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_end !== undefined){
let data42 = data.rule_source_end;
const _errs97 = errors;
if((!(((typeof data42 == "number") && (!(data42 % 1) && !isNaN(data42))) && (isFinite(data42)))) && (data42 !== null)){
validate14.errors = [{instancePath:instancePath+"/rule_source_end",schemaPath:"#/properties/rule_source_end/type",keyword:"type",params:{type: schema16.properties.rule_source_end.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs97 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_bad_line !== undefined){
let data43 = data.rule_source_bad_line;
const _errs99 = errors;
if((!(((typeof data43 == "number") && (!(data43 % 1) && !isNaN(data43))) && (isFinite(data43)))) && (data43 !== null)){
validate14.errors = [{instancePath:instancePath+"/rule_source_bad_line",schemaPath:"#/properties/rule_source_bad_line/type",keyword:"type",params:{type: schema16.properties.rule_source_bad_line.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs99 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.cell_index !== undefined){
let data44 = data.cell_index;
const _errs101 = errors;
if((!(((typeof data44 == "number") && (!(data44 % 1) && !isNaN(data44))) && (isFinite(data44)))) && (data44 !== null)){
validate14.errors = [{instancePath:instancePath+"/cell_index",schemaPath:"#/properties/cell_index/type",keyword:"type",params:{type: schema16.properties.cell_index.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs101 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
else {
validate14.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate14.errors = vErrors;
return errors === 0;
}

const schema54 = {"type":"object","required":["svg","expanded"],"properties":{"svg":{"type":"string","description":"graphviz SVG; each box is a <g> whose id attribute is the graph node or cluster id; clusters have class vjpviz-cluster, an opened equation's body is <g class=\"cluster\" id=\"body:<node id>\">, the failing box has class vjpviz-node-failed"},"expanded":{"type":"array","items":{"type":"string"}},"failed_node":{"$ref":"#/definitions/nullableString"},"shown":{"type":"integer"},"total":{"type":"integer"},"collapsed":{"type":"array","items":{"type":"string"}},"boxes":{"type":"integer","description":"boxes laid out"}}};

function validate26(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((data.svg === undefined) && (missing0 = "svg")) || ((data.expanded === undefined) && (missing0 = "expanded"))){
validate26.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.svg !== undefined){
const _errs1 = errors;
if(typeof data.svg !== "string"){
validate26.errors = [{instancePath:instancePath+"/svg",schemaPath:"#/properties/svg/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.expanded !== undefined){
let data1 = data.expanded;
const _errs3 = errors;
if(errors === _errs3){
if(Array.isArray(data1)){
var valid1 = true;
const len0 = data1.length;
for(let i0=0; i0<len0; i0++){
const _errs5 = errors;
if(typeof data1[i0] !== "string"){
validate26.errors = [{instancePath:instancePath+"/expanded/" + i0,schemaPath:"#/properties/expanded/items/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid1 = _errs5 === errors;
if(!valid1){
break;
}
}
}
else {
validate26.errors = [{instancePath:instancePath+"/expanded",schemaPath:"#/properties/expanded/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.failed_node !== undefined){
let data3 = data.failed_node;
const _errs7 = errors;
if((typeof data3 !== "string") && (data3 !== null)){
validate26.errors = [{instancePath:instancePath+"/failed_node",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs7 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.shown !== undefined){
let data4 = data.shown;
const _errs10 = errors;
if(!(((typeof data4 == "number") && (!(data4 % 1) && !isNaN(data4))) && (isFinite(data4)))){
validate26.errors = [{instancePath:instancePath+"/shown",schemaPath:"#/properties/shown/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid0 = _errs10 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.total !== undefined){
let data5 = data.total;
const _errs12 = errors;
if(!(((typeof data5 == "number") && (!(data5 % 1) && !isNaN(data5))) && (isFinite(data5)))){
validate26.errors = [{instancePath:instancePath+"/total",schemaPath:"#/properties/total/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid0 = _errs12 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.collapsed !== undefined){
let data6 = data.collapsed;
const _errs14 = errors;
if(errors === _errs14){
if(Array.isArray(data6)){
var valid3 = true;
const len1 = data6.length;
for(let i1=0; i1<len1; i1++){
const _errs16 = errors;
if(typeof data6[i1] !== "string"){
validate26.errors = [{instancePath:instancePath+"/collapsed/" + i1,schemaPath:"#/properties/collapsed/items/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid3 = _errs16 === errors;
if(!valid3){
break;
}
}
}
else {
validate26.errors = [{instancePath:instancePath+"/collapsed",schemaPath:"#/properties/collapsed/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs14 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.boxes !== undefined){
let data8 = data.boxes;
const _errs18 = errors;
if(!(((typeof data8 == "number") && (!(data8 % 1) && !isNaN(data8))) && (isFinite(data8)))){
validate26.errors = [{instancePath:instancePath+"/boxes",schemaPath:"#/properties/boxes/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid0 = _errs18 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
}
else {
validate26.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate26.errors = vErrors;
return errors === 0;
}


function validate42(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((((data.v === undefined) && (missing0 = "v")) || ((data.type === undefined) && (missing0 = "type"))) || ((data.diagnosis === undefined) && (missing0 = "diagnosis"))){
validate42.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.v !== undefined){
const _errs1 = errors;
if(1 !== data.v){
validate42.errors = [{instancePath:instancePath+"/v",schemaPath:"#/definitions/version/const",keyword:"const",params:{allowedValue: 1},message:"must be equal to constant"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.type !== undefined){
const _errs3 = errors;
if("diagnosis" !== data.type){
validate42.errors = [{instancePath:instancePath+"/type",schemaPath:"#/properties/type/const",keyword:"const",params:{allowedValue: "diagnosis"},message:"must be equal to constant"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.diagnosis !== undefined){
const _errs4 = errors;
if(!(validate14(data.diagnosis, {instancePath:instancePath+"/diagnosis",parentData:data,parentDataProperty:"diagnosis",rootData}))){
vErrors = vErrors === null ? validate14.errors : vErrors.concat(validate14.errors);
errors = vErrors.length;
}
var valid0 = _errs4 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.view !== undefined){
const _errs5 = errors;
if(!(validate26(data.view, {instancePath:instancePath+"/view",parentData:data,parentDataProperty:"view",rootData}))){
vErrors = vErrors === null ? validate26.errors : vErrors.concat(validate26.errors);
errors = vErrors.length;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
else {
validate42.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate42.errors = vErrors;
return errors === 0;
}

export const FixesMessage = validate45;
const schema56 = {"description":"kernel -> panel: the fixes of a diagnosis already pushed, judged after it was delivered (the diagnosis is pushed as soon as its graph exists); they replace that diagnosis's fixes.","type":"object","required":["v","type","diagnosis_id","fixes"],"properties":{"v":{"$ref":"#/definitions/version"},"type":{"const":"fixes"},"diagnosis_id":{"$ref":"#/definitions/token"},"fixes":{"type":"array","items":{"$ref":"#/definitions/Fix"}}},"additionalProperties":false};
const schema58 = {"type":"string","maxLength":256,"description":"an id one side made up: request_id, diagnosis_id"};

function validate45(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((((data.v === undefined) && (missing0 = "v")) || ((data.type === undefined) && (missing0 = "type"))) || ((data.diagnosis_id === undefined) && (missing0 = "diagnosis_id"))) || ((data.fixes === undefined) && (missing0 = "fixes"))){
validate45.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
const _errs1 = errors;
for(const key0 in data){
if(!((((key0 === "v") || (key0 === "type")) || (key0 === "diagnosis_id")) || (key0 === "fixes"))){
validate45.errors = [{instancePath,schemaPath:"#/additionalProperties",keyword:"additionalProperties",params:{additionalProperty: key0},message:"must NOT have additional properties"}];
return false;
break;
}
}
if(_errs1 === errors){
if(data.v !== undefined){
const _errs2 = errors;
if(1 !== data.v){
validate45.errors = [{instancePath:instancePath+"/v",schemaPath:"#/definitions/version/const",keyword:"const",params:{allowedValue: 1},message:"must be equal to constant"}];
return false;
}
var valid0 = _errs2 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.type !== undefined){
const _errs4 = errors;
if("fixes" !== data.type){
validate45.errors = [{instancePath:instancePath+"/type",schemaPath:"#/properties/type/const",keyword:"const",params:{allowedValue: "fixes"},message:"must be equal to constant"}];
return false;
}
var valid0 = _errs4 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.diagnosis_id !== undefined){
let data2 = data.diagnosis_id;
const _errs5 = errors;
const _errs6 = errors;
if(errors === _errs6){
if(typeof data2 === "string"){
if(data2.length > 256){
validate45.errors = [{instancePath:instancePath+"/diagnosis_id",schemaPath:"#/definitions/token/maxLength",keyword:"maxLength",params:{limit: 256},message:"must NOT have more than 256 characters"}];
return false;
}
}
else {
validate45.errors = [{instancePath:instancePath+"/diagnosis_id",schemaPath:"#/definitions/token/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.fixes !== undefined){
let data3 = data.fixes;
const _errs8 = errors;
if(errors === _errs8){
if(Array.isArray(data3)){
var valid3 = true;
const len0 = data3.length;
for(let i0=0; i0<len0; i0++){
const _errs10 = errors;
if(!(validate21(data3[i0], {instancePath:instancePath+"/fixes/" + i0,parentData:data3,parentDataProperty:i0,rootData}))){
vErrors = vErrors === null ? validate21.errors : vErrors.concat(validate21.errors);
errors = vErrors.length;
}
var valid3 = _errs10 === errors;
if(!valid3){
break;
}
}
}
else {
validate45.errors = [{instancePath:instancePath+"/fixes",schemaPath:"#/properties/fixes/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs8 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
else {
validate45.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate45.errors = vErrors;
return errors === 0;
}

export const ReplyMessage = validate47;
const schema67 = {"description":"kernel -> panel: the one answer to a message on a vjpviz comm. ok=false carries an error string; a message the kernel cannot parse gets request_id \"\" unless it had a string request_id within the token limit, which is echoed.","type":"object","required":["v","type","request_id","ok"],"properties":{"v":{"$ref":"#/definitions/version"},"type":{"const":"reply"},"request_id":{"type":"string"},"ok":{"type":"boolean"},"result":{},"error":{"type":"string"}},"if":{"properties":{"ok":{"const":false}}},"then":{"required":["error"]}};

function validate47(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
const _errs1 = errors;
let valid0 = true;
const _errs2 = errors;
if(data && typeof data == "object" && !Array.isArray(data)){
if(data.ok !== undefined){
if(false !== data.ok){
const err0 = {};
if(vErrors === null){
vErrors = [err0];
}
else {
vErrors.push(err0);
}
errors++;
}
}
}
var _valid0 = _errs2 === errors;
errors = _errs1;
if(vErrors !== null){
if(_errs1){
vErrors.length = _errs1;
}
else {
vErrors = null;
}
}
if(_valid0){
const _errs4 = errors;
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((data.error === undefined) && (missing0 = "error")){
validate47.errors = [{instancePath,schemaPath:"#/then/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
}
var _valid0 = _errs4 === errors;
valid0 = _valid0;
}
if(!valid0){
const err1 = {instancePath,schemaPath:"#/if",keyword:"if",params:{failingKeyword: "then"},message:"must match \"then\" schema"};
if(vErrors === null){
vErrors = [err1];
}
else {
vErrors.push(err1);
}
errors++;
validate47.errors = vErrors;
return false;
}
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing1;
if(((((data.v === undefined) && (missing1 = "v")) || ((data.type === undefined) && (missing1 = "type"))) || ((data.request_id === undefined) && (missing1 = "request_id"))) || ((data.ok === undefined) && (missing1 = "ok"))){
validate47.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing1},message:"must have required property '"+missing1+"'"}];
return false;
}
else {
if(data.v !== undefined){
const _errs5 = errors;
if(1 !== data.v){
validate47.errors = [{instancePath:instancePath+"/v",schemaPath:"#/definitions/version/const",keyword:"const",params:{allowedValue: 1},message:"must be equal to constant"}];
return false;
}
var valid2 = _errs5 === errors;
}
else {
var valid2 = true;
}
if(valid2){
if(data.type !== undefined){
const _errs7 = errors;
if("reply" !== data.type){
validate47.errors = [{instancePath:instancePath+"/type",schemaPath:"#/properties/type/const",keyword:"const",params:{allowedValue: "reply"},message:"must be equal to constant"}];
return false;
}
var valid2 = _errs7 === errors;
}
else {
var valid2 = true;
}
if(valid2){
if(data.request_id !== undefined){
const _errs8 = errors;
if(typeof data.request_id !== "string"){
validate47.errors = [{instancePath:instancePath+"/request_id",schemaPath:"#/properties/request_id/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid2 = _errs8 === errors;
}
else {
var valid2 = true;
}
if(valid2){
if(data.ok !== undefined){
const _errs10 = errors;
if(typeof data.ok !== "boolean"){
validate47.errors = [{instancePath:instancePath+"/ok",schemaPath:"#/properties/ok/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid2 = _errs10 === errors;
}
else {
var valid2 = true;
}
if(valid2){
if(data.error !== undefined){
const _errs12 = errors;
if(typeof data.error !== "string"){
validate47.errors = [{instancePath:instancePath+"/error",schemaPath:"#/properties/error/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid2 = _errs12 === errors;
}
else {
var valid2 = true;
}
}
}
}
}
}
}
else {
validate47.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate47.errors = vErrors;
return errors === 0;
}

export const Diagnosis = validate48;

function validate48(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((((((data.id === undefined) && (missing0 = "id")) || ((data.kind === undefined) && (missing0 = "kind"))) || ((data.severity === undefined) && (missing0 = "severity"))) || ((data.headline === undefined) && (missing0 = "headline"))) || ((data.graph === undefined) && (missing0 = "graph"))) || ((data.fixes === undefined) && (missing0 = "fixes"))){
validate48.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.id !== undefined){
let data0 = data.id;
const _errs1 = errors;
if(errors === _errs1){
if(typeof data0 === "string"){
if(data0.length < 1){
validate48.errors = [{instancePath:instancePath+"/id",schemaPath:"#/properties/id/minLength",keyword:"minLength",params:{limit: 1},message:"must NOT have fewer than 1 characters"}];
return false;
}
}
else {
validate48.errors = [{instancePath:instancePath+"/id",schemaPath:"#/properties/id/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.kind !== undefined){
let data1 = data.kind;
const _errs3 = errors;
if(!((((((((((((((data1 === "bwd_type") || (data1 === "silent_dtype")) || (data1 === "bwd_structure")) || (data1 === "bwd_value")) || (data1 === "fwd_type")) || (data1 === "fwd_structure")) || (data1 === "accumulator_type")) || (data1 === "ref_grad_unbound")) || (data1 === "ref_grad_as_value")) || (data1 === "grad_ref_type")) || (data1 === "vjp_cotangent_type")) || (data1 === "vjp_cotangent_structure")) || (data1 === "nonfinite_cotangent")) || (data1 === "jvp_tangent_type"))){
validate48.errors = [{instancePath:instancePath+"/kind",schemaPath:"#/definitions/diagnosisKind/enum",keyword:"enum",params:{allowedValues: schema17.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.severity !== undefined){
let data2 = data.severity;
const _errs5 = errors;
if(!((data2 === "error") || (data2 === "warning"))){
validate48.errors = [{instancePath:instancePath+"/severity",schemaPath:"#/properties/severity/enum",keyword:"enum",params:{allowedValues: schema16.properties.severity.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.headline !== undefined){
const _errs6 = errors;
if(typeof data.headline !== "string"){
validate48.errors = [{instancePath:instancePath+"/headline",schemaPath:"#/properties/headline/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs6 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.function !== undefined){
let data4 = data.function;
const _errs8 = errors;
if((typeof data4 !== "string") && (data4 !== null)){
validate48.errors = [{instancePath:instancePath+"/function",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs8 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule !== undefined){
let data5 = data.rule;
const _errs11 = errors;
if((typeof data5 !== "string") && (data5 !== null)){
validate48.errors = [{instancePath:instancePath+"/rule",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs11 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.source !== undefined){
let data6 = data.source;
const _errs14 = errors;
if((typeof data6 !== "string") && (data6 !== null)){
validate48.errors = [{instancePath:instancePath+"/source",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs14 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.path !== undefined){
let data7 = data.path;
const _errs17 = errors;
if((typeof data7 !== "string") && (data7 !== null)){
validate48.errors = [{instancePath:instancePath+"/path",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs17 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.expected !== undefined){
let data8 = data.expected;
const _errs20 = errors;
if((typeof data8 !== "string") && (data8 !== null)){
validate48.errors = [{instancePath:instancePath+"/expected",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs20 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.got !== undefined){
let data9 = data.got;
const _errs23 = errors;
if((typeof data9 !== "string") && (data9 !== null)){
validate48.errors = [{instancePath:instancePath+"/got",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs23 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.message !== undefined){
let data10 = data.message;
const _errs26 = errors;
if((typeof data10 !== "string") && (data10 !== null)){
validate48.errors = [{instancePath:instancePath+"/message",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs26 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.node !== undefined){
let data11 = data.node;
const _errs29 = errors;
if((typeof data11 !== "string") && (data11 !== null)){
validate48.errors = [{instancePath:instancePath+"/node",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs29 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source !== undefined){
let data12 = data.rule_source;
const _errs32 = errors;
if((typeof data12 !== "string") && (data12 !== null)){
validate48.errors = [{instancePath:instancePath+"/rule_source",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs32 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.call_site !== undefined){
let data13 = data.call_site;
const _errs35 = errors;
if((typeof data13 !== "string") && (data13 !== null)){
validate48.errors = [{instancePath:instancePath+"/call_site",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs35 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.argument !== undefined){
let data14 = data.argument;
const _errs38 = errors;
if((typeof data14 !== "string") && (data14 !== null)){
validate48.errors = [{instancePath:instancePath+"/argument",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs38 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.primal !== undefined){
let data15 = data.primal;
const _errs41 = errors;
if((typeof data15 !== "string") && (data15 !== null)){
validate48.errors = [{instancePath:instancePath+"/primal",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs41 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.instance !== undefined){
let data16 = data.instance;
const _errs44 = errors;
if((typeof data16 !== "string") && (data16 !== null)){
validate48.errors = [{instancePath:instancePath+"/instance",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs44 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.name_stack !== undefined){
const _errs47 = errors;
if(typeof data.name_stack !== "string"){
validate48.errors = [{instancePath:instancePath+"/name_stack",schemaPath:"#/properties/name_stack/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs47 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.detail !== undefined){
let data18 = data.detail;
const _errs49 = errors;
if((typeof data18 !== "string") && (data18 !== null)){
validate48.errors = [{instancePath:instancePath+"/detail",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs49 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.hijax !== undefined){
const _errs52 = errors;
if(typeof data.hijax !== "boolean"){
validate48.errors = [{instancePath:instancePath+"/hijax",schemaPath:"#/properties/hijax/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid0 = _errs52 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.graph !== undefined){
const _errs54 = errors;
if(!(validate15(data.graph, {instancePath:instancePath+"/graph",parentData:data,parentDataProperty:"graph",rootData}))){
vErrors = vErrors === null ? validate15.errors : vErrors.concat(validate15.errors);
errors = vErrors.length;
}
var valid0 = _errs54 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.fixes !== undefined){
let data21 = data.fixes;
const _errs55 = errors;
if(errors === _errs55){
if(Array.isArray(data21)){
var valid16 = true;
const len0 = data21.length;
for(let i0=0; i0<len0; i0++){
const _errs57 = errors;
if(!(validate21(data21[i0], {instancePath:instancePath+"/fixes/" + i0,parentData:data21,parentDataProperty:i0,rootData}))){
vErrors = vErrors === null ? validate21.errors : vErrors.concat(validate21.errors);
errors = vErrors.length;
}
var valid16 = _errs57 === errors;
if(!valid16){
break;
}
}
}
else {
validate48.errors = [{instancePath:instancePath+"/fixes",schemaPath:"#/properties/fixes/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs55 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.leaf_errors !== undefined){
let data23 = data.leaf_errors;
const _errs58 = errors;
if(errors === _errs58){
if(Array.isArray(data23)){
var valid17 = true;
const len1 = data23.length;
for(let i1=0; i1<len1; i1++){
let data24 = data23[i1];
const _errs60 = errors;
const _errs61 = errors;
if(errors === _errs61){
if(data24 && typeof data24 == "object" && !Array.isArray(data24)){
let missing1;
if((((data24.name === undefined) && (missing1 = "name")) || ((data24.max_abs === undefined) && (missing1 = "max_abs"))) || ((data24.ok === undefined) && (missing1 = "ok"))){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1,schemaPath:"#/definitions/LeafError/required",keyword:"required",params:{missingProperty: missing1},message:"must have required property '"+missing1+"'"}];
return false;
}
else {
if(data24.index !== undefined){
let data25 = data24.index;
const _errs63 = errors;
if(!(((typeof data25 == "number") && (!(data25 % 1) && !isNaN(data25))) && (isFinite(data25)))){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/index",schemaPath:"#/definitions/LeafError/properties/index/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid19 = _errs63 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.name !== undefined){
const _errs65 = errors;
if(typeof data24.name !== "string"){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/name",schemaPath:"#/definitions/LeafError/properties/name/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid19 = _errs65 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.max_abs !== undefined){
let data27 = data24.max_abs;
const _errs67 = errors;
if(!((typeof data27 == "number") && (isFinite(data27)))){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/max_abs",schemaPath:"#/definitions/LeafError/properties/max_abs/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs67 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.max_rel !== undefined){
let data28 = data24.max_rel;
const _errs69 = errors;
if((!((typeof data28 == "number") && (isFinite(data28)))) && (data28 !== null)){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/max_rel",schemaPath:"#/definitions/LeafError/properties/max_rel/type",keyword:"type",params:{type: schema46.properties.max_rel.type},message:"must be number,null"}];
return false;
}
var valid19 = _errs69 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.where !== undefined){
let data29 = data24.where;
const _errs71 = errors;
if(errors === _errs71){
if(Array.isArray(data29)){
var valid20 = true;
const len2 = data29.length;
for(let i2=0; i2<len2; i2++){
let data30 = data29[i2];
const _errs73 = errors;
if(!(((typeof data30 == "number") && (!(data30 % 1) && !isNaN(data30))) && (isFinite(data30)))){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/where/" + i2,schemaPath:"#/definitions/LeafError/properties/where/items/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid20 = _errs73 === errors;
if(!valid20){
break;
}
}
}
else {
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/where",schemaPath:"#/definitions/LeafError/properties/where/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid19 = _errs71 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.reference_zero !== undefined){
const _errs75 = errors;
if(typeof data24.reference_zero !== "boolean"){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/reference_zero",schemaPath:"#/definitions/LeafError/properties/reference_zero/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs75 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.got_zero !== undefined){
const _errs77 = errors;
if(typeof data24.got_zero !== "boolean"){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/got_zero",schemaPath:"#/definitions/LeafError/properties/got_zero/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs77 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.judged !== undefined){
const _errs79 = errors;
if(typeof data24.judged !== "boolean"){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/judged",schemaPath:"#/definitions/LeafError/properties/judged/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs79 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.ok !== undefined){
const _errs81 = errors;
if(typeof data24.ok !== "boolean"){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/ok",schemaPath:"#/definitions/LeafError/properties/ok/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid19 = _errs81 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.reference_at !== undefined){
let data35 = data24.reference_at;
const _errs83 = errors;
if(!((typeof data35 == "number") && (isFinite(data35)))){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/reference_at",schemaPath:"#/definitions/LeafError/properties/reference_at/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs83 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.got_at !== undefined){
let data36 = data24.got_at;
const _errs85 = errors;
if(!((typeof data36 == "number") && (isFinite(data36)))){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/got_at",schemaPath:"#/definitions/LeafError/properties/got_at/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs85 === errors;
}
else {
var valid19 = true;
}
if(valid19){
if(data24.scale !== undefined){
let data37 = data24.scale;
const _errs87 = errors;
if(!((typeof data37 == "number") && (isFinite(data37)))){
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1+"/scale",schemaPath:"#/definitions/LeafError/properties/scale/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid19 = _errs87 === errors;
}
else {
var valid19 = true;
}
}
}
}
}
}
}
}
}
}
}
}
}
}
else {
validate48.errors = [{instancePath:instancePath+"/leaf_errors/" + i1,schemaPath:"#/definitions/LeafError/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
var valid17 = _errs60 === errors;
if(!valid17){
break;
}
}
}
else {
validate48.errors = [{instancePath:instancePath+"/leaf_errors",schemaPath:"#/properties/leaf_errors/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs58 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.leaves !== undefined){
let data38 = data.leaves;
const _errs89 = errors;
if(errors === _errs89){
if(Array.isArray(data38)){
var valid21 = true;
const len3 = data38.length;
for(let i3=0; i3<len3; i3++){
const _errs91 = errors;
if(!(validate23(data38[i3], {instancePath:instancePath+"/leaves/" + i3,parentData:data38,parentDataProperty:i3,rootData}))){
vErrors = vErrors === null ? validate23.errors : vErrors.concat(validate23.errors);
errors = vErrors.length;
}
var valid21 = _errs91 === errors;
if(!valid21){
break;
}
}
}
else {
validate48.errors = [{instancePath:instancePath+"/leaves",schemaPath:"#/properties/leaves/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs89 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_text !== undefined){
let data40 = data.rule_source_text;
const _errs92 = errors;
if((typeof data40 !== "string") && (data40 !== null)){
validate48.errors = [{instancePath:instancePath+"/rule_source_text",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs92 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_start !== undefined){
let data41 = data.rule_source_start;
const _errs95 = errors;
if((!(((typeof data41 == "number") && (!(data41 % 1) && !isNaN(data41))) && (isFinite(data41)))) && (data41 !== null)){
validate48.errors = [{instancePath:instancePath+"/rule_source_start",schemaPath:"#/properties/rule_source_start/type",keyword:"type",params:{type: schema16.properties.rule_source_start.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs95 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_end !== undefined){
let data42 = data.rule_source_end;
const _errs97 = errors;
if((!(((typeof data42 == "number") && (!(data42 % 1) && !isNaN(data42))) && (isFinite(data42)))) && (data42 !== null)){
validate48.errors = [{instancePath:instancePath+"/rule_source_end",schemaPath:"#/properties/rule_source_end/type",keyword:"type",params:{type: schema16.properties.rule_source_end.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs97 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.rule_source_bad_line !== undefined){
let data43 = data.rule_source_bad_line;
const _errs99 = errors;
if((!(((typeof data43 == "number") && (!(data43 % 1) && !isNaN(data43))) && (isFinite(data43)))) && (data43 !== null)){
validate48.errors = [{instancePath:instancePath+"/rule_source_bad_line",schemaPath:"#/properties/rule_source_bad_line/type",keyword:"type",params:{type: schema16.properties.rule_source_bad_line.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs99 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.cell_index !== undefined){
let data44 = data.cell_index;
const _errs101 = errors;
if((!(((typeof data44 == "number") && (!(data44 % 1) && !isNaN(data44))) && (isFinite(data44)))) && (data44 !== null)){
validate48.errors = [{instancePath:instancePath+"/cell_index",schemaPath:"#/properties/cell_index/type",keyword:"type",params:{type: schema16.properties.cell_index.type},message:"must be integer,null"}];
return false;
}
var valid0 = _errs101 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
else {
validate48.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate48.errors = vErrors;
return errors === 0;
}

export const HistoryResult = validate52;
const schema96 = {"description":"the diagnoses this kernel keeps, oldest first; the panel validates each one on its own","type":"object","required":["diagnoses"],"properties":{"diagnoses":{"type":"array","items":{"type":"object"}}}};

function validate52(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((data.diagnoses === undefined) && (missing0 = "diagnoses")){
validate52.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.diagnoses !== undefined){
let data0 = data.diagnoses;
const _errs1 = errors;
if(errors === _errs1){
if(Array.isArray(data0)){
var valid1 = true;
const len0 = data0.length;
for(let i0=0; i0<len0; i0++){
let data1 = data0[i0];
const _errs3 = errors;
if(!(data1 && typeof data1 == "object" && !Array.isArray(data1))){
validate52.errors = [{instancePath:instancePath+"/diagnoses/" + i0,schemaPath:"#/properties/diagnoses/items/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
var valid1 = _errs3 === errors;
if(!valid1){
break;
}
}
}
else {
validate52.errors = [{instancePath:instancePath+"/diagnoses",schemaPath:"#/properties/diagnoses/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
}
}
}
else {
validate52.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate52.errors = vErrors;
return errors === 0;
}

export const View = validate53;

function validate53(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((data.svg === undefined) && (missing0 = "svg")) || ((data.expanded === undefined) && (missing0 = "expanded"))){
validate53.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.svg !== undefined){
const _errs1 = errors;
if(typeof data.svg !== "string"){
validate53.errors = [{instancePath:instancePath+"/svg",schemaPath:"#/properties/svg/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.expanded !== undefined){
let data1 = data.expanded;
const _errs3 = errors;
if(errors === _errs3){
if(Array.isArray(data1)){
var valid1 = true;
const len0 = data1.length;
for(let i0=0; i0<len0; i0++){
const _errs5 = errors;
if(typeof data1[i0] !== "string"){
validate53.errors = [{instancePath:instancePath+"/expanded/" + i0,schemaPath:"#/properties/expanded/items/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid1 = _errs5 === errors;
if(!valid1){
break;
}
}
}
else {
validate53.errors = [{instancePath:instancePath+"/expanded",schemaPath:"#/properties/expanded/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.failed_node !== undefined){
let data3 = data.failed_node;
const _errs7 = errors;
if((typeof data3 !== "string") && (data3 !== null)){
validate53.errors = [{instancePath:instancePath+"/failed_node",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs7 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.shown !== undefined){
let data4 = data.shown;
const _errs10 = errors;
if(!(((typeof data4 == "number") && (!(data4 % 1) && !isNaN(data4))) && (isFinite(data4)))){
validate53.errors = [{instancePath:instancePath+"/shown",schemaPath:"#/properties/shown/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid0 = _errs10 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.total !== undefined){
let data5 = data.total;
const _errs12 = errors;
if(!(((typeof data5 == "number") && (!(data5 % 1) && !isNaN(data5))) && (isFinite(data5)))){
validate53.errors = [{instancePath:instancePath+"/total",schemaPath:"#/properties/total/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid0 = _errs12 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.collapsed !== undefined){
let data6 = data.collapsed;
const _errs14 = errors;
if(errors === _errs14){
if(Array.isArray(data6)){
var valid3 = true;
const len1 = data6.length;
for(let i1=0; i1<len1; i1++){
const _errs16 = errors;
if(typeof data6[i1] !== "string"){
validate53.errors = [{instancePath:instancePath+"/collapsed/" + i1,schemaPath:"#/properties/collapsed/items/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid3 = _errs16 === errors;
if(!valid3){
break;
}
}
}
else {
validate53.errors = [{instancePath:instancePath+"/collapsed",schemaPath:"#/properties/collapsed/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs14 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.boxes !== undefined){
let data8 = data.boxes;
const _errs18 = errors;
if(!(((typeof data8 == "number") && (!(data8 % 1) && !isNaN(data8))) && (isFinite(data8)))){
validate53.errors = [{instancePath:instancePath+"/boxes",schemaPath:"#/properties/boxes/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid0 = _errs18 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
}
else {
validate53.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate53.errors = vErrors;
return errors === 0;
}

export const SearchResult = validate54;
const schema99 = {"type":"object","required":["matches","view"],"properties":{"matches":{"type":"array","items":{"type":"string"},"description":"ids of the graph nodes matching the query"},"view":{"$ref":"#/definitions/View"}}};

function validate54(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if(((data.matches === undefined) && (missing0 = "matches")) || ((data.view === undefined) && (missing0 = "view"))){
validate54.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.matches !== undefined){
let data0 = data.matches;
const _errs1 = errors;
if(errors === _errs1){
if(Array.isArray(data0)){
var valid1 = true;
const len0 = data0.length;
for(let i0=0; i0<len0; i0++){
const _errs3 = errors;
if(typeof data0[i0] !== "string"){
validate54.errors = [{instancePath:instancePath+"/matches/" + i0,schemaPath:"#/properties/matches/items/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid1 = _errs3 === errors;
if(!valid1){
break;
}
}
}
else {
validate54.errors = [{instancePath:instancePath+"/matches",schemaPath:"#/properties/matches/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.view !== undefined){
const _errs5 = errors;
if(!(validate26(data.view, {instancePath:instancePath+"/view",parentData:data,parentDataProperty:"view",rootData}))){
vErrors = vErrors === null ? validate26.errors : vErrors.concat(validate26.errors);
errors = vErrors.length;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
}
}
}
else {
validate54.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate54.errors = vErrors;
return errors === 0;
}

export const VerifyResult = validate56;
const schema100 = {"type":"object","required":["pass"],"properties":{"pass":{"type":"boolean"},"summary":{"type":"string"},"problems":{"type":"array","items":{"$ref":"#/definitions/VerifyProblem"},"description":"the problems still found"},"verdict":{"$ref":"#/definitions/FixVerdict","description":"once the types are right: what the edited rule's values are worth"},"note":{"type":"string","description":"the oracle's reason for the verdict"}}};
const schema101 = {"description":"a problem verify or apply still found (deliver/comm.py _problem); a bwd_value one (well-typed, wrong values) adds leaf_errors","type":"object","required":["id","kind","headline"],"properties":{"id":{"type":"string"},"kind":{"$ref":"#/definitions/diagnosisKind"},"headline":{"type":"string"},"path":{"$ref":"#/definitions/nullableString"},"expected":{"$ref":"#/definitions/nullableString"},"got":{"$ref":"#/definitions/nullableString"},"leaf_errors":{"type":"array","items":{"$ref":"#/definitions/LeafError"}}}};

function validate57(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((((data.id === undefined) && (missing0 = "id")) || ((data.kind === undefined) && (missing0 = "kind"))) || ((data.headline === undefined) && (missing0 = "headline"))){
validate57.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.id !== undefined){
const _errs1 = errors;
if(typeof data.id !== "string"){
validate57.errors = [{instancePath:instancePath+"/id",schemaPath:"#/properties/id/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.kind !== undefined){
let data1 = data.kind;
const _errs3 = errors;
if(!((((((((((((((data1 === "bwd_type") || (data1 === "silent_dtype")) || (data1 === "bwd_structure")) || (data1 === "bwd_value")) || (data1 === "fwd_type")) || (data1 === "fwd_structure")) || (data1 === "accumulator_type")) || (data1 === "ref_grad_unbound")) || (data1 === "ref_grad_as_value")) || (data1 === "grad_ref_type")) || (data1 === "vjp_cotangent_type")) || (data1 === "vjp_cotangent_structure")) || (data1 === "nonfinite_cotangent")) || (data1 === "jvp_tangent_type"))){
validate57.errors = [{instancePath:instancePath+"/kind",schemaPath:"#/definitions/diagnosisKind/enum",keyword:"enum",params:{allowedValues: schema17.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.headline !== undefined){
const _errs5 = errors;
if(typeof data.headline !== "string"){
validate57.errors = [{instancePath:instancePath+"/headline",schemaPath:"#/properties/headline/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.path !== undefined){
let data3 = data.path;
const _errs7 = errors;
if((typeof data3 !== "string") && (data3 !== null)){
validate57.errors = [{instancePath:instancePath+"/path",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs7 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.expected !== undefined){
let data4 = data.expected;
const _errs10 = errors;
if((typeof data4 !== "string") && (data4 !== null)){
validate57.errors = [{instancePath:instancePath+"/expected",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs10 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.got !== undefined){
let data5 = data.got;
const _errs13 = errors;
if((typeof data5 !== "string") && (data5 !== null)){
validate57.errors = [{instancePath:instancePath+"/got",schemaPath:"#/definitions/nullableString/type",keyword:"type",params:{type: schema18.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs13 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.leaf_errors !== undefined){
let data6 = data.leaf_errors;
const _errs16 = errors;
if(errors === _errs16){
if(Array.isArray(data6)){
var valid5 = true;
const len0 = data6.length;
for(let i0=0; i0<len0; i0++){
let data7 = data6[i0];
const _errs18 = errors;
const _errs19 = errors;
if(errors === _errs19){
if(data7 && typeof data7 == "object" && !Array.isArray(data7)){
let missing1;
if((((data7.name === undefined) && (missing1 = "name")) || ((data7.max_abs === undefined) && (missing1 = "max_abs"))) || ((data7.ok === undefined) && (missing1 = "ok"))){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0,schemaPath:"#/definitions/LeafError/required",keyword:"required",params:{missingProperty: missing1},message:"must have required property '"+missing1+"'"}];
return false;
}
else {
if(data7.index !== undefined){
let data8 = data7.index;
const _errs21 = errors;
if(!(((typeof data8 == "number") && (!(data8 % 1) && !isNaN(data8))) && (isFinite(data8)))){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/index",schemaPath:"#/definitions/LeafError/properties/index/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid7 = _errs21 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.name !== undefined){
const _errs23 = errors;
if(typeof data7.name !== "string"){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/name",schemaPath:"#/definitions/LeafError/properties/name/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid7 = _errs23 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.max_abs !== undefined){
let data10 = data7.max_abs;
const _errs25 = errors;
if(!((typeof data10 == "number") && (isFinite(data10)))){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/max_abs",schemaPath:"#/definitions/LeafError/properties/max_abs/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid7 = _errs25 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.max_rel !== undefined){
let data11 = data7.max_rel;
const _errs27 = errors;
if((!((typeof data11 == "number") && (isFinite(data11)))) && (data11 !== null)){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/max_rel",schemaPath:"#/definitions/LeafError/properties/max_rel/type",keyword:"type",params:{type: schema46.properties.max_rel.type},message:"must be number,null"}];
return false;
}
var valid7 = _errs27 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.where !== undefined){
let data12 = data7.where;
const _errs29 = errors;
if(errors === _errs29){
if(Array.isArray(data12)){
var valid8 = true;
const len1 = data12.length;
for(let i1=0; i1<len1; i1++){
let data13 = data12[i1];
const _errs31 = errors;
if(!(((typeof data13 == "number") && (!(data13 % 1) && !isNaN(data13))) && (isFinite(data13)))){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/where/" + i1,schemaPath:"#/definitions/LeafError/properties/where/items/type",keyword:"type",params:{type: "integer"},message:"must be integer"}];
return false;
}
var valid8 = _errs31 === errors;
if(!valid8){
break;
}
}
}
else {
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/where",schemaPath:"#/definitions/LeafError/properties/where/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid7 = _errs29 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.reference_zero !== undefined){
const _errs33 = errors;
if(typeof data7.reference_zero !== "boolean"){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/reference_zero",schemaPath:"#/definitions/LeafError/properties/reference_zero/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid7 = _errs33 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.got_zero !== undefined){
const _errs35 = errors;
if(typeof data7.got_zero !== "boolean"){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/got_zero",schemaPath:"#/definitions/LeafError/properties/got_zero/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid7 = _errs35 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.judged !== undefined){
const _errs37 = errors;
if(typeof data7.judged !== "boolean"){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/judged",schemaPath:"#/definitions/LeafError/properties/judged/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid7 = _errs37 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.ok !== undefined){
const _errs39 = errors;
if(typeof data7.ok !== "boolean"){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/ok",schemaPath:"#/definitions/LeafError/properties/ok/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid7 = _errs39 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.reference_at !== undefined){
let data18 = data7.reference_at;
const _errs41 = errors;
if(!((typeof data18 == "number") && (isFinite(data18)))){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/reference_at",schemaPath:"#/definitions/LeafError/properties/reference_at/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid7 = _errs41 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.got_at !== undefined){
let data19 = data7.got_at;
const _errs43 = errors;
if(!((typeof data19 == "number") && (isFinite(data19)))){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/got_at",schemaPath:"#/definitions/LeafError/properties/got_at/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid7 = _errs43 === errors;
}
else {
var valid7 = true;
}
if(valid7){
if(data7.scale !== undefined){
let data20 = data7.scale;
const _errs45 = errors;
if(!((typeof data20 == "number") && (isFinite(data20)))){
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0+"/scale",schemaPath:"#/definitions/LeafError/properties/scale/type",keyword:"type",params:{type: "number"},message:"must be number"}];
return false;
}
var valid7 = _errs45 === errors;
}
else {
var valid7 = true;
}
}
}
}
}
}
}
}
}
}
}
}
}
}
else {
validate57.errors = [{instancePath:instancePath+"/leaf_errors/" + i0,schemaPath:"#/definitions/LeafError/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
var valid5 = _errs18 === errors;
if(!valid5){
break;
}
}
}
else {
validate57.errors = [{instancePath:instancePath+"/leaf_errors",schemaPath:"#/properties/leaf_errors/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs16 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
}
}
else {
validate57.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate57.errors = vErrors;
return errors === 0;
}


function validate56(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((data.pass === undefined) && (missing0 = "pass")){
validate56.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.pass !== undefined){
const _errs1 = errors;
if(typeof data.pass !== "boolean"){
validate56.errors = [{instancePath:instancePath+"/pass",schemaPath:"#/properties/pass/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.summary !== undefined){
const _errs3 = errors;
if(typeof data.summary !== "string"){
validate56.errors = [{instancePath:instancePath+"/summary",schemaPath:"#/properties/summary/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.problems !== undefined){
let data2 = data.problems;
const _errs5 = errors;
if(errors === _errs5){
if(Array.isArray(data2)){
var valid1 = true;
const len0 = data2.length;
for(let i0=0; i0<len0; i0++){
const _errs7 = errors;
if(!(validate57(data2[i0], {instancePath:instancePath+"/problems/" + i0,parentData:data2,parentDataProperty:i0,rootData}))){
vErrors = vErrors === null ? validate57.errors : vErrors.concat(validate57.errors);
errors = vErrors.length;
}
var valid1 = _errs7 === errors;
if(!valid1){
break;
}
}
}
else {
validate56.errors = [{instancePath:instancePath+"/problems",schemaPath:"#/properties/problems/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs5 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.verdict !== undefined){
let data4 = data.verdict;
const _errs8 = errors;
if(!((((data4 === "verified") || (data4 === "type-only")) || (data4 === "unverifiable")) || (data4 === ""))){
validate56.errors = [{instancePath:instancePath+"/verdict",schemaPath:"#/definitions/FixVerdict/enum",keyword:"enum",params:{allowedValues: schema45.enum},message:"must be equal to one of the allowed values"}];
return false;
}
var valid0 = _errs8 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.note !== undefined){
const _errs10 = errors;
if(typeof data.note !== "string"){
validate56.errors = [{instancePath:instancePath+"/note",schemaPath:"#/properties/note/type",keyword:"type",params:{type: "string"},message:"must be string"}];
return false;
}
var valid0 = _errs10 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
}
else {
validate56.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate56.errors = vErrors;
return errors === 0;
}

export const ApplyResult = validate59;
const schema108 = {"type":"object","required":["applied"],"properties":{"applied":{"type":"boolean"},"problems":{"type":"array","items":{"$ref":"#/definitions/VerifyProblem"}},"patch":{"type":["string","null"],"description":"for rules defined in a .py file: a unified diff to apply by hand"},"path":{"type":["string","null"]}}};

function validate59(data, {instancePath="", parentData, parentDataProperty, rootData=data}={}){
let vErrors = null;
let errors = 0;
if(errors === 0){
if(data && typeof data == "object" && !Array.isArray(data)){
let missing0;
if((data.applied === undefined) && (missing0 = "applied")){
validate59.errors = [{instancePath,schemaPath:"#/required",keyword:"required",params:{missingProperty: missing0},message:"must have required property '"+missing0+"'"}];
return false;
}
else {
if(data.applied !== undefined){
const _errs1 = errors;
if(typeof data.applied !== "boolean"){
validate59.errors = [{instancePath:instancePath+"/applied",schemaPath:"#/properties/applied/type",keyword:"type",params:{type: "boolean"},message:"must be boolean"}];
return false;
}
var valid0 = _errs1 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.problems !== undefined){
let data1 = data.problems;
const _errs3 = errors;
if(errors === _errs3){
if(Array.isArray(data1)){
var valid1 = true;
const len0 = data1.length;
for(let i0=0; i0<len0; i0++){
const _errs5 = errors;
if(!(validate57(data1[i0], {instancePath:instancePath+"/problems/" + i0,parentData:data1,parentDataProperty:i0,rootData}))){
vErrors = vErrors === null ? validate57.errors : vErrors.concat(validate57.errors);
errors = vErrors.length;
}
var valid1 = _errs5 === errors;
if(!valid1){
break;
}
}
}
else {
validate59.errors = [{instancePath:instancePath+"/problems",schemaPath:"#/properties/problems/type",keyword:"type",params:{type: "array"},message:"must be array"}];
return false;
}
}
var valid0 = _errs3 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.patch !== undefined){
let data3 = data.patch;
const _errs6 = errors;
if((typeof data3 !== "string") && (data3 !== null)){
validate59.errors = [{instancePath:instancePath+"/patch",schemaPath:"#/properties/patch/type",keyword:"type",params:{type: schema108.properties.patch.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs6 === errors;
}
else {
var valid0 = true;
}
if(valid0){
if(data.path !== undefined){
let data4 = data.path;
const _errs8 = errors;
if((typeof data4 !== "string") && (data4 !== null)){
validate59.errors = [{instancePath:instancePath+"/path",schemaPath:"#/properties/path/type",keyword:"type",params:{type: schema108.properties.path.type},message:"must be string,null"}];
return false;
}
var valid0 = _errs8 === errors;
}
else {
var valid0 = true;
}
}
}
}
}
}
else {
validate59.errors = [{instancePath,schemaPath:"#/type",keyword:"type",params:{type: "object"},message:"must be object"}];
return false;
}
}
validate59.errors = vErrors;
return errors === 0;
}

/** Each op's result validator (RequestMessage's x-results). */
export const resultValidators = {
  history: HistoryResult,
  view: View,
  expand: View,
  collapse: View,
  search: SearchResult,
  verify: VerifyResult,
  apply: ApplyResult
};
