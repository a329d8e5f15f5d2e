"""A wrong leaf built through library helpers (``eqx.tree_at``, ``dataclasses.replace``,
``_replace``, ``jax.tree.map``, dict builders, flax-style param dicts) is followed back to
the expression that built it, and fixed there, verified against the primal's autodiff."""
import difflib
import linecache

import jax
import jax.numpy as jnp
import pytest
eqx = pytest.importorskip("equinox")

import jupyter_vjpviz as vv
from test_fixes import cell

PRIMAL = """
import dataclasses, typing
import equinox as eqx

class Linear(eqx.Module):
  weight: jax.Array
  bias: jax.Array

class Params(typing.NamedTuple):
  w: jax.Array
  b: jax.Array

def dense(p, x): return p['w'] @ x + p['b']
"""

DICT_RULE = PRIMAL + """
f = jax.custom_vjp(dense)
def f_fwd(p, x): return dense(p, x), (p, x)
def f_bwd(res, g):
  p, x = res
{body}
f.defvjp(f_fwd, f_bwd)
def loss(p, x): return jnp.sin(f(p, x)).sum()
"""

W, B, X = jnp.arange(12.).reshape(3, 4) / 12, jnp.arange(3.) / 3, jnp.arange(4.) / 4 + .1


def _diagnosed(code, loss, *args):
  """The diagnosis of ``loss``'s gradient at ``args`` (a callable one: of the cell's names,
  for a value of a class the cell defines)."""
  ns = cell(code)
  args = [a(ns) if callable(a) else a for a in args]
  with pytest.raises((ValueError, TypeError, RuntimeError)):
    jax.grad(ns[loss])(*args)
  d = vv.last()
  assert d is not None and d.kind == "bwd_type", d
  return d


def _fixed_where(d, edited: str, into: str):
  """The first fix is verified, right by value, and changes only the line ``edited`` of
  the rule (into one containing ``into``)."""
  first = d.fixes[0] if d.fixes else None
  assert first is not None and first.verdict == "verified", [(f.title, f.verdict) for f in d.fixes]
  assert vv.verify_fix(d, first.code) == []
  fixed = first.code.splitlines()
  path, _, line = d.rule_source.rpartition(":")
  rule = [l.rstrip("\n") for l in linecache.getlines(path)[int(line) - 1:][:len(fixed)]]
  changed = [l[2:] for l in difflib.ndiff(rule, fixed) if l[:1] in "+-"]
  assert len(changed) == 2 and edited in changed[0] and into in changed[1], changed


def test_a_leaf_set_by_eqx_tree_at_is_fixed_in_its_replacement(hook):
  code = PRIMAL + """
@eqx.filter_custom_vjp
def linear(inputs):
  layer, x = inputs
  return layer.weight @ x + layer.bias

@linear.def_fwd
def linear_fwd(perturbed, inputs):
  return linear(inputs), inputs

@linear.def_bwd
def linear_bwd(res, g, perturbed, inputs):
  layer, x = res
  dW = jnp.outer(x, g)
  db = g
  dx = layer.weight.T @ g
  return eqx.tree_at(lambda l: (l.weight, l.bias), layer, (dW, db)), dx

def loss(layer, x): return jnp.sin(linear((layer, x))).sum()
"""
  ns = cell(code)
  d = _diagnosed(code, "loss", ns["Linear"](W, B), X)
  assert d.argument == "inputs[0].weight"
  _fixed_where(d, "dW = jnp.outer(x, g)", "dW = jnp.outer(g, x)")


def test_a_local_unpacked_from_a_display_is_followed(hook):
  d = _diagnosed(DICT_RULE.format(body="  dw, db = jnp.outer(x, g), g\n"
                                       "  grads = {'w': dw, 'b': db}\n"
                                       "  out = grads, p['w'].T @ g\n"
                                       "  return out"), "loss", {"w": W, "b": B}, X)
  _fixed_where(d, "dw, db = jnp.outer(x, g), g", "dw, db = jnp.outer(g, x), g")


def test_a_dict_call_and_an_unpacked_dict_are_followed(hook):
  d = _diagnosed(DICT_RULE.format(body="  base = dict(b=g, w=jnp.outer(x, g))\n"
                                       "  return {**base, 'b': g}, p['w'].T @ g"),
                 "loss", {"w": W, "b": B}, X)
  _fixed_where(d, "base = dict(b=g, w=jnp.outer(x, g))", "w=jnp.outer(g, x)")


@pytest.mark.parametrize("build", ["dataclasses.replace(p, weight=jnp.outer(x, g), bias=g)",
                                   "p._replace(w=jnp.outer(x, g), b=g)",
                                   "Linear(jnp.outer(x, g), g)",    # an equinox Module's fields
                                   "Params(jnp.outer(x, g), g)"])   # a NamedTuple's
def test_a_field_set_by_replace_or_a_positional_constructor_is_fixed_where_it_is_set(hook, build):
  named = "_replace" in build or build.startswith("Params")
  code = PRIMAL + f"""
def lin(p, x): return {'p.w' if named else 'p.weight'} @ x + {'p.b' if named else 'p.bias'}
f = jax.custom_vjp(lin)
def f_fwd(p, x): return lin(p, x), (p, x)
def f_bwd(res, g):
  p, x = res
  return {build}, {'p.w' if named else 'p.weight'}.T @ g
f.defvjp(f_fwd, f_bwd)
def loss(p, x): return jnp.sin(f(p, x)).sum()
"""
  d = _diagnosed(code, "loss", lambda ns: ns["Params" if named else "Linear"](W, B), X)
  _fixed_where(d, "jnp.outer(x, g)", "jnp.outer(g, x)")


def test_a_named_where_of_eqx_tree_at_and_a_rebound_local_are_followed(hook):
  """``where`` a function of the cell (``gain_of``), and the tree rebound from itself by a
  second ``tree_at``: the leaf is the first one's replacement."""
  code = PRIMAL + """
def weight_of(l):
  return l.weight

def lin(l, x): return l.weight @ x + l.bias
f = jax.custom_vjp(lin)
def f_fwd(l, x): return lin(l, x), (l, x)
def f_bwd(res, g):
  l, x = res
  dl = eqx.tree_at(weight_of, l, jnp.outer(x, g))
  dl = eqx.tree_at(lambda t: t.bias, dl, g)
  return dl, l.weight.T @ g
f.defvjp(f_fwd, f_bwd)
def loss(l, x): return jnp.sin(f(l, x)).sum()
"""
  ns = cell(code)
  d = _diagnosed(code, "loss", ns["Linear"](W, B), X)
  _fixed_where(d, "eqx.tree_at(weight_of, l, jnp.outer(x, g))", "jnp.outer(g, x)")


def test_a_leaf_computed_by_a_mapped_function_is_fixed_inside_it(hook):
  d = _diagnosed(DICT_RULE.format(body="  def flip(a):\n"
                                       "    return a.T\n"
                                       "  grads = jax.tree.map(flip, {'w': jnp.outer(g, x), 'b': g})\n"
                                       "  return grads, p['w'].T @ g"),
                 "loss", {"w": W, "b": B}, X)
  _fixed_where(d, "return a.T", "return a")


def test_a_flax_style_param_dict_is_followed_to_the_kernel(hook):
  code = """
def dense(v, x):
  layer = v['params']['Dense_0']
  return layer['kernel'].T @ x + layer['bias']
f = jax.custom_vjp(dense)
def f_fwd(v, x): return dense(v, x), (v, x)
def f_bwd(res, g):
  v, x = res
  layer = {'kernel': jnp.outer(g, x), 'bias': g}
  return {'params': {'Dense_0': layer}}, v['params']['Dense_0']['kernel'] @ g
f.defvjp(f_fwd, f_bwd)
def loss(v, x): return jnp.sin(f(v, x)).sum()
"""
  d = _diagnosed(code, "loss", {"params": {"Dense_0": {"kernel": W.T, "bias": B}}}, X)
  assert d.argument == "v['params']['Dense_0']['kernel']"
  _fixed_where(d, "'kernel': jnp.outer(g, x)", "'kernel': jnp.outer(x, g)")


def test_a_leaf_built_by_an_opaque_helper_is_diagnosed_with_no_fix_at_it(hook):
  """No expression of the rule builds the wrong leaf: no rewrite of the helper's call is
  offered as if it reached it, only the primal differentiated, verified."""
  d = _diagnosed(PRIMAL + """
def grads_of(x, g): return {'w': jnp.outer(x, g), 'b': g}
f = jax.custom_vjp(dense)
def f_fwd(p, x): return dense(p, x), (p, x)
def f_bwd(res, g):
  p, x = res
  return grads_of(x, g), p['w'].T @ g
f.defvjp(f_fwd, f_bwd)
def loss(p, x): return jnp.sin(f(p, x)).sum()
""", "loss", {"w": W, "b": B}, X)
  assert d.argument == "p['w']"
  assert d.fixes and all("by differentiating dense" in f.title for f in d.fixes), \
      [f.title for f in d.fixes]   # only replacing the cotangent whole: no edit at the call
  assert all(vv.verify_fix(d, f.code) == [] for f in d.fixes if f.verdict == "verified")
