"""Correct custom_vjp rules of the kinds real models use, and the bugs people write into them.

Each ``Base`` is a notebook-like cell defining a ``jax.custom_vjp`` called ``name``
whose primal JAX can differentiate itself; ``fix_quality`` asserts the rule equals
``jax.vjp`` of the primal before mutating it. Each ``Mutation`` is a source edit
(every ``old`` must occur exactly once, so the corpus cannot rot silently).
Shapes are small and pairwise distinct, so a wrong cotangent shows in its type.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

KINDS = ("copy_paste", "reduction", "scatter_back", "mask_broadcast", "stale_constant",
         "not_returned", "missing_entry", "collective", "structure", "dtype")


@dataclasses.dataclass(frozen=True)
class Mutation:
  kind: str
  edits: tuple[tuple[str, str], ...]
  note: str

  def apply(self, code: str) -> str:
    for old, new in self.edits:
      count = code.count(old)
      if count != 1:
        raise ValueError(f"mutation {self.note!r}: {old!r} occurs {count} times")
      code = code.replace(old, new)
    return code


@dataclasses.dataclass(frozen=True)
class Base:
  name: str                     # the custom_vjp the cell defines
  code: str
  args: Callable                # numpy Generator -> every positional argument, concrete
  mutations: tuple[Mutation, ...]
  specs: tuple | None = None    # (in_specs per argument, out_spec): run under shard_map on "dp"
  rtol: float | None = None     # the rule computes at this precision on purpose: judged at it


def m(kind: str, old: str, new: str, note: str, *more: tuple[str, str]) -> Mutation:
  assert kind in KINDS, kind
  return Mutation(kind, ((old, new), *more), note)


def normal(rng, *shape):
  return rng.standard_normal(shape).astype(np.float32)


def positive(rng, *shape):
  return rng.uniform(0.5, 1.5, shape).astype(np.float32)


BASES = (
    Base("softplus", """
@jax.custom_vjp
def softplus(x):
  return jnp.logaddexp(x, 0.)

softplus.defvjp(lambda x: (softplus(x), x),
                lambda x, g: (g * jax.nn.sigmoid(x),))
""", lambda r: (normal(r, 6, 5),), (
        m("structure", "(g * jax.nn.sigmoid(x),))", "g * jax.nn.sigmoid(x))",
          "bare array for a one-argument tuple"),
        m("dtype", "(g * jax.nn.sigmoid(x),))", "((g * jax.nn.sigmoid(x)).astype(jnp.bfloat16),))",
          "bf16 cotangent"),
    )),
    Base("gelu", """
C = 0.7978845608028654   # sqrt(2 / pi)

@jax.custom_vjp
def gelu(x):
  return 0.5 * x * (1. + jnp.tanh(C * (x + 0.044715 * x ** 3)))

def gelu_fwd(x):
  t = jnp.tanh(C * (x + 0.044715 * x ** 3))
  return 0.5 * x * (1. + t), (x, t)

def gelu_bwd(res, g):
  x, t = res
  dt = (1. - t ** 2) * C * (1. + 3 * 0.044715 * x ** 2)
  return (g * (0.5 * (1. + t) + 0.5 * x * dt),)

gelu.defvjp(gelu_fwd, gelu_bwd)
""", lambda r: (normal(r, 4, 7),), (
        m("dtype", "return 0.5 * x * (1. + t), (x, t)",
          "return (0.5 * x * (1. + t)).astype(jnp.bfloat16), (x, t)", "bf16 primal output in fwd"),
        m("structure", "return 0.5 * x * (1. + t), (x, t)", "return 0.5 * x * (1. + t)",
          "fwd forgets the residuals"),
        m("dtype", "return (g * (0.5 * (1. + t) + 0.5 * x * dt),)",
          "return ((g * (0.5 * (1. + t) + 0.5 * x * dt)).astype(jnp.int32),)", "int32 cotangent"),
    )),
    Base("swish", """
@jax.custom_vjp
def swish(x, beta):
  return x * jax.nn.sigmoid(beta * x)

def swish_fwd(x, beta):
  return swish(x, beta), (x, beta)

def swish_bwd(res, g):
  x, beta = res
  s = jax.nn.sigmoid(beta * x)
  ds = s * (1. - s)
  gx = g * (s + x * beta * ds)
  gbeta = (g * x * x * ds).sum((0, 1))
  return gx, gbeta

swish.defvjp(swish_fwd, swish_bwd)
""", lambda r: (normal(r, 2, 3, 5), positive(r, 5)), (
        m("reduction", ".sum((0, 1))", ".sum(0)", "sums the per-feature beta over batch only"),
        m("reduction", "gbeta = (g * x * x * ds).sum((0, 1))", "gbeta = g * x * x * ds",
          "no reduction for the broadcast beta"),
        m("structure", "return gx, gbeta", "return gbeta, gx", "swapped outputs"),
    )),
    Base("logsumexp", """
@jax.custom_vjp
def logsumexp(x):
  m = jax.lax.stop_gradient(x.max(-1, keepdims=True))
  return (m + jnp.log(jnp.exp(x - m).sum(-1, keepdims=True)))[..., 0]

def logsumexp_fwd(x):
  out = logsumexp(x)
  return out, (x, out)

def logsumexp_bwd(res, g):
  x, out = res
  return (g[..., None] * jnp.exp(x - out[..., None]),)

logsumexp.defvjp(logsumexp_fwd, logsumexp_bwd)
""", lambda r: (normal(r, 3, 4, 6) * 4,), (
        m("mask_broadcast", "g[..., None] * jnp.exp(x - out[..., None])", "g",
          "returns the output cotangent, not broadcast back through the softmax"),
        m("reduction", "g[..., None] * jnp.exp(x - out[..., None])",
          "(g[..., None] * jnp.exp(x - out[..., None])).sum(0)", "an extra reduction over the batch"),
        m("dtype", "return (g[..., None] * jnp.exp(x - out[..., None]),)",
          "return ((g[..., None] * jnp.exp(x - out[..., None])).astype(jnp.bfloat16),)",
          "bf16 cotangent"),
    )),
    Base("layernorm", """
@jax.custom_vjp
def layernorm(x, scale, bias):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) * jax.lax.rsqrt(var + 1e-5) * scale + bias

def layernorm_fwd(x, scale, bias):
  mu = x.mean(-1, keepdims=True)
  rstd = jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
  xhat = (x - mu) * rstd
  return xhat * scale + bias, (xhat, rstd, scale)

def layernorm_bwd(res, g):
  xhat, rstd, scale = res
  gxhat = g * scale
  gx = rstd * (gxhat - gxhat.mean(-1, keepdims=True)
               - xhat * (gxhat * xhat).mean(-1, keepdims=True))
  gscale = (g * xhat).sum((0, 1))
  gbias = g.sum((0, 1))
  return gx, gscale, gbias

layernorm.defvjp(layernorm_fwd, layernorm_bwd)
""", lambda r: (normal(r, 2, 3, 5), positive(r, 5), normal(r, 5)), (
        m("reduction", "gbias = g.sum((0, 1))", "gbias = g.sum(0)", "bias gradient summed over batch only"),
        m("reduction", "gscale = (g * xhat).sum((0, 1))", "gscale = (g * xhat).sum(-1)",
          "scale gradient summed over the feature axis"),
        m("not_returned", "return gx, gscale, gbias", "return gx, gscale",
          "gbias computed but not returned"),
        m("copy_paste", "gbias = g.sum((0, 1))", "gbias = g",
          "bias gradient copied from the output cotangent"),
    )),
    Base("rmsnorm", """
@jax.custom_vjp
def rmsnorm(x, scale):
  return x * jax.lax.rsqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * scale

def rmsnorm_fwd(x, scale):
  rstd = jax.lax.rsqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
  return x * rstd * scale, (x, rstd, scale)

def rmsnorm_bwd(res, g):
  x, rstd, scale = res
  gy = g * scale
  gx = rstd * gy - x * rstd ** 3 * (gy * x).mean(-1, keepdims=True)
  gscale = (g * x * rstd).reshape(-1, x.shape[-1]).sum(0)
  return gx, gscale

rmsnorm.defvjp(rmsnorm_fwd, rmsnorm_bwd)
""", lambda r: (normal(r, 2, 4, 6), positive(r, 6)), (
        m("stale_constant", "reshape(-1, x.shape[-1])", "reshape(-1, 8)",
          "hidden size hard-coded as 8 (the model it was written for)"),
        m("structure", "return gx, gscale", "return gscale, gx", "swapped outputs"),
        m("reduction", "gscale = (g * x * rstd).reshape(-1, x.shape[-1]).sum(0)",
          "gscale = (g * x * rstd).sum(0)", "sums the scale gradient over the first axis only"),
    )),
    Base("linear", """
@jax.custom_vjp
def linear(params, x):
  return x @ params['w'] + params['b']

def linear_fwd(params, x):
  return linear(params, x), (params['w'], x)

def linear_bwd(res, g):
  w, x = res
  return {'w': x.T @ g, 'b': g.sum(0)}, g @ w.T

linear.defvjp(linear_fwd, linear_bwd)
""", lambda r: ({"w": normal(r, 5, 3), "b": normal(r, 3)}, normal(r, 4, 5)), (
        m("missing_entry", "{'w': x.T @ g, 'b': g.sum(0)}", "{'w': x.T @ g}", "bias entry missing"),
        m("copy_paste", "'w': x.T @ g", "'w': g.T @ x", "operands of the weight gradient swapped"),
        m("reduction", "'b': g.sum(0)", "'b': g", "bias gradient not summed over the batch"),
        m("structure", "return {'w': x.T @ g, 'b': g.sum(0)}, g @ w.T",
          "return g @ w.T, {'w': x.T @ g, 'b': g.sum(0)}", "swapped outputs"),
    )),
    Base("attention", """
@jax.custom_vjp
def attention(q, k, v):
  s = q @ k.T / jnp.sqrt(q.shape[-1])
  return jax.nn.softmax(s, axis=-1) @ v

def attention_fwd(q, k, v):
  p = jax.nn.softmax(q @ k.T / jnp.sqrt(q.shape[-1]), axis=-1)
  return p @ v, (q, k, v, p)

def attention_bwd(res, g):
  q, k, v, p = res
  scale = 1. / jnp.sqrt(q.shape[-1])
  gp = g @ v.T
  gs = p * (gp - (gp * p).sum(-1, keepdims=True))
  gq = gs @ k * scale
  gk = gs.T @ q * scale
  gv = p.T @ g
  return gq, gk, gv

attention.defvjp(attention_fwd, attention_bwd)
""", lambda r: (normal(r, 4, 8), normal(r, 6, 8), normal(r, 6, 3)), (
        m("copy_paste", "gq = gs @ k * scale", "gq = gs @ v * scale", "v where k was meant"),
        m("copy_paste", "gk = gs.T @ q * scale", "gk = gs.T @ g * scale", "g where q was meant"),
        m("copy_paste", "gv = p.T @ g", "gv = g.T @ p", "operands of the value gradient swapped"),
        m("not_returned", "return gq, gk, gv", "return gq, gk", "gv computed but not returned"),
    )),
    Base("topk", """
@jax.custom_vjp
def topk(x):
  return jax.lax.top_k(x, 2)[0]

def topk_fwd(x):
  vals, idx = jax.lax.top_k(x, 2)
  return vals, (idx, x)

def topk_bwd(res, g):
  idx, x = res
  rows = jnp.arange(x.shape[0])[:, None]
  return (jnp.zeros_like(x).at[rows, idx].set(g),)

topk.defvjp(topk_fwd, topk_bwd)
""", lambda r: (normal(r, 4, 6),), (
        m("scatter_back", "(jnp.zeros_like(x).at[rows, idx].set(g),)", "(g,)",
          "top-k backward forgets to scatter back"),
        m("stale_constant", "jnp.zeros_like(x)", "jnp.zeros((4, 8))",
          "scatter target hard-coded as (4, 8)"),
        m("dtype", "jnp.zeros_like(x)", "jnp.zeros(x.shape, jnp.bfloat16)", "bf16 scatter target"),
    )),
    Base("embed", """
@jax.custom_vjp
def embed(table, idx):
  return table[idx]

def embed_fwd(table, idx):
  return table[idx], (table, idx)

def embed_bwd(res, g):
  table, idx = res
  return jnp.zeros_like(table).at[idx].add(g), None

embed.defvjp(embed_fwd, embed_bwd)
""", lambda r: (normal(r, 7, 3), r.integers(0, 7, 5).astype(np.int32)), (
        m("scatter_back", "jnp.zeros_like(table).at[idx].add(g), None", "g, None",
          "gather backward forgets to scatter back"),
        m("dtype", "add(g), None", "add(g), jnp.zeros_like(idx)", "int32 cotangent for the indices"),
        m("structure", "return jnp.zeros_like(table).at[idx].add(g), None",
          "return (jnp.zeros_like(table).at[idx].add(g),)", "no entry for the integer input"),
    )),
    Base("masked_mean", """
@jax.custom_vjp
def masked_mean(x, mask):
  return (x * mask).sum(-1) / jnp.maximum(mask.sum(-1), 1)

def masked_mean_fwd(x, mask):
  return masked_mean(x, mask), mask

def masked_mean_bwd(mask, g):
  count = jnp.maximum(mask.sum(-1), 1)
  return (g / count)[:, None] * mask, None

masked_mean.defvjp(masked_mean_fwd, masked_mean_bwd)
""", lambda r: (normal(r, 4, 5), r.uniform(size=(4, 5)) < 0.6), (
        m("mask_broadcast", "(g / count)[:, None] * mask", "g / count",
          "the mean's cotangent not broadcast back with its mask"),
        m("mask_broadcast", "(g / count)[:, None] * mask", "(g / count)[:, None]",
          "broadcast axis kept but the mask forgotten"),
        m("dtype", "* mask, None", "* mask, jnp.zeros_like(mask)", "bool cotangent for the mask"),
    )),
    Base("clip_ste", """
@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def clip_ste(x, lo, hi):
  return x + jax.lax.stop_gradient(jnp.clip(x, lo, hi) - x)

def clip_ste_fwd(x, lo, hi):
  return clip_ste(x, lo, hi), None

def clip_ste_bwd(lo, hi, res, g):
  return (g,)

clip_ste.defvjp(clip_ste_fwd, clip_ste_bwd)
""", lambda r: (normal(r, 3, 4), -0.5, 0.5), (
        m("structure", "return (g,)", "return g", "bare array for a one-argument tuple"),
        m("structure", "return (g,)", "return (g, None, None)", "cotangents for the nondiff bounds"),
        m("dtype", "return (g,)", "return (g.astype(jnp.bfloat16),)", "bf16 cotangent"),
    )),
    Base("safe_norm", """
@jax.custom_vjp
def safe_norm(x):
  return jnp.sqrt((x ** 2).sum(-1) + 1e-12)

def safe_norm_fwd(x):
  n = safe_norm(x)
  return n, (x, n)

def safe_norm_bwd(res, g):
  x, n = res
  return ((g / n)[:, None] * x,)

safe_norm.defvjp(safe_norm_fwd, safe_norm_bwd)
""", lambda r: (normal(r, 4, 5),), (
        m("mask_broadcast", "((g / n)[:, None] * x,)", "(g / n,)",
          "the norm's cotangent not broadcast back to the vector"),
        m("copy_paste", "(g / n)[:, None] * x", "(g / n)[:, None] * n", "n where x was meant"),
        m("structure", "return ((g / n)[:, None] * x,)", "return (g / n)[:, None] * x",
          "bare array for a one-argument tuple"),
    )),
    Base("cumsum", """
@jax.custom_vjp
def cumsum(x):
  return jnp.cumsum(x, axis=0)

def cumsum_fwd(x):
  return cumsum(x), None

def cumsum_bwd(_, g):
  return (jnp.flip(jnp.cumsum(jnp.flip(g, 0), axis=0), 0),)

cumsum.defvjp(cumsum_fwd, cumsum_bwd)
""", lambda r: (normal(r, 5, 3),), (
        m("reduction", "jnp.cumsum(jnp.flip(g, 0), axis=0)", "jnp.sum(jnp.flip(g, 0), axis=0)",
          "a sum where the reverse cumulative sum was meant"),
        m("stale_constant", "jnp.flip(g, 0), axis=0), 0)", "jnp.flip(g, 0), axis=0), 0)[:4]",
          "a slice to a hard-coded length 4"),
        m("structure", "return cumsum(x), None", "return cumsum(x)", "fwd forgets the residuals"),
    )),
    Base("dense_t", """
@jax.custom_vjp
def dense_t(x, w):
  return x @ w.T

def dense_t_fwd(x, w):
  return x @ w.T, (x, w)

def dense_t_bwd(res, g):
  x, w = res
  return g @ w, g.T @ x

dense_t.defvjp(dense_t_fwd, dense_t_bwd)
""", lambda r: (normal(r, 4, 5), normal(r, 3, 5)), (
        m("copy_paste", "g.T @ x", "x.T @ g", "weight gradient for an untransposed weight"),
        m("copy_paste", "g.T @ x", "g.T @ g", "g where x was meant"),
        m("structure", "return g @ w, g.T @ x", "return g.T @ x, g @ w", "swapped outputs"),
        m("dtype", "return x @ w.T, (x, w)", "return (x @ w.T).astype(jnp.bfloat16), (x, w)",
          "bf16 primal output in fwd"),
    )),
    Base("channel_scale", """
@jax.custom_vjp
def channel_scale(x, s):
  return x * s

def channel_scale_fwd(x, s):
  return x * s, (x, s)

def channel_scale_bwd(res, g):
  x, s = res
  return g * s, (g * x).sum((0, 1))

channel_scale.defvjp(channel_scale_fwd, channel_scale_bwd)
""", lambda r: (normal(r, 2, 3, 4), normal(r, 4)), (
        m("reduction", ".sum((0, 1))", ".sum(0)", "depthwise scale summed over batch only"),
        m("reduction", "(g * x).sum((0, 1))", "g * x", "no reduction for the broadcast scale"),
        m("stale_constant", ".sum((0, 1))", ".reshape(-1, 8).sum(0)", "channels hard-coded as 8"),
        m("dtype", "return g * s,", "return (g * s).astype(jnp.int32),", "int32 cotangent"),
    )),
    Base("avg_pool", """
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def avg_pool(x, size):
  n, d = x.shape
  return x.reshape(n, d // size, size).mean(-1)

def avg_pool_fwd(x, size):
  return avg_pool(x, size), None

def avg_pool_bwd(size, _, g):
  return (jnp.repeat(g, size, axis=-1) / size,)

avg_pool.defvjp(avg_pool_fwd, avg_pool_bwd)
""", lambda r: (normal(r, 3, 8), 2), (
        m("stale_constant", "jnp.repeat(g, size, axis=-1)", "jnp.repeat(g, 4, axis=-1)",
          "window size hard-coded as 4"),
        m("structure", "return (jnp.repeat(g, size, axis=-1) / size,)",
          "return (jnp.repeat(g, size, axis=-1) / size, None)", "a cotangent for the nondiff size"),
        m("copy_paste", "axis=-1", "axis=0", "repeats along the wrong axis"),
    )),
    Base("mlp", """
@jax.custom_vjp
def mlp(params, x):
  h = jnp.tanh(x @ params['w1'] + params['b1'])
  return h @ params['w2']

def mlp_fwd(params, x):
  h = jnp.tanh(x @ params['w1'] + params['b1'])
  return h @ params['w2'], (params, x, h)

def mlp_bwd(res, g):
  params, x, h = res
  gh = (g @ params['w2'].T) * (1. - h ** 2)
  grads = {'w1': x.T @ gh, 'b1': gh.sum(0), 'w2': h.T @ g}
  return grads, gh @ params['w1'].T

mlp.defvjp(mlp_fwd, mlp_bwd)
""", lambda r: ({"w1": normal(r, 5, 6) / 2, "b1": normal(r, 6), "w2": normal(r, 6, 3)},
                normal(r, 4, 5)), (
        m("missing_entry", ", 'w2': h.T @ g}", "}", "w2 entry missing"),
        m("reduction", "'b1': gh.sum(0)", "'b1': gh", "hidden bias gradient not summed"),
        m("copy_paste", "'w1': x.T @ gh", "'w1': h.T @ gh", "h where x was meant"),
        m("missing_entry", "'w2': h.T @ g}", "'w2': h.T @ g, 'b2': g.sum(0)}",
          "an entry the params do not have"),
    )),
    Base("xent", """
@jax.custom_vjp
def xent(logits, labels):
  logp = jax.nn.log_softmax(logits)
  return -jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]

def xent_fwd(logits, labels):
  return xent(logits, labels), (logits, labels)

def xent_bwd(res, g):
  logits, labels = res
  p = jax.nn.softmax(logits)
  return g[:, None] * (p - jax.nn.one_hot(labels, logits.shape[-1])), None

xent.defvjp(xent_fwd, xent_bwd)
""", lambda r: (normal(r, 4, 6) * 2, r.integers(0, 6, 4).astype(np.int32)), (
        m("structure", "return g[:, None] * (p - jax.nn.one_hot(labels, logits.shape[-1])), None",
          "return (g[:, None] * (p - jax.nn.one_hot(labels, logits.shape[-1])),)",
          "no entry for the integer labels"),
        m("dtype", "logits.shape[-1])), None", "logits.shape[-1])), jnp.zeros_like(labels)",
          "int32 cotangent for the labels"),
        m("reduction", "g[:, None] * (p - jax.nn.one_hot(labels, logits.shape[-1]))",
          "(g[:, None] * (p - jax.nn.one_hot(labels, logits.shape[-1]))).mean(0)",
          "averaged over the batch"),
    )),
    Base("cumprod", """
@jax.custom_vjp
def cumprod(x):
  def step(c, xt):
    c = c * xt
    return c, c
  return jax.lax.scan(step, jnp.ones_like(x[0]), x)[1]

def cumprod_fwd(x):
  y = cumprod(x)
  return y, (x, y)

def cumprod_bwd(res, g):
  x, y = res
  def back(acc, gy):
    acc = acc + gy
    return acc, acc
  _, rev = jax.lax.scan(back, jnp.zeros_like(g[0]), g * y, reverse=True)
  return (rev / x,)

cumprod.defvjp(cumprod_fwd, cumprod_bwd)
""", lambda r: (positive(r, 5, 4),), (
        m("not_returned", "_, rev = jax.lax.scan", "rev, _ = jax.lax.scan",
          "the final carry returned, not the stacked cotangents", ("return (rev / x,)", "return (rev,)")),
        m("structure", "return (rev / x,)", "return rev / x", "bare array for a one-argument tuple"),
        m("dtype", "return (rev / x,)", "return ((rev / x).astype(jnp.bfloat16),)", "bf16 cotangent"),
    )),
    Base("shard_scale", """
@jax.custom_vjp
def shard_scale(x, w):
  return x * w

def shard_scale_fwd(x, w):
  return x * w, (x, w)

def shard_scale_bwd(res, g):
  x, w = res
  return g * w, jax.lax.psum((g * x).sum(0), 'dp')

shard_scale.defvjp(shard_scale_fwd, shard_scale_bwd)
""", lambda r: (normal(r, 8, 4), normal(r, 4)), (
        m("collective", "return g * w,", "return jax.lax.psum(g * w, 'dp'),",
          "psum on the sharded input's cotangent"),
        m("collective", "jax.lax.psum((g * x).sum(0), 'dp')", "(g * x).sum(0)",
          "the replicated weight's cotangent never psummed"),
        m("reduction", "jax.lax.psum((g * x).sum(0), 'dp')", "jax.lax.psum(g * x, 'dp')",
          "no batch reduction before the psum"),
    ), specs=(("dp", None), "dp")),
    Base("global_sum", """
@jax.custom_vjp
def global_sum(x):
  return jax.lax.psum(x.sum(0), 'dp')

def global_sum_fwd(x):
  return global_sum(x), x

def global_sum_bwd(x, g):
  return (jax.lax.pcast(jnp.broadcast_to(g, x.shape), 'dp', to='varying'),)

global_sum.defvjp(global_sum_fwd, global_sum_bwd)
""", lambda r: (normal(r, 8, 3),), (
        m("collective", "jax.lax.pcast(jnp.broadcast_to(g, x.shape), 'dp', to='varying')",
          "jnp.broadcast_to(g, x.shape)", "replicated cotangent not marked varying"),
        m("reduction", "jnp.broadcast_to(g, x.shape)", "g", "not broadcast back over the rows"),
    ), specs=(("dp",), None)),
)
