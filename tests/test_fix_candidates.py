"""The candidate search (fixes/candidates) on real JAX rules with the bugs people make.

Each rule below is broken the way real rules are (a copy-paste slip between two
names, a reduction over too few axes, a top-k that forgets to scatter back, a
stale size, a cotangent computed but not returned, a missing dict entry, a lost
or extra varying mesh axis). The test asserts that the right fix is among the
candidates, judged right by the primal's own autodiff (analysis.oracle), and
that no ill-typed candidate comes before it.
"""
import ast
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from test_fixes import cell, first_problem, lin_rule

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis.values import oracle
from jupyter_vjpviz.fixes import candidates, suggest, verify


def found(d):
  rule = suggest.Rule.of(d, d.site.custom_rule())
  assert rule is not None
  return candidates.for_rule(rule)


def judged(d, code: str) -> oracle.Verdict:
  """The oracle's verdict on the rule(s) ``code`` defines, run on the site's draws."""
  custom_vjp = d.site.custom_rule()
  ns = verify.namespace(custom_vjp)
  exec(compile(code, "<candidate>", "exec"), ns)
  defs = {n.name: ns[n.name] for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)}
  fwd = defs.get(custom_vjp.fwd.__name__, custom_vjp.fwd)
  bwd = defs.get(custom_vjp.bwd.__name__, next(iter(defs.values())))
  return oracle.Oracle.of(d.site, custom_vjp.fun).verdict(fwd, bwd, custom_vjp.symbolic_zeros,
                                                     custom_vjp.nondiff_argnums)


CASES = {
    "copy_paste_name": ("""
@jax.custom_vjp
def mlp(x, w1, w2): return jnp.tanh(x @ w1) @ w2
def mlp_fwd(x, w1, w2):
  h = jnp.tanh(x @ w1)
  return h @ w2, (x, w1, w2, h)
def mlp_bwd(res, g):
  x, w1, w2, h = res
  dh = (g @ w2.T) * (1 - h ** 2)
  dx = dh @ w1.T
  dw1 = x.T @ g
  dw2 = h.T @ g
  return dx, dw1, dw2
mlp.defvjp(mlp_fwd, mlp_bwd)
def loss(x, w1, w2): return mlp(x, w1, w2).sum()
""", (jnp.ones((2, 4)), jnp.ones((4, 5)) / 3, jnp.ones((5, 3)) / 2), "dw1 = x.T @ dh"),
    "wrong_residual_entry": ("""
@jax.custom_vjp
def outer_sum(a, b): return a * b.sum()
def outer_sum_fwd(a, b): return outer_sum(a, b), (a, b)
def outer_sum_bwd(res, g):
  return g * res[1].sum(), (g * res[0]).sum() * jnp.ones_like(res[0])
outer_sum.defvjp(outer_sum_fwd, outer_sum_bwd)
def loss(a, b): return jnp.sin(outer_sum(a, b)).sum()
""", (jnp.arange(3.), jnp.arange(4.) / 4), "jnp.ones_like(res[1])"),
    "sum_over_too_few_axes": ("""
@jax.custom_vjp
def scale(x, b): return x * b
def scale_fwd(x, b): return scale(x, b), (x, b)
def scale_bwd(res, g):
  x, b = res
  return g * b, (g * x).sum(axis=0)
scale.defvjp(scale_fwd, scale_bwd)
def loss(x, b): return jnp.sin(scale(x, b)).sum()
""", (jnp.arange(24.).reshape(2, 3, 4) / 24, jnp.arange(4.)), "(g * x).sum(axis=(0, 1))"),
    "sum_without_keepdims": ("""
@jax.custom_vjp
def rowscale(x, s): return x * s
def rowscale_fwd(x, s): return rowscale(x, s), (x, s)
def rowscale_bwd(res, g):
  x, s = res
  return g * s, (g * x).sum(axis=1)
rowscale.defvjp(rowscale_fwd, rowscale_bwd)
def loss(x, s): return jnp.sin(rowscale(x, s)).sum()
""", (jnp.arange(6.).reshape(2, 3), jnp.ones((2, 1))), "(g * x).sum(axis=1, keepdims=True)"),
    "mask_not_broadcast_back": ("""
@jax.custom_vjp
def masked_sum(x, m): return (x * m[..., None]).sum(-1)
def masked_sum_fwd(x, m): return masked_sum(x, m), m
def masked_sum_bwd(m, g): return g * m, None
masked_sum.defvjp(masked_sum_fwd, masked_sum_bwd)
def loss(x): return jnp.sin(masked_sum(x, jnp.array([[True, False, True], [False, True, True]]))).sum()
""", (jnp.arange(30.).reshape(2, 3, 5) / 30,), "jnp.broadcast_to(jnp.expand_dims(g * m, 2)"),
    "stale_size": ("""
ROWS = 8
@jax.custom_vjp
def colmean(x): return x.mean(0)
def colmean_fwd(x): return colmean(x), x
def colmean_bwd(x, g): return (jnp.broadcast_to(g / ROWS, (ROWS, 3)),)
colmean.defvjp(colmean_fwd, colmean_bwd)
def loss(x): return jnp.sin(colmean(x)).sum()
""", (jnp.arange(12.).reshape(4, 3),), "g / x.shape[0], (x.shape[0], 3)"),
    "computed_not_returned": (lin_rule("dw = x.T @ g\nreturn g @ w.T, g\n"),
                              (jnp.arange(8.).reshape(2, 4) / 8, jnp.arange(12.).reshape(4, 3) / 12),
                              "return g @ w.T, dw"),
    "missing_params_entry": ("""
@jax.custom_vjp
def dense(p, x): return x @ p['w'] + p['b']
def dense_fwd(p, x): return dense(p, x), (p, x)
def dense_bwd(res, g):
  p, x = res
  dw = x.T @ g
  db = g.sum(0)
  dx = g @ p['w'].T
  return {'w': dw}, dx
dense.defvjp(dense_fwd, dense_bwd)
def loss(p, x): return jnp.tanh(dense(p, x)).sum()
""", ({"w": jnp.arange(12.).reshape(4, 3) / 12, "b": jnp.ones(3)}, jnp.ones((2, 4))),
        "{'w': dw, 'b': db}"),
    "missing_tuple_entry": ("""
@jax.custom_vjp
def fma(x, y, z): return x * y + z
def fma_fwd(x, y, z): return fma(x, y, z), (x, y)
def fma_bwd(res, g):
  x, y = res
  dx = g * y
  dy = g * x
  dz = g
  return dx, dz
fma.defvjp(fma_fwd, fma_bwd)
def loss(x, y, z): return jnp.sin(fma(x, y, z)).sum()
""", (jnp.arange(3.), jnp.arange(3.) / 2, jnp.ones(3)), "return (dx, dy, dz)"),
    "top_k_not_scattered": ("""
@jax.custom_vjp
def top2(x): return jax.lax.top_k(x, 2)[0]
def top2_fwd(x):
  values, where = jax.lax.top_k(x, 2)
  return values, where
def top2_bwd(where, g): return (g,)
top2.defvjp(top2_fwd, top2_bwd)
def loss(x): return (top2(x) ** 2).sum()
""", (jnp.array([[3., 1., 4., 1.5], [5., 9., 2., 6.], [5., 3., 5.5, 8.]]),),
        "jnp.put_along_axis(jnp.zeros((3, 4), jnp.float32), where, g, axis=1, inplace=False)"),
    "gather_not_scattered": ("""
@jax.custom_vjp
def rows(x, idx): return x[idx]
def rows_fwd(x, idx): return rows(x, idx), idx
def rows_bwd(idx, g): return g, None
rows.defvjp(rows_fwd, rows_bwd)
def loss(x): return (rows(x, jnp.array([0, 2, 2])) ** 2).sum()
""", (jnp.arange(12.).reshape(4, 3),), "jnp.zeros((4, 3), jnp.float32).at[idx].add(g)"),
    "scale_without_its_factor": ("""
from jax.custom_derivatives import SymbolicZero
@jax.custom_vjp
def batch_norm(x, scale):
  mean, var = x.mean(0), x.var(0)
  return (x - mean) / jnp.sqrt(var + 1e-5) * scale, mean, var
def bn_fwd(x, scale):
  x, scale = x.value, scale.value
  mean, var = x.mean(0), x.var(0)
  inv = 1. / jnp.sqrt(var + 1e-5)
  xhat = (x - mean) * inv
  return (xhat * scale, mean, var), (xhat, inv, scale)
def bn_bwd(res, cts):
  g, g_mean, g_var = cts
  xhat, inv, scale = res
  n = xhat.shape[0]
  d_scale = g.sum(0)
  dxhat = g * scale
  dx = inv * (dxhat - dxhat.mean(0) - xhat * (dxhat * xhat).mean(0))
  if not isinstance(g_mean, SymbolicZero):
    dx = dx + g_mean / n
  if not isinstance(g_var, SymbolicZero):
    dx = dx + g_var * 2. * xhat / (inv * n)
  return dx, d_scale
batch_norm.defvjp(bn_fwd, bn_bwd, symbolic_zeros=True)
def loss(x, scale):
  y, mean, var = batch_norm(x, scale)
  return (y ** 2).sum() + (mean ** 2).sum() + ((var - 1.) ** 2).sum()
""", (jnp.sin(jnp.arange(32.)).reshape(8, 4), jnp.float32(1.5)), "d_scale = (g * xhat).sum(axis=(0, 1))"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_right_fix_is_a_candidate(case):
  code, args, expected = CASES[case]
  d = first_problem(cell(code)["loss"], *args)
  fixes = found(d)
  right = [f for f in fixes if expected in f.code]
  assert right, "\n\n".join(f.code for f in fixes)
  assert judged(d, right[0].code).right
  before = fixes[:fixes.index(right[0])]
  assert all(judged(d, f.code).status != oracle.TYPE_ERROR for f in before)


def test_candidates_are_bounded_and_distinct():
  d = first_problem(cell(CASES["copy_paste_name"][0])["loss"], *CASES["copy_paste_name"][1])
  fixes = found(d)
  assert 0 < len(fixes) <= candidates.PER_RULE
  assert len({f.code for f in fixes}) == len(fixes)


def rebind(d, code: str) -> None:
  """The user's custom_vjp rebound to the bwd ``code`` defines (as Apply does in a cell)."""
  custom_vjp = d.site.custom_rule()
  ns = custom_vjp.bwd.__globals__
  exec(compile(code, "<fix>", "exec"), ns)
  custom_vjp.defvjp(custom_vjp.fwd, ns[custom_vjp.bwd.__name__])
  jax.clear_caches()


def _shard_mapped(hook, code, in_specs, out_specs, *args):
  """The diagnosis of a rule differentiated under shard_map over 4 devices."""
  mesh = jax.make_mesh((4,), ("dp",), axis_types=(jax.sharding.AxisType.Auto,))
  ns = cell(code)
  run = jax.jit(jax.shard_map(jax.grad(ns["loss"], argnums=tuple(range(len(args)))),
                              mesh=mesh, in_specs=in_specs, out_specs=out_specs))
  with pytest.raises(ValueError):
    run(*args)
  return hook.last(), run


@pytest.mark.needs("bwd check of varying axes")
def test_an_invariant_input_gets_its_cotangent_summed_over_the_mesh(hook):
  """w is the same on every device: the per-device cotangent must be psum'd."""
  d, run = _shard_mapped(hook, """
@jax.custom_vjp
def scale(x, w): return x * w
def scale_fwd(x, w): return scale(x, w), (x, w)
def scale_bwd(res, g):
  x, w = res
  dw = (g * x).sum(0)
  return g * w, dw
scale.defvjp(scale_fwd, scale_bwd)
def loss(x, w): return jnp.sin(scale(x, w)).sum()
""", (P("dp"), P()), (P("dp"), P()), jnp.arange(128.).reshape(8, 16) / 128, jnp.arange(16.))
  fixes = found(d)
  assert "jax.lax.psum(dw, 'dp')" in fixes[0].code
  # judged, and applied, inside a shard_map over the mesh the call ran in
  assert d.fixes[0].code == fixes[0].code and d.fixes[0].verdict == "verified", d.fixes[0]
  assert "shard_map over an equivalent mesh ('dp': 4)" in d.fixes[0].note
  assert hook.verify_fix(d, fixes[0].code) == []
  assert hook.apply_fix(d, fixes[0].code).applied
  x, w = jnp.arange(128.).reshape(8, 16) / 128, jnp.arange(16.)
  want = jax.grad(lambda x, w: jnp.sin(x * w).sum(), argnums=(0, 1))(x, w)
  for got, ref in zip(run(x, w), want):
    np.testing.assert_allclose(got, ref, rtol=1e-5)


@pytest.mark.needs("bwd check of varying axes")
def test_an_all_reduce_rule_is_fixed_by_its_transpose_checked_on_the_mesh(hook):
  """Issue 30: a data-parallel mean whose bwd returns pmean(g), invariant where x varies.
  Removing the pmean does not type-check on the mesh (g is invariant) and is dropped;
  the collective's own transpose leads, verified where the program ran."""
  code = """
@jax.custom_vjp
def allreduce(x): return jax.lax.pmean(x, 'dp')
def allreduce_fwd(x): return allreduce(x), None
def allreduce_bwd(_, g): return (jax.lax.pmean(g, 'dp'),)
allreduce.defvjp(allreduce_fwd, allreduce_bwd)
def loss(x): return jnp.sin(allreduce(x)).sum()
"""
  x = jnp.arange(32.).reshape(8, 4) / 32
  d, run = _shard_mapped(hook, code, P("dp"), P("dp"), x)
  mesh = d.site.mesh   # where it ran, as plain data
  assert (mesh.axis_names, mesh.axis_sizes, mesh.manual, mesh.platform) == (
      ("dp",), (4,), ("dp",), "cpu")
  assert mesh.out_varying == (frozenset(),)   # the mean is the same on every device
  first = d.fixes[0]
  assert first.title == "Replace jax.lax.pmean by its transpose" and first.verdict == "verified"
  assert "(jax.lax.pcast(g, 'dp', to='varying') / jax.lax.axis_size('dp'),)" in first.code \
      or "jax.lax.pvary(g, 'dp') / jax.lax.axis_size('dp')" in first.code, first.code
  assert "shard_map over an equivalent mesh ('dp': 4)" in first.note
  assert all(f.verdict != "verified" for f in d.fixes if f.title.startswith("Remove"))
  removed = "def allreduce_bwd(_, g):\n  return (g,)\n"
  assert [p.kind for p in hook.verify_fix(d, removed)] == ["bwd_type"]   # types, on the mesh
  marked = next(f for f in d.fixes if f.title.startswith("Mark"))
  assert marked.verdict == "type-only"   # g on every device: 4 times the mean's cotangent
  assert [p.kind for p in hook.verify_fix(d, marked.code)] == ["bwd_value"]
  assert not hook.apply_fix(d, removed).applied
  assert hook.apply_fix(d, first.code).applied
  want = jax.grad(lambda x: jnp.sin(x.reshape(4, 2, 4).mean(0)).sum())(x)
  np.testing.assert_allclose(run(x)[0], want, rtol=1e-5)


@pytest.mark.needs("bwd check of varying axes")
def test_a_rule_under_a_partly_manual_mesh_is_checked_on_the_same_axes(hook):
  """shard_map manual over 'dp' only of a ('dp', 'tp') mesh: the fixes run on a mesh of
  both axes with only 'dp' manual, as the call did."""
  mesh = jax.make_mesh((2, 2), ("dp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  ns = cell("""
@jax.custom_vjp
def allreduce(x): return jax.lax.psum(x, 'dp')
def allreduce_fwd(x): return allreduce(x), None
def allreduce_bwd(_, g): return (jax.lax.psum(g, 'dp'),)
allreduce.defvjp(allreduce_fwd, allreduce_bwd)
def loss(x): return jnp.sin(allreduce(x)).sum()
""")
  run = jax.jit(jax.shard_map(jax.grad(ns["loss"]), mesh=mesh, in_specs=P("dp"),
                              out_specs=P("dp"), axis_names={"dp"}))
  with pytest.raises(ValueError):
    run(jnp.arange(32.).reshape(8, 4) / 32)
  d = hook.last()
  assert (d.site.mesh.axis_sizes, d.site.mesh.manual) == ((2, 2), ("dp",))
  first = d.fixes[0]
  assert first.verdict == "verified" and "('dp': 2, 'tp': 2)" in first.note
  assert "jax.lax.pcast(g, 'dp', to='varying')" in first.code or "pvary(g, 'dp')" in first.code


@pytest.mark.needs("bwd check of varying axes")
def test_a_mesh_this_process_cannot_make_leaves_fixes_unverified(hook, monkeypatch):
  """Fewer devices than the mesh the call ran on: nothing is verified, and the note says why."""
  from jupyter_vjpviz.analysis.values import on_mesh
  d, _ = _shard_mapped(hook, """
@jax.custom_vjp
def allreduce(x): return jax.lax.pmean(x, 'dp')
def allreduce_fwd(x): return allreduce(x), None
def allreduce_bwd(_, g): return (jax.lax.pmean(g, 'dp'),)
allreduce.defvjp(allreduce_fwd, allreduce_bwd)
def loss(x): return jnp.sin(allreduce(x)).sum()
""", P("dp"), P("dp"), jnp.arange(32.).reshape(8, 4) / 32)
  on_mesh._mesh.cache_clear()
  monkeypatch.setattr(jax, "devices", lambda *a: [])
  try:
    again = suggest.attach(dataclasses.replace(d, fixes=()))
  finally:
    on_mesh._mesh.cache_clear()
  assert again.fixes and all(f.verdict != "verified" for f in again.fixes)
  assert "mesh of 4 cpu devices; this process has 0" in again.fixes[0].note


@pytest.mark.needs("bwd check of varying axes")
def test_a_collective_in_an_assignment_is_removed(hook):
  """A psum two statements before the return loses {V:dp}; the fix removes it there."""
  d, run = _shard_mapped(hook, """
@jax.custom_vjp
def double(x): return x * 2.
def double_fwd(x): return double(x), None
def double_bwd(_, g):
  dx = jax.lax.psum(2. * g, 'dp')
  return (dx,)
double.defvjp(double_fwd, double_bwd)
def loss(x): return jnp.sin(double(x)).sum()
""", P("dp"), P("dp"), jnp.arange(32.).reshape(8, 4) / 32)
  fixes = found(d)
  assert "dx = 2. * g" in fixes[0].code
  rebind(d, fixes[0].code)
  x = jnp.arange(32.).reshape(8, 4) / 32
  np.testing.assert_allclose(run(x)[0], 2. * jnp.cos(2. * x), rtol=1e-5)


def test_a_discarded_underscore_is_never_a_candidate_cotangent():
  """``_, vjp = jax.vjp(...)``: ``_`` has the expected type (the primal output) but is
  discarded by convention; "Return _" was offered before."""
  code = """
@jax.custom_vjp
def gelu(x): return jax.nn.gelu(x)
def gelu_fwd(x): return gelu(x), x
def gelu_bwd(x, g):
  _, vjp = jax.vjp(jax.nn.gelu, x)
  return vjp(g)[0].astype(jnp.float16),
gelu.defvjp(gelu_fwd, gelu_bwd)
def loss(x): return jnp.sin(gelu(x)).sum()
"""
  d = first_problem(cell(code)["loss"], jnp.linspace(-1., 1., 8))
  assert not any("return _" in f.code for f in found(d) + list(d.fixes)), \
      [f.title for f in d.fixes]
  assert d.fixes[0].title == "Cast to float32" and d.fixes[0].verdict == "verified"


SLIPS = {
    "sign": ("""
@jax.custom_vjp
def squash(x):
  return jnp.tanh(x)
def squash_fwd(x):
  y = jnp.tanh(x)
  return y, y
def squash_bwd(y, g):
  return (g * (1. + y ** 2),)
squash.defvjp(squash_fwd, squash_bwd)
def loss(x): return jnp.sin(squash(x)).sum()
""", lambda: jnp.linspace(-1., 1., 6), "Use `1.0 - y ** 2`"),
    "scatter": ("""
@jax.custom_vjp
def rows(x, idx):
  return x[idx]
def rows_fwd(x, idx):
  return x[idx], (idx, x)
def rows_bwd(res, g):
  idx, x = res
  return jnp.zeros_like(x).at[idx].set(g), None
rows.defvjp(rows_fwd, rows_bwd)
def loss(x): return jnp.sin(rows(x, jnp.array([0, 2, 0, 0, 1, 2]))).sum()
""", lambda: jnp.ones((3, 2)), "Accumulate with .add"),
    "cotangent": ("""
@jax.custom_vjp
def gate(x):
  return jax.nn.sigmoid(x)
def gate_fwd(x):
  s = jax.nn.sigmoid(x)
  return s, s
def gate_bwd(s, g):
  return (s * (1. - s),)
gate.defvjp(gate_fwd, gate_bwd)
def loss(x): return jnp.sin(gate(x)).sum()
""", lambda: jnp.linspace(-2., 2., 5), "Multiply by g"),
    "axis": ("""
import functools
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def running(x, axis):
  return jnp.cumsum(x, axis)
def running_fwd(x, axis):
  return running(x, axis), None
def running_bwd(axis, _, g):
  return (jnp.flip(jnp.cumsum(jnp.flip(g, 0), 0), 0),)
running.defvjp(running_fwd, running_bwd)
def loss(x): return jnp.sin(running(x, 1)).sum()
""", lambda: jnp.ones((3, 4)), "Use axis for the axis 0"),
    "scale": ("""
@jax.custom_vjp
def energy(x):
  return x ** 2
def energy_fwd(x):
  return x ** 2, x
def energy_bwd(x, g):
  return (g * x,)
energy.defvjp(energy_fwd, energy_bwd)
def loss(x): return jnp.sin(energy(x)).sum()
""", lambda: jnp.linspace(-1., 1., 4), "Scale by 2.0"),
}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_value_slip_is_undone_in_the_rules_own_terms(slip):
  """Well-typed and wrong in value, found by gradcheck: the first fix is the slip undone
  (a sign, .set for .add, the cotangent forgotten, a literal axis, a factor), verified,
  not the primal differentiated. Before: the fallback only, or no fix at all."""
  code, x, title = SLIPS[slip]
  (d,) = vv.gradcheck(cell(code)["loss"], x())
  first = d.fixes[0]
  assert first.title == title and first.verdict == "verified", [(f.title, f.verdict) for f in d.fixes]
  assert judged(d, first.code).status == oracle.RIGHT
  assert all(f.verdict != "type-only" for f in d.fixes), "a value fix still wrong mends nothing"


# ------------------------------------------- a comment the fix made wrong is dropped

@jax.custom_vjp
def _outer_product(w, x):
  return w @ x


def _outer_fwd(w, x):
  return w @ x, (w, x)


def _outer_bwd(res, g):
  w, x = res
  dW = jnp.outer(x, g)  # BUG: should be jnp.outer(g, x)
  return dW, w.T @ g


_outer_product.defvjp(_outer_fwd, _outer_bwd)


def test_a_fix_drops_the_comment_on_the_line_it_rewrites(hook):
  """``# BUG: should be ...`` describes the code the fix replaces: the user keeps the
  fix's text, so that comment goes; the rule's other lines are as written."""
  with pytest.raises(ValueError):
    jax.grad(lambda w, x: _outer_product(w, x).sum())(jnp.ones((3, 2)), jnp.ones(2))
  first = hook.last().fixes[0]
  assert first.verdict == "verified"
  assert "dW = jnp.outer(g, x)\n" in first.code and "BUG" not in first.code
  assert "w, x = res" in first.code


def test_the_bad_line_is_where_the_wrong_cotangent_was_made():
  """``d_scale = g.sum(0)`` made the wrong cotangent; ``return dx, d_scale`` only returned it."""
  code, args, _ = CASES["scale_without_its_factor"]
  d = first_problem(cell(code)["loss"], *args)
  text = d.rule_text
  assert text.text.splitlines()[text.bad_line - text.start].strip() == "d_scale = g.sum(0)"


MISSING = """
@jax.custom_gradient
def f(x, w):
  y = jnp.sin(x) * w
  def f_bwd(g):
    dx = jnp.cos(x) * w * g
    dw = (jnp.sin(x) * g).sum(0)
    return (dx,)
  return y, f_bwd
def loss(x, w): return (f(x, w) ** 2).sum()
"""


def test_a_missing_cotangent_is_named_and_returned_from_its_local():
  """A custom_gradient closure that computed ``dw`` and left it out: the headline names
  ``w``, and a fix returns ``dw`` (no zeros, no rewrite of the rule)."""
  d = first_problem(cell(MISSING)["loss"], jnp.ones((3, 4)), jnp.ones(4))
  assert d.headline.endswith("no cotangent for input w.")
  titles = [f.title for f in d.fixes]
  right = [f for f in d.fixes if "return (dx, dw)" in f.code]
  assert right and right[0].verdict != "type-only", titles
  assert titles.index(right[0].title) < next(
      (k for k, t in enumerate(titles) if t.startswith("Add None")), len(titles)), titles


@pytest.mark.needs("bwd check of varying axes")
def test_a_reduction_over_the_wrong_axis_name_is_fixed_by_that_name(hook):
  """``psum`` over the model axis where the data axis was meant: one token, verified, first
  (before wrapping it in another collective, or differentiating the primal)."""
  mesh = jax.make_mesh((2, 2), ("dp", "mp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  ns = cell("""
@jax.custom_vjp
def dense(x, w): return x @ w
def dense_fwd(x, w): return x @ w, (x, w)
def dense_bwd(res, g):
  x, w = res
  dw = jax.lax.psum(x.T @ g, "mp")
  return g @ w.T, dw
dense.defvjp(dense_fwd, dense_bwd)
def loss(x, w): return (dense(x, w) ** 2).sum()
""")
  run = jax.jit(jax.shard_map(jax.grad(ns["loss"], argnums=(0, 1)), mesh=mesh,
                              in_specs=(P("dp"), P()), out_specs=(P("dp"), P())))
  x, w = jnp.arange(32.).reshape(8, 4) / 32, jnp.arange(12.).reshape(4, 3) / 12
  with pytest.raises(ValueError):
    run(x, w)
  d = hook.last()
  assert 'jax.lax.psum(x.T @ g, "dp")' in d.fixes[0].code, [f.title for f in d.fixes]
  assert d.fixes[0].verdict == "verified", d.fixes[0].note
  assert hook.apply_fix(d, d.fixes[0].code).applied
  want = jax.grad(lambda x, w: ((x @ w) ** 2).sum(), argnums=(0, 1))(x, w)
  for got, ref in zip(run(x, w), want):
    np.testing.assert_allclose(got, ref, rtol=1e-5)
