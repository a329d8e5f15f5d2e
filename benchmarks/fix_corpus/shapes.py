"""Held-out rules of the last fix shapes (issue 39), written as users write them.

Cotangents of pytree inputs returned in the wrong container (an equinox layer, a
dataclass, a NamedTuple, a flax struct, a registered node, a nested model), a custom_vjp
applied inside its own bwd (the fixed point of JAX's custom derivative docs) or a
pullback's one-element tuple returned bare, ``symbolic_zeros=True`` rules wrong only on
the branch for an output given no cotangent (their cell's ``use`` drops that output), a
host callback declaring float64 while JAX runs without x64, and rules that compute in
float16 on purpose (``Base.rtol``: judged at that precision; the fix that keeps that
arithmetic should lead). Measured with ``fix_quality --held-out`` before any change for
them; each right cell is asserted equal to its reference first, as for ``held_out``.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .held_out import Case, eqx, positive
from .rules import normal

KINDS = ("pytree_built", "nested_rule", "symbolic_zeros", "callback", "precision")
RAISING = ("callback",)
"""Kinds whose rule raises in its own code (``bwd_raised``): kept, unlike a mutation's own bug."""
F16 = 2e-3
"""float16's tolerance (``judge.RTOL``): what a rule computing in it on purpose is judged at."""


def c(name, kind, note, right, wrong, args, rtol=None) -> Case:
  assert kind in KINDS, kind
  wrong = (wrong,) if isinstance(wrong[0], str) else wrong
  return Case(name, kind, note, right, tuple(wrong), args, rtol)


# ------------------------------------------------------------ the input's own type

class Params(NamedTuple):
  """A NamedTuple of parameters (the cells import it)."""
  w: jax.Array
  b: jax.Array


@functools.partial(jax.tree_util.register_dataclass, data_fields=["gain", "bias"], meta_fields=[])
@dataclasses.dataclass
class Norm:
  gain: jax.Array
  bias: jax.Array


class Pair:
  """A registered pytree node that is no dataclass: built only by its structure."""

  def __init__(self, first, second):
    self.first, self.second = first, second


jax.tree_util.register_pytree_node(Pair, lambda p: ((p.first, p.second), None),
                                   lambda _, kids: Pair(*kids))

try:
  import flax.struct

  @flax.struct.dataclass
  class Gate:
    scale: jax.Array
    shift: jax.Array
except ImportError:   # no flax: its case is left out
  Gate = None


if eqx is not None:
  class Dense(eqx.Module):
    weight: jax.Array
    bias: jax.Array

  class MLP(eqx.Module):
    layers: list


EQX_TUPLE = """
import equinox as eqx

from fix_corpus.shapes import Dense

@jax.custom_vjp
def dense(layer, x):
  return x @ layer.weight.T + layer.bias

def dense_fwd(layer, x):
  return dense(layer, x), (layer, x)

def dense_bwd(res, g):
  layer, x = res
  dW = g.T @ x
  db = g.sum(0)
  dlayer = eqx.tree_at(lambda l: (l.weight, l.bias), layer, (dW, db))
  return dlayer, g @ layer.weight

dense.defvjp(dense_fwd, dense_bwd)
"""

EQX_NESTED = """
import equinox as eqx

from fix_corpus.shapes import MLP

@jax.custom_vjp
def mlp(model, x):
  h = jnp.tanh(x @ model.layers[0].weight.T + model.layers[0].bias)
  return h @ model.layers[1].weight.T + model.layers[1].bias

def mlp_fwd(model, x):
  h = jnp.tanh(x @ model.layers[0].weight.T + model.layers[0].bias)
  return h @ model.layers[1].weight.T + model.layers[1].bias, (model, x, h)

def mlp_bwd(res, g):
  model, x, h = res
  dW1, db1 = g.T @ h, g.sum(0)
  dz = (g @ model.layers[1].weight) * (1. - h ** 2)
  dW0, db0 = dz.T @ x, dz.sum(0)
  grads = eqx.tree_at(lambda m: (m.layers[0].weight, m.layers[0].bias, m.layers[1].weight,
                                 m.layers[1].bias), model, (dW0, db0, dW1, db1))
  return grads, dz @ model.layers[0].weight

mlp.defvjp(mlp_fwd, mlp_bwd)
"""

DATACLASS_NORM = """
from fix_corpus.shapes import Norm

@jax.custom_vjp
def affine_norm(p, x):
  xhat = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
  return xhat * p.gain + p.bias

def affine_norm_fwd(p, x):
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  inv = 1. / jnp.sqrt(var + 1e-5)
  xhat = (x - mu) * inv
  return xhat * p.gain + p.bias, (p, xhat, inv)

def affine_norm_bwd(res, g):
  p, xhat, inv = res
  dxhat = g * p.gain
  dx = inv * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
  dp = Norm(gain=(g * xhat).sum(0), bias=g.sum(0))
  return dp, dx

affine_norm.defvjp(affine_norm_fwd, affine_norm_bwd)
"""

NAMEDTUPLE = """
from fix_corpus.shapes import Params

@jax.custom_vjp
def linear(params, x):
  return x @ params.w + params.b

def linear_fwd(params, x):
  return linear(params, x), (params, x)

def linear_bwd(res, g):
  params, x = res
  return Params(x.T @ g, g.sum(0)), g @ params.w.T

linear.defvjp(linear_fwd, linear_bwd)
"""

FLAX_STRUCT = """
from fix_corpus.shapes import Gate

@jax.custom_vjp
def gated(gate, x):
  return jax.nn.sigmoid(x * gate.scale + gate.shift) * x

def gated_fwd(gate, x):
  s = jax.nn.sigmoid(x * gate.scale + gate.shift)
  return s * x, (gate, x, s)

def gated_bwd(res, g):
  gate, x, s = res
  dz = g * x * s * (1. - s)
  dgate = gate.replace(scale=(dz * x).sum(0), shift=dz.sum(0))
  return dgate, g * s + dz * gate.scale

gated.defvjp(gated_fwd, gated_bwd)
"""

REGISTERED_NODE = """
from fix_corpus.shapes import Pair

@jax.custom_vjp
def bilinear(pair, w):
  return (pair.first @ w) * pair.second

def bilinear_fwd(pair, w):
  return bilinear(pair, w), (pair, w)

def bilinear_bwd(res, g):
  pair, w = res
  u = pair.first @ w
  dfirst = (g * pair.second) @ w.T
  dsecond = g * u
  dw = pair.first.T @ (g * pair.second)
  return Pair(dfirst, dsecond), dw

bilinear.defvjp(bilinear_fwd, bilinear_bwd)
"""


# ------------------------------------------------------------ nested rules

FIXED_POINT = """
from functools import partial

from fix_corpus.shapes import newton_sqrt_step

@partial(jax.custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x_guess):
  def cond_fun(carry):
    x_prev, x = carry
    return jnp.any(jnp.abs(x_prev - x) > 1e-6)

  def body_fun(carry):
    _, x = carry
    return x, f(a, x)

  _, x_star = jax.lax.while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))
  return x_star

def fixed_point_fwd(f, a, x_init):
  x_star = fixed_point(f, a, x_init)
  return x_star, (a, x_star)

def rev_iter(f, packed, u):
  a, x_star, x_star_bar = packed
  _, vjp_x = jax.vjp(lambda x: f(a, x), x_star)
  return x_star_bar + vjp_x(u)[0]

def fixed_point_rev(f, res, x_star_bar):
  a, x_star = res
  _, vjp_a = jax.vjp(lambda a: f(a, x_star), a)
  a_bar, = vjp_a(fixed_point(partial(rev_iter, f), (a, x_star, x_star_bar), x_star_bar))
  return a_bar, jnp.zeros_like(x_star)

fixed_point.defvjp(fixed_point_fwd, fixed_point_rev)

def reference(f, a, x_guess):   # Newton's square root converges to it
  return jnp.sqrt(a) + 0. * x_guess
"""

PULLBACK_TUPLE = """
from functools import partial

@partial(jax.custom_vjp, nondiff_argnums=(0,))
def checkpointed(f, x):
  # recompute f in the backward pass instead of saving its intermediates
  return f(x)

def checkpointed_fwd(f, x):
  return f(x), x

def checkpointed_bwd(f, x, g):
  _, pullback = jax.vjp(f, x)
  dx, = pullback(g)
  return (dx,)

checkpointed.defvjp(checkpointed_fwd, checkpointed_bwd)

def use(f, x):
  return checkpointed(lambda v: f(v) * 2., x)
"""


# ------------------------------------------------------------ symbolic zeros

BATCH_NORM_SZ = """
SymbolicZero = jax.custom_derivatives.SymbolicZero

@jax.custom_vjp
def batch_norm(x, scale):
  mu, var = x.mean(0), x.var(0)
  return (x - mu) / jnp.sqrt(var + 1e-5) * scale, (mu, var)

def batch_norm_fwd(x, scale):
  x, scale = x.value, scale.value
  mu, var = x.mean(0), x.var(0)
  inv = 1. / jnp.sqrt(var + 1e-5)
  xhat = (x - mu) * inv
  return (xhat * scale, (mu, var)), (x, mu, xhat, inv, scale)

def batch_norm_bwd(res, g):
  x, mu, xhat, inv, scale = res
  gy, (gmu, gvar) = g
  n = x.shape[0]
  dxhat = gy * scale
  dx = inv * (dxhat - dxhat.mean(0) - xhat * (dxhat * xhat).mean(0))
  if isinstance(gmu, SymbolicZero) and isinstance(gvar, SymbolicZero):
    dscale = (gy * xhat).sum(0)   # the statistics unused: the common, fast path
  else:
    dx = dx + gmu / n + gvar * 2. * (x - mu) / n
    dscale = (gy * xhat).sum(0)
  return dx, dscale

batch_norm.defvjp(batch_norm_fwd, batch_norm_bwd, symbolic_zeros=True)

def use(x, scale):   # the statistics given no cotangent, as a training step uses them
  return batch_norm(x, scale)[0]
"""

MOMENTS_SZ = """
SymbolicZero = jax.custom_derivatives.SymbolicZero

@jax.custom_vjp
def moments(x):
  mu = x.mean(0)
  return mu, ((x - mu) ** 2).mean(0)

def moments_fwd(x):
  x = x.value
  mu = x.mean(0)
  return (mu, ((x - mu) ** 2).mean(0)), (x, mu)

def moments_bwd(res, g):
  x, mu = res
  gmu, gvar = g
  n = x.shape[0]
  if isinstance(gvar, SymbolicZero):
    dx = jnp.broadcast_to(gmu / n, x.shape)
  else:
    dx = gmu / n + gvar * 2. * (x - mu) / n
  return (dx,)

moments.defvjp(moments_fwd, moments_bwd, symbolic_zeros=True)

def use(x):   # only the mean is used
  return moments(x)[0]
"""


# ------------------------------------------------------------ host callbacks

CALLBACK_ERF = """
import scipy.special

def _host_erf(x):
  return scipy.special.erf(x).astype(x.dtype)

def _host_derf(x):
  return 2. / np.sqrt(np.pi) * np.exp(-np.asarray(x, np.float64) ** 2)

@jax.custom_vjp
def erf(x):
  return jax.pure_callback(_host_erf, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
                           vmap_method="expand_dims")

def erf_fwd(x):
  return erf(x), x

def erf_bwd(x, g):
  d = jax.pure_callback(_host_derf, jax.ShapeDtypeStruct(x.shape, np.float32), x,
                        vmap_method="expand_dims")
  return (g * d,)

erf.defvjp(erf_fwd, erf_bwd)

def reference(x):
  return jax.scipy.special.erf(x)
"""

CALLBACK_GAMMA = """
import scipy.special

def _log_gamma(a):
  return scipy.special.gammaln(a).astype(a.dtype)

def _digamma(a):
  return scipy.special.digamma(np.asarray(a, np.float64))

@jax.custom_vjp
def lgamma(a):
  return jax.pure_callback(_log_gamma, jax.ShapeDtypeStruct(a.shape, a.dtype), a)

def lgamma_fwd(a):
  return lgamma(a), a

def lgamma_bwd(a, g):
  psi = jax.pure_callback(_digamma, jax.ShapeDtypeStruct(a.shape, jnp.float32), a)
  return (g * psi,)

lgamma.defvjp(lgamma_fwd, lgamma_bwd)

def reference(a):
  return jax.scipy.special.gammaln(a)
"""


# ------------------------------------------------------------ a precision on purpose

GELU_F16_TANGENT = """
@jax.custom_jvp
def gelu32(x):
  return 0.5 * x * (1. + jnp.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

@gelu32.defjvp
def gelu32_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  # the derivative in float16, as the fused kernel computes it
  h = x.astype(jnp.float16)
  u = jnp.tanh(0.7978845608 * (h + 0.044715 * h ** 3))
  d = 0.5 * (1. + u) + 0.5 * h * (1. - u ** 2) * 0.7978845608 * (1. + 3. * 0.044715 * h ** 2)
  return gelu32(x), (t.astype(jnp.float16) * d).astype(t.dtype)
"""

LN_F16_BWD = """
@jax.custom_vjp
def ln16(x):
  mu = x.mean(-1, keepdims=True)
  return (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)

def ln16_fwd(x):
  y = ln16(x)
  return y, (y, jnp.sqrt(((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True) + 1e-5))

def ln16_bwd(res, g):
  # the backward pass in float16 to halve its memory, on purpose
  y, sd = (r.astype(jnp.float16) for r in res)
  g16 = g.astype(jnp.float16)
  dx = (g16 - g16.mean(-1, keepdims=True) - y * (g16 * y).mean(-1, keepdims=True)) / sd
  return (dx.astype(g.dtype),)

ln16.defvjp(ln16_fwd, ln16_bwd)
"""


def newton_sqrt_step(a, x):
  """Newton's step for the square root of ``a`` (the cells import it)."""
  return 0.5 * (x + a / x)


def _double_tanh(v):
  return jnp.tanh(v)


CASES = (
    c("affine_norm", "pytree_built", "the dataclass's cotangent returned as a tuple",
      DATACLASS_NORM, ("dp = Norm(gain=(g * xhat).sum(0), bias=g.sum(0))",
                       "dp = ((g * xhat).sum(0), g.sum(0))"),
      lambda r: (Norm(positive(r, 5), normal(r, 5)), normal(r, 4, 5))),
    c("linear", "pytree_built", "the NamedTuple's cotangent returned as a plain tuple",
      NAMEDTUPLE, ("return Params(x.T @ g, g.sum(0)), g @ params.w.T",
                   "return (x.T @ g, g.sum(0)), g @ params.w.T"),
      lambda r: (Params(normal(r, 5, 3), normal(r, 3)), normal(r, 4, 5))),
    c("bilinear", "pytree_built", "a registered node's cotangent returned as a list",
      REGISTERED_NODE, ("return Pair(dfirst, dsecond), dw", "return [dfirst, dsecond], dw"),
      lambda r: (Pair(normal(r, 4, 3), normal(r, 4, 5)), normal(r, 3, 5))),
    c("fixed_point", "nested_rule", "a_bar = vjp_a(...): the pullback's 1-tuple returned "
      "(JAX's fixed point, applied inside its own bwd)",
      FIXED_POINT, ("a_bar, = vjp_a(", "a_bar = vjp_a("),
      lambda r: (newton_sqrt_step, positive(r, 3) + 1., positive(r, 3) + 1.)),
    c("checkpointed", "nested_rule", "the pullback's 1-tuple returned where an array belongs "
      "(a nondiff function made per call)",
      PULLBACK_TUPLE, ("dx, = pullback(g)", "dx = pullback(g)"),
      lambda r: (_double_tanh, normal(r, 3, 4))),
    c("batch_norm", "symbolic_zeros", "scale's gradient not summed on the path for unused "
      "statistics (symbolic zeros)",
      BATCH_NORM_SZ, ("dscale = (gy * xhat).sum(0)   # the statistics unused",
                      "dscale = gy * xhat   # the statistics unused"),
      lambda r: (normal(r, 6, 3), positive(r, 3))),
    c("moments", "symbolic_zeros", "the mean's cotangent not broadcast on the path for an "
      "unused variance (symbolic zeros)",
      MOMENTS_SZ, ("dx = jnp.broadcast_to(gmu / n, x.shape)", "dx = gmu / n"),
      lambda r: (normal(r, 5, 3),)),
    c("erf", "callback", "the host derivative declared float64 (x64 off)",
      CALLBACK_ERF, ("jax.ShapeDtypeStruct(x.shape, np.float32), x,",
                     "jax.ShapeDtypeStruct(x.shape, np.float64), x,"),
      lambda r: (normal(r, 3, 4),)),
    c("lgamma", "callback", "digamma from the host declared float64 (x64 off)",
      CALLBACK_GAMMA, ("jax.ShapeDtypeStruct(a.shape, jnp.float32), a)",
                       "jax.ShapeDtypeStruct(a.shape, jnp.float64), a)"),
      lambda r: (positive(r, 5) + 0.5,)),
    c("gelu32", "precision", "the float16 tangent not cast back to the primal's float32",
      GELU_F16_TANGENT, ("(t.astype(jnp.float16) * d).astype(t.dtype)",
                         "t.astype(jnp.float16) * d"),
      lambda r: (normal(r, 3, 4),), rtol=F16),
    c("ln16", "precision", "the float16 backward pass not cast back to float32",
      LN_F16_BWD, ("return (dx.astype(g.dtype),)", "return (dx,)"),
      lambda r: (normal(r, 3, 6),), rtol=F16),
) + ((
    c("dense", "pytree_built", "the layer's cotangent returned as a tuple (dW, db)",
      EQX_TUPLE, ("dlayer = eqx.tree_at(lambda l: (l.weight, l.bias), layer, (dW, db))",
                  "dlayer = (dW, db)"),
      lambda r: (Dense(normal(r, 3, 5), normal(r, 3)), normal(r, 4, 5))),
    c("mlp", "pytree_built", "a nested model's cotangent returned as nested tuples",
      EQX_NESTED, ("grads = eqx.tree_at(lambda m: (m.layers[0].weight, m.layers[0].bias, "
                   "m.layers[1].weight,\n                                 m.layers[1].bias), "
                   "model, (dW0, db0, dW1, db1))",
                   "grads = [(dW0, db0), (dW1, db1)]"),
      lambda r: (MLP([Dense(normal(r, 4, 5), normal(r, 4)), Dense(normal(r, 2, 4), normal(r, 2))]),
                 normal(r, 3, 5))),
) if eqx is not None else ()) + ((
    c("gated", "pytree_built", "a flax struct's cotangent returned as a dict",
      FLAX_STRUCT, ("dgate = gate.replace(scale=(dz * x).sum(0), shift=dz.sum(0))",
                    "dgate = {'scale': (dz * x).sum(0), 'shift': dz.sum(0)}"),
      lambda r: (Gate(normal(r, 4), normal(r, 4)), normal(r, 3, 4))),
) if Gate is not None else ())
