"""Every diagnosis kind from real JAX, on both custom_vjp paths and under transforms."""
import gc
import inspect
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_features
from diagnosed import only, plain_and_hooked, raises
import jupyter_vjpviz as vv


def custom(primal, bwd, fwd=None, **defvjp_kwargs):
  f = jax.custom_vjp(primal, **({"nondiff_argnums": defvjp_kwargs.pop("nondiff_argnums")}
                                if "nondiff_argnums" in defvjp_kwargs else {}))
  f.defvjp(fwd or (lambda *a: (f(*a), a)), bwd, **defvjp_kwargs)
  return f


# ------------------------------------------------------------------ bwd_type

def test_bwd_shape_mismatch_names_rule_path_and_types(path):
  def softclip_bwd(res, g):
    x, y = res
    return (jnp.cos(x)[:2] * g[:2], jnp.sin(x) * g)
  softclip = custom(lambda x, y: jnp.sin(x) * y, softclip_bwd)
  x = jnp.ones(3)
  err = raises(lambda: jax.grad(lambda x, y: softclip(x, y).sum())(x, x))
  d = vv.last()
  assert (d.kind, d.severity, d.rule, d.path) == ("bwd_type", "error", "softclip_bwd", "[0]")
  assert (d.expected, d.got) == ("float32[3]", "float32[2]")
  assert d.message == str(err)
  assert d.function == "<lambda>" and d.source.endswith("test_capture.py:" + d.source.split(":")[-1])
  node = d.graph.node(d.node)
  assert node.custom and node.rule == "softclip_bwd"
  bad = [e for e in d.graph.edges if e.mismatch]
  assert [(e.dst, e.cotangent, e.cotangent_got) for e in bad] == [(d.node, "float32[3]", "float32[2]")]


def test_symbolic_zero_of_wrong_type(path):
  from jax.custom_derivatives import SymbolicZero
  bwd = lambda res, g: (g, SymbolicZero(jax.core.ShapedArray((2,), jnp.float32)))
  f = custom(lambda x, y: x * y, bwd)
  raises(lambda: jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1))(jnp.ones(3), jnp.ones(3)))
  d = only("bwd_type")
  assert (d.path, d.expected, d.got) == ("[1]", "float32[3]", "float32[2]")


def test_dict_argument_path_is_keystr(path):
  f = custom(lambda p: p["w"] * p["scale"],
             lambda res, g: ({"w": g, "scale": g.sum()},))
  raises(lambda: jax.grad(lambda p: f(p).sum())({"w": jnp.ones(3), "scale": jnp.ones(3)}))
  d = only("bwd_type")
  assert (d.path, d.expected, d.got) == ("[0]['scale']", "float32[3]", "float32[]")


# ------------------------------------------------------------- bwd_structure

@pytest.mark.parametrize("bad_bwd, n_args", [
    (lambda res, g: g, 1),                    # bare array
    (lambda res, g: (g,), 2),                 # tuple too short
    (lambda res, g: (g, g, g), 2),            # tuple too long
])
def test_bwd_structure(path, bad_bwd, n_args):
  f = custom(lambda *xs: sum(xs), bad_bwd)
  args = [jnp.ones(3)] * n_args
  raises(lambda: jax.grad(lambda *a: f(*a).sum())(*args))
  d = only("bwd_structure")
  assert d.severity == "error" and d.detail
  assert d.expected == str(jax.tree_util.tree_structure(tuple(args)))


@pytest.mark.parametrize("transform", [lambda f: f, jax.vmap, jax.jit])
def test_a_bare_cotangent_is_named_by_its_type_not_jaxs_tracer_class(path, transform):
  f = custom(lambda x: jnp.sin(x), lambda res, g: g * jnp.cos(res[0]))
  raises(lambda: jax.grad(lambda x: transform(f)(x).sum())(jnp.ones((2, 3))))
  d = only("bwd_structure")
  assert "returned a bare float32[" in d.detail and "Tracer" not in d.detail, d.detail


def test_bwd_structure_missing_dict_key(path):
  f = custom(lambda p: p["a"] * p["b"], lambda res, g: ({"a": g},))
  raises(lambda: jax.grad(lambda p: f(p).sum())({"a": jnp.ones(3), "b": jnp.ones(3)}))
  d = only("bwd_structure")
  assert "['b']" in d.path or "['b']" in (d.detail or "")


def test_nondiff_argnums_extra_cotangent(path):
  f = custom(lambda n, x: x * n, lambda n, res, g: (g, g), nondiff_argnums=(0,))
  raises(lambda: jax.grad(lambda x: f(2.0, x).sum())(jnp.ones(3)))
  d = only("bwd_structure")
  assert d.rule == "<lambda>"
  # one cotangent per argument, the nondiff one included: said so, and the table shows
  # the differentiable argument's cotangent where it belongs, not "missing"/"extra" rows
  assert "nondiff_argnums=(0,) included" in d.detail, d.detail
  assert [(leaf.argument, leaf.expected, leaf.got) for leaf in d.leaves] == [
      ("x", "float32[3]", "float32[3]")]


# ------------------------------------------------------------------- fwd

def test_fwd_not_a_pair(path):
  f = custom(lambda x: x * 2, lambda r, g: (g,), fwd=lambda x: x * 2)
  raises(lambda: jax.grad(lambda x: f(x).sum())(jnp.ones(3)))
  assert only("fwd_structure").severity == "error"


def test_fwd_output_type_mismatch(path):
  """Where JAX has traced the primal (grad of a jit; hijax always) it compares the fwd's
  output with it and raises; the diagnosis takes the primal's types from that trace."""
  f = custom(lambda x: x * 2, lambda r, g: (g[:3],), fwd=lambda x: (jnp.concatenate([x, x]), None))
  raises(lambda: jax.grad(jax.jit(lambda x: f(x).sum()))(jnp.ones(3)))
  d = only("fwd_type")
  assert (d.expected, d.got, d.severity) == ("float32[3]", "float32[6]", "error")


# ------------------------------------------------------------ accumulators

@pytest.mark.needs("accumulator_type")
def test_with_refs_accumulator_of_wrong_aval(hook):
  from jax.experimental.hijax import ShapedArray, ValAccum
  _, f_vjp = jax.vjp(lambda x, y: jnp.sin(x) * y, jnp.ones(3), jnp.ones(3))
  raises(lambda: f_vjp.with_refs(ValAccum(ShapedArray((4,), jnp.float32)),
                                 jax.ad.GradValue())(jnp.ones(3)))
  d = only("accumulator_type")
  assert (d.path, d.expected, d.got, d.node) == ("args[0]", "float32[3]", "float32[4]", "in0")
  # The input is spelled as the graph spells it, JAX's args[0] only in d.path.
  assert d.graph.node(d.node).label == d.argument == "x"
  assert "accumulator for x of" in d.headline and "args[0]" not in d.headline


def doubled_with_accums(h_bwd):
  """h(x) = 2x, a custom_vjp whose ``h_bwd(res, g, x_acc)`` pushes into x's accumulator."""
  @jax.custom_vjp
  def h(x):
    return x * 2.
  h.defvjp_with_accums(lambda x: (h(x), None), h_bwd)
  return h


@pytest.mark.needs("accumulator_type", jax_features.WITH_ACCUMS)
def test_defvjp_with_accums_ct_check_names_the_rule(path):
  def h_bwd(res, g, x_acc):
    x_acc.accum(g[:2] * 2.)
  h = doubled_with_accums(h_bwd)
  raises(lambda: jax.grad(lambda x: h(x).sum())(jnp.ones(3)))
  d = only("accumulator_type")
  assert (d.rule, d.function, d.expected, d.got) == ("h_bwd", "h", "float32[3]", "float32[2]")


@pytest.mark.skipif("with_accums" not in inspect.signature(jax.custom_gradient).parameters,
                    reason=f"jax {jax.__version__}'s custom_gradient has no with_accums")
def test_custom_gradient_with_accums_push_names_the_closure_and_the_input(hook):
  """JAX traces a ``with_accums`` closure in the fwd, where no rule is on the stack: the
  push it refuses is still the closure's, about the input whose accumulator it fits."""
  from jax.experimental.hijax import ValAccum

  @jax.custom_gradient(with_accums=ValAccum)
  def f(x, w):
    def f_vjp(g, x_acc, w_acc):
      x_acc.accum(jnp.cos(x) * w * g)
      w_acc.accum(jnp.sin(x) * g)
    return jnp.sin(x) * w, f_vjp
  raises(lambda: jax.grad(lambda x, w: f(x, w).sum(), argnums=(0, 1))(jnp.ones((4, 3)),
                                                                     jnp.ones(3)))
  d = only("accumulator_type")
  assert (d.function, d.rule, d.path, d.argument) == ("f", "f_vjp", "[1]", "w")
  first = d.fixes[0]   # the push summed; not run: JAX runs such a closure only inside f
  assert "w_acc.accum((jnp.sin(x) * g).sum(axis=0))" in first.code
  assert first.verdict == "unverifiable"


@pytest.mark.needs("hijax primitives")
def test_hiprim_bwd_wrong_shape(hook):
  HiPrim = jax_features.hi_primitive()

  class Scale(HiPrim):
    def __init__(self, aval):
      self.in_avals, self.out_aval, self.params = (aval,), aval, {}
      super().__init__()

    def expand(self, x):
      return x * 2.

    def vjp_fwd(self, nzs_in, x):
      return self(x), None

    def vjp_bwd_retval(self, res, g):
      return (g[:2] * 2.,)
  raises(lambda: jax.grad(lambda x: Scale(jax.typeof(x))(x).sum())(jnp.ones(3)))
  d = only("bwd_type")   # the rule returned it; JAX's accumulator only rejected it
  assert (d.function, d.rule, d.argument) == ("Scale", "Scale.vjp_bwd_retval", "x")
  assert (d.expected, d.got) == ("float32[3]", "float32[2]")


# ---------------------------------------------------------------- Ref kinds

def _ref_vjp():
  f = lambda w_ref, x: jnp.sin(w_ref[...] * x)
  return jax.vjp(f, jax.new_ref(jnp.ones(3)), jnp.arange(3.0))[1]


@pytest.mark.parametrize("kind, call, got", [
    ("ref_grad_unbound", lambda v: v(jnp.ones(3)), "no gradient ref"),
    ("ref_grad_as_value", lambda v: v.with_refs(jax.ad.GradValue(), jax.ad.GradValue())(jnp.ones(3)),
     "GradValue()"),
    ("grad_ref_type", lambda v: v.with_refs(jax.new_ref(jnp.zeros(4)), jax.ad.GradValue())(jnp.ones(3)),
     "Ref{float32[4]}"),
])
@pytest.mark.needs("ref_grad_unbound", "ref_grad_as_value", "grad_ref_type")
def test_ref_kinds(hook, kind, call, got):
  f_vjp = _ref_vjp()
  raises(lambda: call(f_vjp))
  d = only(kind)
  assert (d.path, d.expected, d.got) == ("args[0]", "Ref{float32[3]}", got)


@pytest.mark.needs("grad_ref_type")
def test_with_refs_and_dont_want_is_clean(hook):
  f_vjp = _ref_vjp()
  g = jax.new_ref(jnp.zeros(3))
  f_vjp.with_refs(g, jax.ad.DontWant())(jnp.ones(3))
  assert vv.diagnoses() == []


# ------------------------------------------------------- f_vjp cotangents

def test_vjp_cotangent_type(hook):
  _, f_vjp = jax.vjp(lambda x: {"a": x * 2, "b": x}, jnp.ones(3))
  raises(lambda: f_vjp({"a": jnp.ones(4), "b": jnp.ones(3)}))
  d = only("vjp_cotangent_type")
  assert (d.path, d.expected, d.got) == ("out['a']", "float32[3]", "float32[4]")


def test_vjp_cotangent_structure(hook):
  _, f_vjp = jax.vjp(lambda x: {"a": x * 2, "b": x}, jnp.ones(3))
  raises(lambda: f_vjp({"a": jnp.ones(3)}))
  assert only("vjp_cotangent_structure").expected.startswith("PyTreeDef")


# ------------------------------------------------------------ silent dtype

@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.int32, jnp.complex64])
def test_silent_dtype_warning_when_jax_raises_nothing(path, dtype):
  f = custom(jnp.sin, lambda x, g: ((jnp.cos(x[0]) * g).astype(dtype),))
  grad = jax.grad(lambda x: f(x).sum())(jnp.ones(3))
  assert grad.dtype == dtype            # JAX let it through
  d = only("silent_dtype")
  assert (d.severity, d.message, d.expected) == ("warning", None, "float32[3]")
  assert d.got == f"{jnp.dtype(dtype).name}[3]"


def test_dtype_clash_later_names_the_culprit_rule(path):
  def bf16_bwd(x, g):
    return ((jnp.cos(x[0]) * g).astype(jnp.bfloat16),)
  f = custom(jnp.sin, bf16_bwd)
  err = raises(lambda: jax.grad(lambda x: f(x).sum() + (x * x).sum())(jnp.ones(3)))
  assert "lax.add" in str(err) or "dtype" in str(err)
  d = only("silent_dtype")
  assert d.rule == "bf16_bwd" and d.message == str(err)
  assert d.severity == "error" and "failed further on" in d.headline and d.detail
  assert any("bf16_bwd" in n for n in err.__notes__)


def test_last_is_the_error_jax_raised_not_a_warning_of_the_same_call(path):
  def scale_bwd(res, g):
    x, s = res
    return (g * s).astype(jnp.float16), g * x        # x: a dtype JAX lets by; s: wrong shape
  f = custom(lambda x, s: x * s, scale_bwd)
  err = raises(lambda: jax.grad(lambda x: f(x, jnp.float32(3.0)).sum())(jnp.ones(3)))
  assert sorted(d.kind for d in vv.diagnoses()) == ["bwd_type", "silent_dtype"]
  lead = vv.last()
  assert (lead.kind, lead.severity, lead.path, lead.got) == ("bwd_type", "error", "[1]",
                                                             "float32[3]")
  assert any(lead.headline in n for n in err.__notes__)
  f(jnp.ones(2), 2.0)
  jax.grad(lambda x: custom(jnp.sin, lambda r, g: ((jnp.cos(r[0]) * g).astype(jnp.float16),))(
      x).sum())(jnp.ones(2))
  assert vv.last().kind == "silent_dtype"                     # a later call's warning


def test_warning_shown_once_per_rule_and_type(hook):
  f = custom(jnp.sin, lambda x, g: ((jnp.cos(x[0]) * g).astype(jnp.bfloat16),))
  for _ in range(3):
    jax.grad(lambda x: f(x).sum())(jnp.ones(3))
  assert len(vv.diagnoses()) == 1


# ------------------------------------------------------------- transforms

def _bad_gelu():
  def gelu_bwd(x, g):
    return (g[..., :1],)
  return custom(lambda x: x * jax.nn.sigmoid(1.702 * x), gelu_bwd, fwd=lambda x: (x, x))


@pytest.mark.parametrize("transform", ["jit", "vmap", "scan", "checkpoint"])
def test_bwd_type_under_transforms(path, transform):
  gelu = _bad_gelu()
  loss = lambda x: gelu(x).sum()
  x = jnp.ones((2, 3))
  if transform == "jit":
    run = lambda: jax.jit(jax.grad(loss))(x)
  elif transform == "vmap":
    run = lambda: jax.vmap(jax.grad(loss))(jnp.ones((4, 2, 3)))
  elif transform == "scan":
    run = lambda: jax.grad(lambda x: jax.lax.scan(lambda c, _: (gelu(c), None), x, None, 2)[0].sum())(x)
  else:
    run = lambda: jax.grad(jax.checkpoint(loss))(x)
  raises(run)
  d = only("bwd_type")
  assert (d.expected, d.got) == ("float32[2,3]", "float32[2,1]")
  assert d.rule == "gelu_bwd"


def _bf16_rule():
  return custom(lambda x: x * 2., lambda r, g: ((g * 2.).astype(jnp.bfloat16),))


def test_dtype_jax_accepts_while_tracing_but_fails_lowering_is_the_error(path):
  """Under jit the scan's carry check fails when jit lowers the program, after every VJP
  session ended: the error is the rule's, attached as the note of that exception."""
  from jupyter_vjpviz.api import pipeline
  f = _bf16_rule()
  loss = lambda x: jax.lax.scan(lambda c, _: (f(c), None), x, None, length=3)[0].sum()
  err = raises(lambda: jax.jit(jax.grad(loss))(jnp.ones(3)))
  assert "carry" in str(err)
  (d,) = vv.diagnoses()
  assert (d.kind, d.severity, d.got, d.message) == ("silent_dtype", "error", "bfloat16[3]", str(err))
  assert [n for n in err.__notes__ if n.startswith("vjpviz: ")] == [
      f"vjpviz: {d.headline} ({pipeline.NOTE_POINTER})"]


def test_dtype_jax_lets_through_under_jit_is_a_warning_once_it_ran(path):
  f = _bf16_rule()
  g = jax.jit(jax.grad(lambda x: f(x).sum()))(jnp.ones(3))
  assert g.dtype == jnp.bfloat16
  (d,) = vv.diagnoses()
  assert (d.kind, d.severity) == ("silent_dtype", "warning")


@pytest.mark.needs("bwd check of varying axes")
def test_shard_map_types_carry_varying_axes(path):
  mesh = jax.make_mesh((4,), ("dp",), axis_types=(jax.sharding.AxisType.Auto,))

  @jax.custom_vjp
  def scale(x):
    return x * 2.
  # psum drops the varying axis: the cotangent comes back invariant.
  scale.defvjp(lambda x: (scale(x), None), lambda r, g: (jax.lax.psum(g, "dp"),))

  def inner(x):
    return jax.grad(lambda x: scale(x).sum())(x)
  run = jax.jit(jax.shard_map(inner, mesh=mesh, in_specs=P("dp"), out_specs=P("dp")))
  raises(lambda: run(jnp.ones((8, 16))))
  assert [d.kind for d in vv.diagnoses()] == ["bwd_type"]
  d = vv.last()
  assert d.kind == "bwd_type" and d.expected == "float32[2,16]{V:dp}"
  assert d.got == "float32[2,16]"


def test_failing_instance_of_a_rule_used_24_times(hook):
  gelu_calls = []

  def gelu_bwd(x, g):
    return (g if x.shape[-1] != 5 else g[..., :1],)
  gelu = custom(lambda x: x * 2., gelu_bwd, fwd=lambda x: (gelu_calls.append(1) or x * 2., x))

  def model(x):
    for i in range(24):
      with jax.named_scope(f"layer{i}"):
        x = gelu(x)
        if i == 16:
          x = jnp.concatenate([x, x[:, :2]], axis=1)   # width 3 -> 5 from layer 17 on
    return x.sum()
  raises(lambda: jax.grad(model)(jnp.ones((2, 3))))
  d = vv.last()
  # The first bwd to run (reverse order) is layer 23's: same call site in all layers.
  assert d.graph.node(d.node).name_stack == "layer23"


# ---------------------------------------------------------------- controls

@pytest.mark.parametrize("bwd", [
    lambda x, g: (jnp.cos(x[0]) * g,),                   # correct
    lambda x, g: (None,),                                # None: zero cotangent
])
def test_correct_rules_give_no_diagnosis(path, bwd):
  f = custom(jnp.sin, bwd)
  jax.grad(lambda x: f(x).sum())(jnp.ones(3))
  assert vv.diagnoses() == []


def test_symbolic_zeros_and_float0_controls(path):
  from jax.custom_derivatives import SymbolicZero
  f = jax.custom_vjp(lambda x, n: x * n)
  f.defvjp(lambda x, n: (f(x.value, n.value), n.value),
           lambda n, g: (g * n, SymbolicZero(jax.core.ShapedArray((3,), jnp.int32))),
           symbolic_zeros=True)
  jax.grad(lambda x, n: f(x, n).sum(), allow_int=True, argnums=(0, 1))(jnp.ones(3), jnp.arange(3))
  assert [d for d in vv.diagnoses() if d.severity == "error"] == []


def test_ordinary_user_exception_gives_no_diagnosis(hook):
  def boom(x):
    raise KeyError("mine")
  with pytest.raises(KeyError):
    jax.grad(boom)(1.0)
  assert vv.diagnoses() == []


# ------------------------------------------------------ the user's error

def _failing_grad():
  f = custom(lambda x: x * 2., lambda r, g: (g[:2],))
  return lambda: jax.grad(lambda x: f(x).sum())(jnp.ones(3))


def _frames(err):
  return [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(err.__traceback__)]


def _failing_fwd():
  f = custom(lambda x: x * 2., lambda r, g: (g,), fwd=lambda x: x * 2.)
  return lambda: jax.vjp(f, jnp.ones(3))


def _failing_cotangent():
  return lambda: jax.vjp(jnp.sin, jnp.ones(3))[1](jnp.ones(4))


def _failing_with_refs():
  return lambda: _ref_vjp().with_refs(jax.ad.GradValue(), jax.ad.GradValue())(jnp.ones(3))


def _failing_under_jit():
  f = custom(lambda x: x * 2., lambda r, g: (g[:2],))
  return lambda: jax.jit(jax.grad(lambda x: f(x).sum()))(jnp.ones(3))


@pytest.mark.parametrize("make", [_failing_grad, _failing_fwd, _failing_cotangent,
                                  pytest.param(_failing_with_refs, marks=pytest.mark.needs("ref_grad_as_value")),
                                  _failing_under_jit])
def test_error_unchanged_type_message_frames(path, make):
  run = make()
  vv.uninstall()
  plain = raises(run)
  vv.install()
  hooked = raises(run)
  assert type(hooked) is type(plain) and str(hooked) == str(plain)
  assert _frames(hooked) == _frames(plain)           # every frame, JAX's included
  added = [n for n in hooked.__notes__ if n not in getattr(plain, "__notes__", [])]
  assert len(added) == 1 and added[0].startswith("vjpviz: ") and "\n" not in added[0]


def test_uninstall_restores_every_object_by_identity():
  from jax._src import api, custom_derivatives as cd
  from jax._src.interpreters import ad
  watched = [(api, "vjp"), (jax, "vjp"), (api, "_vjp3_bwd"), (api, "_vjp3_callable"),
             (api, "_vjp_accum"), (ad, "ct_check"), (cd.custom_vjp, "__call__")]
  before = [getattr(o, n, None) for o, n in watched]   # None: not in this JAX
  tables = dict(getattr(ad, "fancy_transposes", {}))
  vv.install(); vv.install()
  # its frames are watched, it is not replaced (wrapped where they cannot be: older JAX, Python 3.11)
  assert jax.vjp is before[1] or jax.vjp.__wrapped__ is before[1]
  assert "fwd" in vars(cd.custom_vjp)      # JAX's __call__ reads the instrumented rules
  vv.uninstall(); vv.uninstall()
  assert all(getattr(o, n, None) is b for (o, n), b in zip(watched, before))
  assert "fwd" not in vars(cd.custom_vjp) and "bwd" not in vars(cd.custom_vjp)
  assert all(getattr(ad, "fancy_transposes", {})[k] is v for k, v in tables.items())


def test_diagnosis_keeps_no_arrays(hook):
  x = jnp.ones(1000) * 3.0       # a fresh buffer only this test holds
  baseline = {id(a) for a in jax.live_arrays()}
  f = custom(lambda x: x * 2., lambda r, g: (g[:2],))
  try:
    jax.grad(lambda x: f(x).sum())(x)
  except ValueError:
    pass
  del x
  gc.collect()
  assert vv.last() is not None
  leftover = [a for a in jax.live_arrays() if a.shape == (1000,)]
  assert leftover == [], "a diagnosis kept a device buffer alive"
  assert baseline is not None


def test_to_dict_is_json(hook):
  import json
  raises(_failing_grad())
  d = json.loads(json.dumps(vv.last().to_dict()))
  for k in ("kind", "severity", "function", "rule", "source", "path", "expected", "got",
            "message", "node", "graph", "fixes"):
    assert k in d
  assert {"nodes", "edges"} <= set(d["graph"])
  assert all({"primal", "cotangent", "cotangent_got"} <= set(e) for e in d["graph"]["edges"])


def test_check_is_abstract_and_cached(hook):
  calls = []
  f = custom(lambda x: x * 2., lambda r, g: (calls.append(1) or g.astype(jnp.bfloat16),))
  loss = lambda x: f(x).sum()
  first = vv.check(loss, np.ones(3, np.float32))
  assert [d.kind for d in first] == ["silent_dtype"]
  ran = len(calls)      # the check, then the fixes' judge running candidates made of the rule
  assert vv.check(loss, np.ones(3, np.float32)) == first and len(calls) == ran
  assert vv.diagnoses() == []          # check returns, it does not display


def test_vjpviz_failure_leaves_user_code_alone(hook, monkeypatch, capsys):
  from jupyter_vjpviz.analysis import assemble
  monkeypatch.setattr(assemble.program, "build", lambda origin: 1 / 0)
  run = _failing_grad()
  err = raises(run)
  assert "ValueError" == type(err).__name__
  lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("vjpviz:")]
  assert len(lines) == 1 and "your code ran as it would without vjpviz" in lines[0]


# ------------------------------------------------------ text as a fallback

def test_text_fallback_when_no_check_site_reported(path, monkeypatch):
  """A JAX whose check site we don't wrap: the message still yields a diagnosis."""
  from jupyter_vjpviz.capture.sites import custom_rules
  monkeypatch.setattr(custom_rules, "compare_cotangents", lambda site, cts: [])
  f = custom(lambda x: x * 2., lambda r, g: (g[:2],))
  raises(lambda: jax.grad(lambda x: f(x).sum())(jnp.ones(3)))
  d = vv.last()
  assert (d.kind, d.expected, d.got) == ("bwd_type", "float32[3]", "float32[2]")
  assert "JAX's message" in d.detail


def _plain_jax_message(thunk) -> str:
  """What JAX itself says, hook off."""
  assert not vv.installed()
  return str(raises(thunk))


def _transposing_rule_grad(custom_vjp3):
  if custom_vjp3:
    jax.config.update("jax_custom_vjp3", True)
  f = custom(lambda x: x * 2., lambda r, g: (g.T,))
  return lambda: jax.grad(lambda x: f(x).sum())(jnp.ones((2, 3)))


def _sharded_psum_grad():
  mesh = jax.make_mesh((4,), ("dp",), axis_types=(jax.sharding.AxisType.Auto,))
  f = custom(lambda x: x * 2., lambda r, g: (jax.lax.psum(g, "dp"),))
  inner = lambda x: jax.grad(lambda x: f(x).sum())(x)
  return lambda: jax.jit(jax.shard_map(inner, mesh=mesh, in_specs=P("dp"), out_specs=P("dp")))(
      jnp.ones((8, 16)))


def _accumulator_grad():
  from jax.experimental.hijax import ShapedArray, ValAccum
  _, f_vjp = jax.vjp(jnp.sin, jnp.ones((2, 3)))
  return lambda: f_vjp.with_refs(ValAccum(ShapedArray((3, 2), jnp.float32)))(jnp.ones((2, 3)))


def _ref_grad():
  _, f_vjp = jax.vjp(lambda w, x: jnp.sin(w[...] * x), jax.new_ref(jnp.ones((2, 3))), jnp.ones((2, 3)))
  return lambda: f_vjp.with_refs(jax.new_ref(jnp.zeros((3, 2))), jax.ad.GradValue())(jnp.ones((2, 3)))


@pytest.mark.parametrize("make, kind, expected, got", [
    (lambda: _transposing_rule_grad(False), "bwd_type", "float32[2,3]", "float32[3,2]"),
    pytest.param(lambda: _transposing_rule_grad(True), "bwd_type", "float32[2,3]", "float32[3,2]",
                 marks=pytest.mark.needs(jax_features.HIJAX_PATH)),
    pytest.param(_sharded_psum_grad, "bwd_type", "float32[2,16]{V:dp}", "float32[2,16]",
                 marks=pytest.mark.needs("bwd check of varying axes")),
    pytest.param(_accumulator_grad, "accumulator_type", "float32[2,3]", "float32[3,2]",
                 marks=pytest.mark.needs("accumulator_type")),
    (lambda: (lambda f: lambda: f(jnp.ones((3, 2))))(jax.vjp(jnp.sin, jnp.ones((2, 3)))[1]),
     "vjp_cotangent_type", "float32[2,3]", "float32[3,2]"),
    pytest.param(_ref_grad, "grad_ref_type", "Ref{float32[2,3]}", "Ref{float32[3,2]}",
                 marks=pytest.mark.needs("grad_ref_type")),
])
def test_text_fallback_reads_multi_dim_types_whole(make, kind, expected, got):
  """Real JAX messages: a type with commas, spaces or braces is read whole, never cut."""
  from jupyter_vjpviz.analysis import fallback
  try:
    message = _plain_jax_message(make())
  finally:
    jax_features.flags_off()
  (rec,) = fallback.records_from_text(message)
  assert (rec.kind, rec.expected, rec.got) == (kind, expected, got), message


def test_unsupported_jax_version_says_so_once_and_still_works(monkeypatch, capsys):
  monkeypatch.setattr(jax, "__version__", "0.99.0")
  vv.install()
  try:
    assert "vjpviz on jax 0.99.0 (tested on jax " in capsys.readouterr().err
    raises(_failing_grad())
    assert vv.last().kind == "bwd_type"
  finally:
    vv.uninstall()
    vv.clear()


@pytest.mark.parametrize("wrap", ["plain", "jit_block"])
def test_only_the_failing_application_is_highlighted(hook, wrap):
  """One rule applied 24 times from one line, no scopes: only the 6th call's bwd is wrong."""
  def bwd(x, g):
    return (g[..., :1] if x.shape[-1] == 7 else g,)
  rule = custom(lambda x: x * 2., bwd, fwd=lambda x: (x * 2., x))
  block = (lambda x: rule(x)) if wrap == "plain" else jax.jit(lambda x: rule(x))

  def model(x):
    for i in range(24):
      x = block(x)
      if i == 4:
        x = jnp.pad(x, ((0, 0), (0, 4)))              # width 3 -> 7 for the 6th call
      if i == 5:
        x = x[:, :3]                                  # back to 3 after it
    return x.sum()
  raises(lambda: jax.grad(model)(jnp.ones((2, 3))))
  d = vv.last()
  failing = d.graph.node(d.node)
  custom_nodes = [n for n in d.graph.nodes if n.custom]
  assert len(custom_nodes) == 24
  assert custom_nodes.index(failing) == 5
  assert failing.in_avals[-1] == "float32[2,7]"


@pytest.mark.needs("accumulator_type", jax_features.WITH_ACCUMS)
def test_int32_pushed_into_float32_accumulator_is_a_warning(path):
  def h_bwd(r, g, acc):
    acc.accum(g.astype(jnp.int32))
  h = doubled_with_accums(h_bwd)
  assert jax.grad(lambda x: h(x).sum())(jnp.ones(3)).dtype == jnp.int32   # JAX took it
  d = only("silent_dtype")
  assert (d.rule, d.argument, d.expected, d.got) == ("h_bwd", "x", "float32[3]", "int32[3]")


@pytest.mark.skipif("generic_batching" not in inspect.signature(jax.custom_vjp.defvjp).parameters,
                    reason="no defvjp(generic_batching=) in this JAX")
def test_generic_batching_rule_is_hijax(hook):
  def softclip_bwd(x, g):
    return (g[:2],)
  f = custom(jnp.sin, softclip_bwd, generic_batching=True)
  raises(lambda: jax.vmap(jax.grad(lambda x: f(x).sum()))(jnp.ones((4, 3))))
  d = only("bwd_type")
  assert d.hijax and (d.rule, d.expected, d.got) == ("softclip_bwd", "float32[3]", "float32[2]")


def test_script_prints_report_after_traceback(tmp_path):
  import subprocess
  import sys
  script = tmp_path / "train.py"
  script.write_text(
      "import jax, jax.numpy as jnp\nimport jupyter_vjpviz as vv\nvv.install()\n"
      "f = jax.custom_vjp(lambda x: x * 2.)\n"
      "def f_bwd(r, g):\n    return (g[:2],)\n"
      "f.defvjp(lambda x: (f(x), None), f_bwd)\n"
      "jax.grad(lambda x: f(x).sum())(jnp.ones(3))\n")
  run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
  assert run.returncode == 1
  err = run.stderr
  assert err.index("Traceback") < err.index("ValueError: Custom VJP bwd rule") < err.rindex("f_bwd")
  assert "vjpviz: could not" not in err


def test_name_with_spaces_and_html_is_still_located(hook):
  def primal(x):
    return x * 2.
  primal.__name__ = "<img src=x onerror=alert(1)>"
  f = custom(primal, lambda r, g: (g[:2],))
  raises(lambda: jax.grad(lambda x: f(x).sum())(jnp.ones(3)))
  d = vv.last()
  assert d.function == "<img src=x onerror=alert(1)>" and d.node is not None


@pytest.mark.skipif(not hasattr(jax, "set_mesh"), reason="no jax.set_mesh in this JAX")
def test_graph_traces_under_an_explicit_mesh(hook):
  mesh = jax.make_mesh((4,), ("dp",), axis_types=(jax.sharding.AxisType.Explicit,))
  f = custom(lambda x: x * 2., lambda r, g: (g[:1],))

  def loss(x):
    return jax.shard_map(f, mesh=mesh, in_specs=P("dp"), out_specs=P("dp"))(x).sum()
  with jax.set_mesh(mesh):
    x = jax.device_put(jnp.ones((8, 16)), jax.NamedSharding(mesh, P("dp")))
    raises(lambda: jax.jit(jax.grad(loss))(x))
  d = vv.last()
  assert d.graph.note is None and d.graph.node(d.node).custom


def _leftover_after_failing_call(size: int) -> int:
  """How many arrays of ``size`` a failing call leaves alive, closed over by a nondiff callable."""
  def fail():
    big = jnp.ones(size) * 5.0
    act = lambda y: y * big[0]
    f = jax.custom_vjp(lambda fn, x: fn(x), nondiff_argnums=(0,))
    f.defvjp(lambda fn, x: (fn(x), None), lambda fn, r, g: (g[:2],))
    raises(lambda: jax.grad(lambda x: f(act, x).sum())(jnp.ones(3)))
  fail()
  gc.collect()
  return len([a for a in jax.live_arrays() if a.shape == (size,)])


def test_nondiff_callable_closing_over_an_array_is_not_kept_alive(path):
  """vjpviz keeps no more alive than JAX itself does (on the hijax path JAX's own caches
  keep the callable, and what it closes over): on JAX 0.9 and 0.10 a fix's verification
  that compiled the closed-over array into its program kept a second jax.Array on it."""
  vv.uninstall()
  plain = _leftover_after_failing_call(1000)
  vv.install()
  assert _leftover_after_failing_call(1001) == plain
  assert vv.last().kind == "bwd_type"


def test_custom_gradient_points_at_the_users_function(hook):
  @jax.custom_gradient
  def clip_grad(x):
    return jnp.sin(x), lambda g: (g[:1],)
  raises(lambda: jax.grad(lambda x: clip_grad(x).sum())(jnp.ones(3)))
  d = vv.last()
  assert (d.kind, d.function, d.argument) == ("bwd_type", "clip_grad", "x")
  assert d.source.startswith(__file__)
  # The rule is the VJP closure clip_grad returned, not JAX's own bwd; fixes edit that
  # closure inside clip_grad, never JAX. g is not sin's gradient: none is verified.
  assert d.rule == "<lambda>" and d.rule_source.startswith(__file__)
  assert d.fixes and all("def clip_grad(x):" in f.code for f in d.fixes)
  assert all(f.verdict != "verified" for f in d.fixes), [(f.title, f.verdict) for f in d.fixes]


def _dense():
  """A dense layer whose VJP closure is written for batched x (``x.T @ g``)."""
  @jax.custom_gradient
  def dense(x, w):
    def dense_vjp(g):
      return g @ w.T, x.T @ g
    return x @ w, dense_vjp
  return dense


_DENSE_GRAD = jax.grad(lambda x, w, dense: dense(x, w).sum(), argnums=(0, 1))
_DENSE_PLACES = {
    "eager": lambda x, w: _DENSE_GRAD(x, w, _dense()),
    "jit": lambda x, w: jax.jit(_DENSE_GRAD, static_argnums=2)(x, w, _dense()),
    "vmap": lambda x, w: jax.vmap(_DENSE_GRAD, in_axes=(0, None, None))(x[None], w, _dense()),
}


@pytest.mark.parametrize("place", _DENSE_PLACES)
def test_a_custom_gradient_closure_that_raises_is_diagnosed_at_its_line(hook, place):
  """JAX traces a custom_gradient's VJP closure in the fwd, on the cotangent types: called on
  one example, the batched closure raises there, and the diagnosis names it and the input."""
  w = jnp.ones((3, 2))
  _DENSE_PLACES[place](jnp.ones((5, 3)), w)   # the batch it was written for: silent
  assert vv.diagnoses() == []
  err = raises(lambda: _DENSE_PLACES[place](jnp.ones(3), w))
  d = only("bwd_raised")
  assert (d.function, d.rule, d.argument) == ("dense", "dense_vjp", "w")
  assert d.raised_at.startswith(__file__) and d.rule_source.startswith(__file__)
  assert "x.T @ g" in d.detail
  (note,) = [n for n in err.__notes__ if n.startswith("vjpviz: ")]
  assert note.startswith("vjpviz: dense's bwd rule dense_vjp raised at line")


def test_a_custom_gradient_closure_that_raises_leaves_the_error_unchanged(hook):
  plain, hooked = plain_and_hooked(lambda: _DENSE_PLACES["eager"](jnp.ones(3), jnp.ones((3, 2))))
  assert type(hooked) is type(plain) and str(hooked) == str(plain)
  assert _frames(hooked) == _frames(plain)


def test_a_custom_gradient_whose_forward_raises_is_no_closure_diagnosis(hook):
  @jax.custom_gradient
  def dense(x, w):
    return x.T @ w.T, lambda g: (g, g)
  raises(lambda: jax.grad(lambda x, w: dense(x, w).sum(), argnums=(0, 1))(jnp.ones((5, 3)), jnp.ones((3, 2))))
  assert vv.diagnoses() == []


def test_a_custom_gradient_differentiated_itself_labels_its_input_by_the_users_name(hook):
  """jax.grad(f) of a custom_gradient f: the graph's input is f's own parameter, not the
  ``*args`` of the function JAX wraps it in."""
  @jax.custom_gradient
  def scaled_total(weights):
    return jnp.sin(weights).sum(), lambda g: ((g * jnp.cos(weights)).T,)
  raises(lambda: jax.grad(scaled_total)(jnp.ones((2, 3))))
  d = vv.last()
  (program_input,) = [n for n in d.graph.nodes if n.kind == "input"]
  assert "weights" in program_input.label and "args" not in program_input.label, program_input


def test_one_rule_application_that_fails_at_two_leaves_is_one_diagnosis(path):
  def attn_bwd(res, g):
    q, k, v = res
    dq, dk, dv = jnp.ones_like(q), 2 * jnp.ones_like(k), 3 * jnp.ones_like(v)
    return dq, dv, dk
  attn = custom(lambda q, k, v: (q @ k.T) @ v, attn_bwd)
  q, k, v = jnp.ones((4, 8)), jnp.ones((6, 8)), jnp.ones((6, 5))
  e = raises(lambda: jax.grad(lambda q, k, v: attn(q, k, v).sum(), argnums=(0, 1, 2))(q, k, v))
  (d,) = vv.diagnoses()
  # JAX names the first leaf it checked; the diagnosis leads with the same one.
  assert "output[1]" in str(e) and d.path == "[1]" and d.argument == "k"
  assert [(l.argument, l.expected, l.got) for l in d.leaves] == [
      ("k", "float32[6,8]", "float32[6,5]"), ("v", "float32[6,5]", "float32[6,8]")]
  assert d.detail == "k and v look swapped: each got the other's cotangent type"
  assert d.headline.endswith("; also v.")
  marked = {e.dst + "#" + str(e.position): e.cotangent_got for e in d.graph.edges if e.cotangent_got}
  assert sorted(marked.values()) == ["float32[6,5]", "float32[6,8]"]
  # Said once (its verdict, type-only here as the rule's values are not the gradient, may
  # follow the title).
  assert sum(f.title.startswith("Swap outputs 1 and 2") for f in d.fixes) == 1


# ------------------------------------------------------------ leaves as data

def test_a_structure_diagnosis_lists_every_leaf_by_key_path(path):
  from jupyter_vjpviz.capture.naming.leaf_paths import Key
  f = custom(lambda x, p: x * p["a"] * p["b"], lambda r, g: (g, {"a": g, "c": g}))
  raises(lambda: jax.grad(lambda x, p: f(x, p).sum(), argnums=(0, 1))(
      jnp.ones(3), {"a": jnp.ones(3), "b": jnp.ones(3)}))
  d = only("bwd_structure")
  rows = [(l.path, l.argument, l.expected, l.got) for l in d.leaves]
  assert rows == [
      ((Key("index", 0),), "x", "float32[3]", "float32[3]"),
      ((Key("index", 1), Key("key", "a")), "p['a']", "float32[3]", "float32[3]"),
      ((Key("index", 1), Key("key", "b")), "p['b']", "float32[3]", "missing"),
      ((Key("index", 1), Key("key", "c")), None, "missing", "float32[3]")]
  assert d.to_dict()["leaves"][2]["path"] == [{"kind": "index", "key": 1}, {"kind": "key", "key": "b"}]
  assert d.argument == "p['b']" and "missing p['b']" in d.to_text()
  assert d.detail is None or "swapped" not in d.detail


def test_a_cotangent_tree_of_the_wrong_structure_lists_its_leaves(hook):
  _, f_vjp = jax.vjp(lambda x: (x, {"u": x}), jnp.ones(2))
  raises(lambda: f_vjp((jnp.ones(2), {"v": jnp.ones(2)})))
  d = only("vjp_cotangent_structure")
  assert [(l.name, l.expected, l.got) for l in d.leaves] == [
      ("[0]", "float32[2]", "float32[2]"), ("[1]['u']", "float32[2]", "missing"),
      ("[1]['v']", "missing", "float32[2]")]


# ------------------------------------------------------------ one spelling of an input

def _dense_in_a_loss(argnums):
  dense = custom(lambda x, w: x @ w, lambda res, g: ((g @ res[1].T).T, res[0].T @ g),
                 fwd=lambda x, w: (x @ w, (x, w)))

  def loss(x, w1, w2):
    return dense(jnp.tanh(x @ w1), w2).sum()
  raises(lambda: jax.grad(loss, argnums=argnums)(jnp.ones((4, 5)), jnp.ones((5, 3)),
                                                 jnp.ones((3, 2))))
  return only("bwd_type")


def test_a_rule_input_is_spelled_one_way_and_no_graph_box_reads_like_it(hook):
  d = _dense_in_a_loss((1, 2))
  assert d.argument == "x" and "for input x: float32[4,3]" in d.headline
  assert "  input     x" in d.to_text() and d.to_dict()["argument"] == "x"
  assert [l.argument for l in d.leaves] == ["x"]
  # The loss's own x (not differentiated here: drawn dashed) is another input.
  labels = {n.id: n.label for n in d.graph.nodes if n.kind in ("input", "static")}
  assert "x" not in labels.values() and labels["arg0"] == "x of loss"
  assert "input not differentiated" in d.to_dot()
  assert d.instance is None    # w2 beside w1 is a parameter, not one of several blocks


def test_the_graph_of_a_jitted_loss_compiled_by_the_failing_call_marks_its_inputs(hook):
  """The first call of a fresh ``jax.jit(loss)`` under ``jax.grad`` runs ``loss`` on the
  jit's tracers, not the VJP's: the graph still shows ``w`` as the differentiated input."""
  dense = custom(lambda x, w: x @ w, lambda res, g: ((g @ res[1].T).T, res[0].T @ g),
                 fwd=lambda x, w: (x @ w, (x, w)))

  def loss(w):
    return dense(w, jnp.ones((3, 2))).sum()
  raises(lambda: jax.grad(jax.jit(loss))(jnp.ones((4, 3))))
  d = only("bwd_type")
  assert d.argument == "x"
  inputs = {n.id: n.kind for n in d.graph.nodes if n.kind in ("input", "static")}
  assert inputs.get("in0") == "input" and "arg0" not in inputs, inputs


def test_a_rule_differentiated_itself_is_the_failing_node_of_its_graph(hook):
  """``jax.grad(rule)`` whose fwd calls the rule (so its primal runs, seen by the hook):
  the graph is the rule's call, not its primal's body alone."""
  rule = custom(lambda x: jnp.sin(x).sum(), lambda res, g: ((g * jnp.cos(res[0]))[:2],))
  raises(lambda: jax.grad(rule)(jnp.ones(3)))
  d = only("bwd_type")
  node = d.graph.node(d.node)
  assert node is not None and node.custom and any(e.mismatch for e in d.graph.edges)


def test_a_rule_jitted_itself_is_called_where_the_user_calls_the_jitted_function(hook):
  """JAX's traceback of ``jax.jit(rule)``'s body starts at the rule: no user frame in it."""
  dense = jax.jit(custom(lambda x, w: x @ w, lambda res, g: ((g @ res[1].T).T, res[0].T @ g),
                         fwd=lambda x, w: (x @ w, (x, w))))
  raises(lambda: jax.grad(lambda x: dense(x, jnp.ones((3, 2))).sum())(jnp.ones((4, 3))))
  line = inspect.currentframe().f_lineno - 1
  d = only("bwd_type")
  assert d.call_site == f"{__file__}:{line}" == d.graph.node(d.node).call_site


def test_a_fwd_structure_lists_the_outputs_leaves_not_the_inputs(path):
  f = jax.custom_vjp(lambda x: (x, {"a": x}))
  f.defvjp(lambda x: ((x, {"b": x}), None), lambda r, g: (g[0],))
  raises(lambda: jax.grad(jax.jit(lambda x: f(x)[0].sum()))(jnp.ones(3)))
  d = only("fwd_structure")
  assert [(l.name, l.expected, l.got) for l in d.leaves] == [
      ("[0]", "float32[3]", "float32[3]"), ("[1]['a']", "float32[3]", "missing"),
      ("[1]['b']", "missing", "float32[3]")]
