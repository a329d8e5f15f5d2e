"""A held-out corpus: wrong backward rules as people write them for real ops, each with its right rule.

Written apart from ``rules.py`` (other ops, other formulations, other bugs) so that the
fix search is measured on rules it was not tuned on. Each ``Case`` is the RIGHT cell
(``fix_quality --held-out`` asserts it equals the reference's autodiff) and the edits
that make it wrong, the way people get it wrong. The reference is the primal, unless
the cell defines ``reference`` (a rule whose gradient differs from its primal's on
purpose: a straight-through estimator, gradient reversal, a gradient stopped by choice);
a cell may define ``use(*args)``, calling the rule in context (scan, vmap, jit), which
the failing grad differentiates instead of the bare rule. A cell may define a
``jax.custom_jvp`` instead (the ``jvp_*`` kinds): its fixes are judged by the VJP JAX
derives from the fixed jvp rule, against the reference's.

``kind`` says how the rule is wrong; ``VALUE_KINDS`` are always well-typed, wrong in value
(JAX raises nothing: found only by ``vv.gradcheck`` as ``bwd_value``).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax

import numpy as np

try:
  import equinox as eqx
except ImportError:   # a JAX the installed equinox does not run on: its cases are left out
  eqx = None

try:
  from flax import nnx
except ImportError:   # a JAX the installed flax does not run on: its case is left out
  nnx = None

from .rules import Base, Mutation, normal, positive

KINDS = ("transposed", "reduction", "dtype", "swapped", "missing_tuple", "extra_output",
         "structure", "sign_scale", "wrong_axis", "scatter", "surrogate", "jvp_dtype", "jvp_shape",
         "jvp_structure", "library_built")
VALUE_KINDS = ("sign_scale", "wrong_axis")   # always well-typed (others may be too)


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  kind: str
  note: str
  right: str                        # the correct cell
  wrong: tuple[tuple[str, str], ...]   # (old, new) edits making it wrong
  args: Callable
  rtol: float | None = None         # the precision the rule computes in on purpose

  def base(self) -> Base:
    return Base(self.name, self.right, self.args, (self.mutation(),), rtol=self.rtol)

  def mutation(self) -> Mutation:
    return Mutation(self.kind, self.wrong, self.note)


def c(name, kind, note, right, wrong, args) -> Case:
  assert kind in KINDS, kind
  wrong = (wrong,) if isinstance(wrong[0], str) else wrong
  return Case(name, kind, note, right, tuple(wrong), args)


def ints(rng, hi, *shape):
  return rng.integers(0, hi, shape).astype(np.int32)


def bf16(a):
  import jax.numpy as jnp
  return np.asarray(a).astype(jnp.bfloat16)


LAYER_NORM_CH = """
@jax.custom_vjp
def ln_channels(x, gamma):
  # normalise over the channel axis (1) of NCHW-like activations
  mu = x.mean(1, keepdims=True)
  xc = x - mu
  rstd = 1. / jnp.sqrt((xc ** 2).mean(1, keepdims=True) + 1e-5)
  return xc * rstd * gamma[None, :, None]

def ln_fwd(x, gamma):
  mu = x.mean(1, keepdims=True)
  xc = x - mu
  rstd = 1. / jnp.sqrt((xc ** 2).mean(1, keepdims=True) + 1e-5)
  xhat = xc * rstd
  return xhat * gamma[None, :, None], (xhat, rstd, gamma)

def ln_bwd(res, dy):
  xhat, rstd, gamma = res
  dxhat = dy * gamma[None, :, None]
  dx = rstd * (dxhat - dxhat.mean(1, keepdims=True)
               - xhat * (dxhat * xhat).mean(1, keepdims=True))
  dgamma = (dy * xhat).sum(axis=(0, 2))
  return dx, dgamma

ln_channels.defvjp(ln_fwd, ln_bwd)
"""

RMS_BF16 = """
@jax.custom_vjp
def rms_norm(x, w):
  # bf16 activations, f32 weight, statistics in f32
  x32 = x.astype(jnp.float32)
  r = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
  return (x32 * r * w).astype(x.dtype)

def rms_fwd(x, w):
  x32 = x.astype(jnp.float32)
  r = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
  return (x32 * r * w).astype(x.dtype), (x32, r, w)

def rms_bwd(res, dy):
  x32, r, w = res
  dy = dy.astype(jnp.float32)
  dw = jnp.sum(dy * x32 * r, axis=(0, 1))
  dxn = dy * w
  dx = r * dxn - x32 * r ** 3 * jnp.mean(dxn * x32, axis=-1, keepdims=True)
  return dx.astype(jnp.bfloat16), dw

rms_norm.defvjp(rms_fwd, rms_bwd)
"""

XENT_INT = """
@jax.custom_vjp
def xent(logits, labels):
  logp = jax.nn.log_softmax(logits)
  return -jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]

def xent_fwd(logits, labels):
  logp = jax.nn.log_softmax(logits)
  loss = -jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]
  return loss, (jnp.exp(logp), labels)

def xent_bwd(res, g):
  probs, labels = res
  onehot = jax.nn.one_hot(labels, probs.shape[-1], dtype=probs.dtype)
  dlogits = g[:, None] * (probs - onehot)
  return dlogits, None

xent.defvjp(xent_fwd, xent_bwd)
"""

LSE = """
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def lse(x, axis):
  return jax.nn.logsumexp(x, axis=axis)

def lse_fwd(x, axis):
  out = jax.nn.logsumexp(x, axis=axis)
  return out, (x, out)

def lse_bwd(axis, res, g):
  x, out = res
  p = jnp.exp(x - jnp.expand_dims(out, axis))
  return (jnp.expand_dims(g, axis) * p,)

lse.defvjp(lse_fwd, lse_bwd)
"""

SCORES = """
@jax.custom_vjp
def scores(q, k):
  # multi-head self-attention logits: (B, H, T, D) x (B, H, T, D) -> (B, H, T, T)
  return jnp.einsum('bhtd,bhsd->bhts', q, k) / jnp.sqrt(q.shape[-1])

def scores_fwd(q, k):
  return scores(q, k), (q, k)

def scores_bwd(res, g):
  q, k = res
  scale = 1. / jnp.sqrt(q.shape[-1])
  dq = jnp.einsum('bhts,bhsd->bhtd', g, k) * scale
  dk = jnp.einsum('bhts,bhtd->bhsd', g, q) * scale
  return dq, dk

scores.defvjp(scores_fwd, scores_bwd)
"""

EMBED = """
@jax.custom_vjp
def lookup(table, ids):
  return jnp.take(table, ids, axis=0)

def lookup_fwd(table, ids):
  return jnp.take(table, ids, axis=0), (ids, table.shape[0])

def lookup_bwd(res, g):
  ids, vocab = res
  dtable = jax.ops.segment_sum(g.reshape(-1, g.shape[-1]), ids.reshape(-1), num_segments=vocab)
  return dtable, None

lookup.defvjp(lookup_fwd, lookup_bwd)
"""

GATHER = """
@jax.custom_vjp
def pick(x, idx):
  # per-row gather: out[n, k] = x[n, idx[n, k]]
  return jnp.take_along_axis(x, idx, axis=1)

def pick_fwd(x, idx):
  return pick(x, idx), (idx, x.shape)

def pick_bwd(res, g):
  idx, shape = res
  rows = jnp.arange(shape[0])[:, None]
  return jnp.zeros(shape, g.dtype).at[rows, idx].add(g), None

pick.defvjp(pick_fwd, pick_bwd)
"""

SEGSUM = """
@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def seg_sum(data, seg, num):
  return jax.ops.segment_sum(data, seg, num_segments=num)

def seg_fwd(data, seg, num):
  return seg_sum(data, seg, num), seg

def seg_bwd(num, seg, g):
  return g[seg], None

seg_sum.defvjp(seg_fwd, seg_bwd)
"""

CLIP = """
@jax.custom_vjp
def hardtanh(x):
  return jnp.clip(x, -1., 1.)

def hardtanh_fwd(x):
  return hardtanh(x), jnp.abs(x) <= 1.

def hardtanh_bwd(inside, g):
  return (jnp.where(inside, g, 0.),)

hardtanh.defvjp(hardtanh_fwd, hardtanh_bwd)
"""

STE_ROUND = """
@jax.custom_vjp
def quantize(x):
  # straight-through estimator: round forward, identity backward
  return jnp.round(x * 4.) / 4.

def reference(x):
  return x + jax.lax.stop_gradient(jnp.round(x * 4.) / 4. - x)

def quantize_fwd(x):
  return quantize(x), None

def quantize_bwd(_, g):
  return (g,)

quantize.defvjp(quantize_fwd, quantize_bwd)
"""

GRAD_REVERSE = """
import jupyter_vjpviz as vv

@vv.surrogate   # reversed on purpose, marked as the README asks
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def grad_reverse(x, lam):
  return x

def reference(x, lam):
  return jax.lax.stop_gradient((1. + lam) * x) - lam * x

def grad_reverse_fwd(x, lam):
  return x, None

def grad_reverse_bwd(lam, _, g):
  return (-lam * g,)

grad_reverse.defvjp(grad_reverse_fwd, grad_reverse_bwd)
"""

CABS2 = """
@jax.custom_vjp
def power(z):
  # |z|^2 of a complex signal: real output, complex input
  return (z * jnp.conj(z)).real

def power_fwd(z):
  return power(z), z

def power_bwd(z, g):
  return (2. * g * jnp.conj(z),)

power.defvjp(power_fwd, power_bwd)
"""

CMUL = """
@jax.custom_vjp
def phase_shift(z, theta):
  # rotate a complex signal by a real phase per channel
  return z * jnp.exp(1j * theta)

def phase_shift_fwd(z, theta):
  rot = jnp.exp(1j * theta)
  return z * rot, (z, rot)

def phase_shift_bwd(res, g):
  z, rot = res
  dz = g * rot
  dtheta = jnp.sum((1j * g * z * rot).real, axis=0)
  return dz, dtheta

phase_shift.defvjp(phase_shift_fwd, phase_shift_bwd)
"""

BMM = """
@jax.custom_vjp
def proj(x, w):
  # (B, T, K) @ (K, N): the weight broadcast over batch and time
  return x @ w

def proj_fwd(x, w):
  return x @ w, (x, w)

def proj_bwd(res, g):
  x, w = res
  dx = g @ w.T
  dw = jnp.einsum('btk,btn->kn', x, g)
  return dx, dw

proj.defvjp(proj_fwd, proj_bwd)
"""

BMM_BCAST = """
@jax.custom_vjp
def bmm(a, b):
  # (G, 1, M, K) @ (1, H, K, N) -> (G, H, M, N)
  return jnp.matmul(a, b)

def bmm_fwd(a, b):
  return jnp.matmul(a, b), (a, b)

def bmm_bwd(res, g):
  a, b = res
  da = (g @ jnp.swapaxes(b, -1, -2)).sum(1, keepdims=True)
  db = (jnp.swapaxes(a, -1, -2) @ g).sum(0, keepdims=True)
  return da, db

bmm.defvjp(bmm_fwd, bmm_bwd)
"""

RNN = """
@jax.custom_vjp
def rnn_cell(h, x, W):
  return jnp.tanh(h @ W + x)

def rnn_fwd(h, x, W):
  y = jnp.tanh(h @ W + x)
  return y, (h, W, y)

def rnn_bwd(res, dy):
  h, W, y = res
  dz = dy * (1. - y ** 2)
  return dz @ W.T, dz, h.T @ dz

rnn_cell.defvjp(rnn_fwd, rnn_bwd)

def use(h, x, W):
  def step(c, _):
    c = rnn_cell(c, x, W)
    return c, None
  return jax.lax.scan(step, h, None, length=3)[0]
"""

JITTED = """
@jax.custom_vjp
@jax.jit
def softsign(x):
  return x / (1. + jnp.abs(x))

@jax.jit
def softsign_fwd(x):
  return softsign(x), x

def softsign_bwd(x, g):
  return (g / (1. + jnp.abs(x)) ** 2,)

softsign.defvjp(softsign_fwd, softsign_bwd)
"""

DICT_MLP = """
@jax.custom_vjp
def dense_relu(p, x):
  return jax.nn.relu(x @ p['kernel'] + p['bias'])

def dense_relu_fwd(p, x):
  y = dense_relu(p, x)
  return y, (p['kernel'], x, y > 0)

def dense_relu_bwd(res, g):
  kernel, x, active = res
  dz = g * active
  return {'kernel': x.T @ dz, 'bias': dz.sum(0)}, dz @ kernel.T

dense_relu.defvjp(dense_relu_fwd, dense_relu_bwd)
"""

DATACLASS = """
from fix_corpus.held_out import Affine

@jax.custom_vjp
def affine(p, x):
  return x * p.scale + p.shift

def affine_fwd(p, x):
  return affine(p, x), (p.scale, x)

def affine_bwd(res, g):
  scale, x = res
  return Affine(scale=(g * x).sum(0), shift=g.sum(0)), g * scale

affine.defvjp(affine_fwd, affine_bwd)
"""

TUPLE_ARG = """
@jax.custom_vjp
def bilinear(pair, W):
  u, v = pair
  return jnp.einsum('bi,ij,bj->b', u, W, v)

def bilinear_fwd(pair, W):
  return bilinear(pair, W), (pair, W)

def bilinear_bwd(res, g):
  (u, v), W = res
  du = g[:, None] * (v @ W.T)
  dv = g[:, None] * (u @ W)
  dW = jnp.einsum('b,bi,bj->ij', g, u, v)
  return (du, dv), dW

bilinear.defvjp(bilinear_fwd, bilinear_bwd)
"""

NORMALIZE_AXIS = """
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def center(x, axis):
  return x - x.mean(axis, keepdims=True)

def center_fwd(x, axis):
  return center(x, axis), None

def center_bwd(axis, _, g):
  return (g - g.mean(axis, keepdims=True),)

center.defvjp(center_fwd, center_bwd)
"""

STOP_SCALE = """
@jax.custom_vjp
def temper(x, t):
  # the temperature is a schedule: no gradient flows into it, by choice
  return x / t

def reference(x, t):
  return x / jax.lax.stop_gradient(t)

def temper_fwd(x, t):
  return x / t, t

def temper_bwd(t, g):
  return g / t, None

temper.defvjp(temper_fwd, temper_bwd)
"""

BF16_MATMUL = """
@jax.custom_vjp
def mp_dense(x, w):
  # mixed precision: f32 master weight, bf16 compute
  return x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)

def mp_dense_fwd(x, w):
  xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  return xb @ wb, (xb, wb)

def mp_dense_bwd(res, g):
  xb, wb = res
  dx = (g @ wb.T).astype(jnp.float32)
  dw = (xb.T @ g).astype(jnp.float32)
  return dx, dw

mp_dense.defvjp(mp_dense_fwd, mp_dense_bwd)
"""

FP16_GELU = """
@jax.custom_vjp
def gelu16(x):
  x32 = x.astype(jnp.float32)
  return (x32 * jax.nn.sigmoid(1.702 * x32)).astype(jnp.float16)

def gelu16_fwd(x):
  return gelu16(x), x

def gelu16_bwd(x, g):
  x32 = x.astype(jnp.float32)
  s = jax.nn.sigmoid(1.702 * x32)
  d = s + 1.702 * x32 * s * (1. - s)
  return ((g.astype(jnp.float32) * d).astype(jnp.float16),)

gelu16.defvjp(gelu16_fwd, gelu16_bwd)
"""

SOFTMAX = """
@jax.custom_vjp
def softmax(x):
  e = jnp.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def softmax_fwd(x):
  y = softmax(x)
  return y, y

def softmax_bwd(y, g):
  return (y * (g - (g * y).sum(-1, keepdims=True)),)

softmax.defvjp(softmax_fwd, softmax_bwd)
"""

HUBER = """
@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def huber(pred, target, delta):
  r = pred - target
  return jnp.where(jnp.abs(r) <= delta, 0.5 * r ** 2, delta * (jnp.abs(r) - 0.5 * delta))

def huber_fwd(pred, target, delta):
  return huber(pred, target, delta), pred - target

def huber_bwd(delta, r, g):
  d = g * jnp.clip(r, -delta, delta)
  return d, -d

huber.defvjp(huber_fwd, huber_bwd)
"""

VMAPPED = """
@jax.custom_vjp
def sq_dist(a, b):
  # one example's squared distance; vmapped over the batch
  return jnp.sum((a - b) ** 2)

def sq_dist_fwd(a, b):
  return sq_dist(a, b), a - b

def sq_dist_bwd(d, g):
  return 2. * g * d, -2. * g * d

sq_dist.defvjp(sq_dist_fwd, sq_dist_bwd)

def use(a, b):
  return jax.vmap(sq_dist, in_axes=(0, None))(a[None], b)[0]
"""

COSINE = """
@jax.custom_vjp
def cosine(a, b):
  na = jnp.linalg.norm(a, axis=-1, keepdims=True)
  nb = jnp.linalg.norm(b, axis=-1, keepdims=True)
  return ((a / na) * (b / nb)).sum(-1)

def cosine_fwd(a, b):
  na = jnp.linalg.norm(a, axis=-1, keepdims=True)
  nb = jnp.linalg.norm(b, axis=-1, keepdims=True)
  ah, bh = a / na, b / nb
  cos = (ah * bh).sum(-1, keepdims=True)
  return cos[..., 0], (ah, bh, na, nb, cos)

def cosine_bwd(res, g):
  ah, bh, na, nb, cos = res
  g = g[..., None]
  da = g * (bh - cos * ah) / na
  db = g * (ah - cos * bh) / nb
  return da, db

cosine.defvjp(cosine_fwd, cosine_bwd)
"""

GLU = """
@jax.custom_vjp
def glu(x):
  a, b = jnp.split(x, 2, axis=-1)
  return a * jax.nn.sigmoid(b)

def glu_fwd(x):
  a, b = jnp.split(x, 2, axis=-1)
  s = jax.nn.sigmoid(b)
  return a * s, (a, s)

def glu_bwd(res, g):
  a, s = res
  da = g * s
  db = g * a * s * (1. - s)
  return (jnp.concatenate([da, db], axis=-1),)

glu.defvjp(glu_fwd, glu_bwd)
"""

POOL = """
@jax.custom_vjp
def mean_pool(x, lengths):
  # mean over the valid prefix of each sequence: x (B, T, D), lengths (B,) int
  mask = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
  return (x * mask[..., None]).sum(1) / lengths[:, None]

def mean_pool_fwd(x, lengths):
  mask = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
  return mean_pool(x, lengths), (mask, lengths)

def mean_pool_bwd(res, g):
  mask, lengths = res
  dx = (g / lengths[:, None])[:, None, :] * mask[..., None]
  return dx, None

mean_pool.defvjp(mean_pool_fwd, mean_pool_bwd)
"""

INSTANCE_NORM = """
@jax.custom_vjp
def inorm(x):
  # per-example, per-channel normalisation over time: x (B, T, C)
  mu = x.mean(1, keepdims=True)
  return (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5)

def inorm_fwd(x):
  mu = x.mean(1, keepdims=True)
  rstd = 1. / jnp.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5)
  y = (x - mu) * rstd
  return y, (y, rstd)

def inorm_bwd(res, g):
  y, rstd = res
  return (rstd * (g - g.mean(1, keepdims=True) - y * (g * y).mean(1, keepdims=True)),)

inorm.defvjp(inorm_fwd, inorm_bwd)
"""

NLL = """
@jax.custom_vjp
def nll(logp, labels):
  return -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]

def nll_fwd(logp, labels):
  return nll(logp, labels), (labels, logp.shape[-1])

def nll_bwd(res, g):
  labels, n = res
  return -g[..., None] * jax.nn.one_hot(labels, n), None

nll.defvjp(nll_fwd, nll_bwd)
"""

OUTER = """
@jax.custom_vjp
def outer(u, v):
  return u[:, None] * v[None, :]

def outer_fwd(u, v):
  return outer(u, v), (u, v)

def outer_bwd(res, g):
  u, v = res
  return g @ v, u @ g

outer.defvjp(outer_fwd, outer_bwd)
"""

ROTARY = """
def rotate_half(x):
  a, b = jnp.split(x, 2, axis=-1)
  return jnp.concatenate([-b, a], axis=-1)

def unrotate_half(y):
  a, b = jnp.split(y, 2, axis=-1)
  return jnp.concatenate([b, -a], axis=-1)

@jax.custom_vjp
def rope(x, cos, sin):
  return x * cos + rotate_half(x) * sin

def reference(x, cos, sin):
  return rope.fun(x, jax.lax.stop_gradient(cos), jax.lax.stop_gradient(sin))

def rope_fwd(x, cos, sin):
  return rope(x, cos, sin), (cos, sin)

def rope_bwd(res, g):
  cos, sin = res
  return g * cos + unrotate_half(g * sin), None, None   # the tables are fixed

rope.defvjp(rope_fwd, rope_bwd)
"""

DICT_SUM = """
@jax.custom_vjp
def mix(feats, w):
  # a weighted sum of named feature maps
  return w[0] * feats['audio'] + w[1] * feats['video']

def mix_fwd(feats, w):
  return mix(feats, w), (feats, w)

def mix_bwd(res, g):
  feats, w = res
  dfeats = {'audio': w[0] * g, 'video': w[1] * g}
  dw = jnp.stack([(g * feats['audio']).sum(), (g * feats['video']).sum()])
  return dfeats, dw

mix.defvjp(mix_fwd, mix_bwd)
"""

DIAG = """
@jax.custom_vjp
def diag_part(a):
  return jnp.diagonal(a, axis1=-2, axis2=-1)

def diag_fwd(a):
  return diag_part(a), a.shape[-1]

def diag_bwd(n, g):
  return (g[..., None] * jnp.eye(n, dtype=g.dtype),)

diag_part.defvjp(diag_fwd, diag_bwd)
"""

FP16_SCALE = """
@jax.custom_vjp
def layer_scale(x, gamma):
  # fp16 activations, fp32 per-channel scale
  return (x.astype(jnp.float32) * gamma).astype(jnp.float16)

def layer_scale_fwd(x, gamma):
  return layer_scale(x, gamma), (x, gamma)

def layer_scale_bwd(res, g):
  x, gamma = res
  g32 = g.astype(jnp.float32)
  dx = (g32 * gamma).astype(jnp.float16)
  dgamma = (g32 * x.astype(jnp.float32)).sum(0)
  return dx, dgamma

layer_scale.defvjp(layer_scale_fwd, layer_scale_bwd)
"""

POLAR = """
@jax.custom_vjp
def polar(r, theta):
  return r * jnp.exp(1j * theta)

def polar_fwd(r, theta):
  rot = jnp.exp(1j * theta)
  return r * rot, (r, rot)

def polar_bwd(res, g):
  r, rot = res
  dr = (g * rot).real
  dtheta = (1j * g * r * rot).real
  return dr, dtheta

polar.defvjp(polar_fwd, polar_bwd)
"""

SHARED_W = """
@jax.custom_vjp
def heads(x, w):
  # one input, a weight per head: (T, K) @ (H, K, N) -> (H, T, N)
  return x @ w

def heads_fwd(x, w):
  return x @ w, (x, w)

def heads_bwd(res, g):
  x, w = res
  dx = (g @ jnp.swapaxes(w, -1, -2)).sum(0)
  dw = x.T @ g
  return dx, dw

heads.defvjp(heads_fwd, heads_bwd)
"""

MASKED_SOFTMAX = """
@jax.custom_vjp
def masked_softmax(x, mask):
  x = jnp.where(mask, x, -1e9)
  e = jnp.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def masked_softmax_fwd(x, mask):
  y = masked_softmax(x, mask)
  return y, y

def masked_softmax_bwd(y, g):
  return y * (g - (g * y).sum(-1, keepdims=True)), None

masked_softmax.defvjp(masked_softmax_fwd, masked_softmax_bwd)
"""


VMAPPED_NORM = """
@jax.custom_vjp
def unit(v):
  # one vector scaled to unit length; vmapped over rows
  return v / jnp.linalg.norm(v)

def unit_fwd(v):
  n = jnp.linalg.norm(v)
  return v / n, (v / n, n)

def unit_bwd(res, g):
  u, n = res
  return ((g - u * jnp.dot(u, g)) / n,)

unit.defvjp(unit_fwd, unit_bwd)

def use(v):
  return jax.vmap(unit)(jnp.stack([v, 2. * v]))[0]
"""

REMAT = """
@jax.custom_vjp
def sq_norm_rows(x):
  return (x ** 2).sum(-1)

def sq_norm_rows_fwd(x):
  return sq_norm_rows(x), x

def sq_norm_rows_bwd(x, g):
  return (2. * g[:, None] * x,)

sq_norm_rows.defvjp(sq_norm_rows_fwd, sq_norm_rows_bwd)

def use(x):
  return jax.jit(jax.checkpoint(sq_norm_rows))(x)
"""

DICT_BIAS = """
@jax.custom_vjp
def shift_scale(p, x):
  return (x - p['mu']) * p['gain']

def shift_scale_fwd(p, x):
  return shift_scale(p, x), (p, x)

def shift_scale_bwd(res, g):
  p, x = res
  return {'mu': -(g * p['gain']).sum(0), 'gain': (g * (x - p['mu'])).sum(0)}, g * p['gain']

shift_scale.defvjp(shift_scale_fwd, shift_scale_bwd)
"""

LIST_RET = """
@jax.custom_vjp
def hypot(a, b):
  return jnp.sqrt(a ** 2 + b ** 2)

def hypot_fwd(a, b):
  h = hypot(a, b)
  return h, (a, b, h)

def hypot_bwd(res, g):
  a, b, h = res
  return (g * a / h, g * b / h)

hypot.defvjp(hypot_fwd, hypot_bwd)
"""


# Written for issue 30 (surrogates: gradients that differ from the primal's on purpose,
# none marked vv.surrogate; opaque primals), before any change for it. Each surrogate
# cell defines ``reference``: the gradient the user means, which the benchmark judges by.

BINARY_STE = """
@jax.custom_vjp
def binarize(w):
  # binarised weights: sign forward, straight through inside [-1, 1] backward
  return jnp.where(w >= 0, 1., -1.)

def reference(w):
  c = jnp.clip(w, -1., 1.)
  return c + jax.lax.stop_gradient(jnp.where(w >= 0, 1., -1.) - c)

def binarize_fwd(w):
  return binarize(w), jnp.abs(w) <= 1.

def binarize_bwd(inside, g):
  return (g * inside,)

binarize.defvjp(binarize_fwd, binarize_bwd)
"""

ROUND_BF16 = """
@jax.custom_vjp
def fake_quant(x):
  # 3-bit fractional fake quantisation, straight-through
  return jnp.floor(x * 8. + 0.5) / 8.

def reference(x):
  return x + jax.lax.stop_gradient(jnp.floor(x * 8. + 0.5) / 8. - x)

def fake_quant_fwd(x):
  return fake_quant(x), None

def fake_quant_bwd(_, g):
  return (g,)

fake_quant.defvjp(fake_quant_fwd, fake_quant_bwd)
"""

REVERSAL = """
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def flip_grad(x, lam):
  # domain-adversarial training: identity forward, reversed and scaled gradient
  return x

def reference(x, lam):
  return jax.lax.stop_gradient((1. + lam) * x) - lam * x

def flip_grad_fwd(x, lam):
  return x, None

def flip_grad_bwd(lam, _, g):
  return (-lam * g,)

flip_grad.defvjp(flip_grad_fwd, flip_grad_bwd)
"""

CLIP_GRAD = """
@jax.custom_vjp
def clip_grad(x):
  # gradient clipping in the backward pass only
  return x

@jax.custom_vjp
def reference(x):   # what the user means, written apart: the cotangent clipped
  return x
reference.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))

def clip_grad_fwd(x):
  return x, None

def clip_grad_bwd(_, g):
  return (jnp.clip(g, -0.5, 0.5),)

clip_grad.defvjp(clip_grad_fwd, clip_grad_bwd)
"""

LSQ = """
@jax.custom_vjp
def lsq(x, step):
  # learned-step quantiser, straight through for x; the step is trained elsewhere
  return jnp.round(x / step) * step

def reference(x, step):
  return x + jax.lax.stop_gradient(jnp.round(x / step) * step - x) + 0. * jax.lax.stop_gradient(step)

def lsq_fwd(x, step):
  return lsq(x, step), None

def lsq_bwd(_, g):
  return g, None

lsq.defvjp(lsq_fwd, lsq_bwd)
"""

SMOOTH_STEP = """
@jax.custom_vjp
def spike(v):
  # spiking neuron: a hard threshold forward, a sigmoid's slope backward
  return (v > 0.).astype(v.dtype)

def reference(v):
  s = jax.nn.sigmoid(4. * v)
  return s + jax.lax.stop_gradient((v > 0.).astype(v.dtype) - s)

def spike_fwd(v):
  return spike(v), v

def spike_bwd(v, g):
  s = jax.nn.sigmoid(4. * v)
  return (g * 4. * s * (1. - s),)

spike.defvjp(spike_fwd, spike_bwd)
"""

HARD_ONEHOT = """
@jax.custom_vjp
def hard_choice(logits):
  # straight-through one-hot: argmax forward, softmax's gradient backward
  return jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1])

def reference(logits):
  y = jax.nn.softmax(logits)
  return y + jax.lax.stop_gradient(jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1]) - y)

def hard_choice_fwd(logits):
  return hard_choice(logits), jax.nn.softmax(logits)

def hard_choice_bwd(y, g):
  return (y * (g - (g * y).sum(-1, keepdims=True)),)

hard_choice.defvjp(hard_choice_fwd, hard_choice_bwd)
"""

BUCKETS = """
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def bucketize(x, n):
  # n uniform buckets on [0, 1), straight through
  return jnp.floor(jnp.clip(x, 0., 0.999) * n) / n

def reference(x, n):
  c = jnp.clip(x, 0., 0.999)
  return c + jax.lax.stop_gradient(jnp.floor(c * n) / n - c)

def bucketize_fwd(x, n):
  return bucketize(x, n), (x >= 0.) & (x <= 0.999)

def bucketize_bwd(n, inside, g):
  return (g * inside,)

bucketize.defvjp(bucketize_fwd, bucketize_bwd)
"""

TREE_CLIP = """
@jax.custom_vjp
def clip_tree(p):
  # per-leaf gradient clipping of a parameter dict, identity forward
  return p

@jax.custom_vjp
def reference(p):   # what the user means, written apart: every leaf's cotangent clipped
  return p
reference.defvjp(lambda p: (p, None),
                 lambda _, g: (jax.tree_util.tree_map(lambda t: jnp.clip(t, -0.5, 0.5), g),))

def clip_tree_fwd(p):
  return p, None

def clip_tree_bwd(_, g):
  return (jax.tree.map(lambda t: jnp.clip(t, -0.5, 0.5), g),)

clip_tree.defvjp(clip_tree_fwd, clip_tree_bwd)
"""

CALLBACK = """
import scipy.special

def _log_i0e(k):
  # log of the exponentially scaled Bessel I0, on the host
  return jax.pure_callback(lambda k: np.log(scipy.special.i0e(k)).astype(k.dtype),
                           jax.ShapeDtypeStruct(k.shape, k.dtype), k, vmap_method="expand_dims")

def _ratio(k):
  return jax.pure_callback(lambda k: (scipy.special.i1e(k) / scipy.special.i0e(k)).astype(k.dtype),
                           jax.ShapeDtypeStruct(k.shape, k.dtype), k, vmap_method="expand_dims")

@jax.custom_vjp
def vmf_log_norm(kappa):
  # log I0(kappa) - 0.5 log(kappa), for kappa > 0 (NaN below: outside the domain)
  return _log_i0e(kappa) + kappa - 0.5 * jnp.log(kappa)

def vmf_fwd(kappa):
  return vmf_log_norm(kappa), kappa

def vmf_bwd(kappa, g):
  return (g * (_ratio(kappa) - 0.5 / kappa),)

vmf_log_norm.defvjp(vmf_fwd, vmf_bwd)

def reference(kappa):   # the same function in JAX's own terms, for the benchmark's judge
  return jnp.log(jax.scipy.special.i0e(kappa)) + kappa - 0.5 * jnp.log(kappa)
"""


# Written for issue 30's second part (custom_jvp tangents, library-built returns), measured
# before any change for it.
JVP_SOFTPLUS = """
@jax.custom_jvp
def softplus(x):
  return jnp.logaddexp(x, 0.)

@softplus.defjvp
def softplus_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return softplus(x), t * jax.nn.sigmoid(x)
"""

JVP_F16 = """
@jax.custom_jvp
def swish16(x):
  x32 = x.astype(jnp.float32)
  return (x32 * jax.nn.sigmoid(x32)).astype(jnp.float16)

@swish16.defjvp
def swish16_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  x32 = x.astype(jnp.float32)
  s = jax.nn.sigmoid(x32)
  d = s * (1. + x32 * (1. - s))
  return swish16(x), (t.astype(jnp.float32) * d).astype(jnp.float16)
"""

JVP_MATMUL = """
@jax.custom_jvp
def dense(x, w):
  return x @ w

@dense.defjvp
def dense_jvp(primals, tangents):
  (x, w), (tx, tw) = primals, tangents
  return x @ w, tx @ w + x @ tw
"""

JVP_LSE = """
@jax.custom_jvp
def lse_rows(x):
  m = x.max(-1, keepdims=True)
  return (m + jnp.log(jnp.exp(x - m).sum(-1, keepdims=True)))[..., 0]

@lse_rows.defjvp
def lse_rows_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  y = lse_rows(x)
  p = jnp.exp(x - y[..., None])
  return y, (p * t).sum(-1)
"""

JVP_MOMENTS = """
@jax.custom_jvp
def moments(x):
  mu = x.mean(0)
  return mu, ((x - mu) ** 2).mean(0)

@moments.defjvp
def moments_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  mu, var = moments(x)
  dmu = t.mean(0)
  dvar = (2. * (x - mu) * (t - dmu)).mean(0)
  return (mu, var), (dmu, dvar)
"""

JVP_ONE_TUPLE = """
@jax.custom_jvp
def sq_norm(x):
  # returns a 1-tuple, as a layer returning (output,) does
  return ((x * x).sum(-1),)

@sq_norm.defjvp
def sq_norm_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return sq_norm(x), ((2. * x * t).sum(-1),)
"""

JVP_STE = """
@jax.custom_jvp
def ste_round(x):
  # straight-through rounding: round forward, identity tangent
  return jnp.round(x)

def reference(x):
  return x + jax.lax.stop_gradient(jnp.round(x) - x)

@ste_round.defjvp
def ste_round_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return jnp.round(x), t
"""

JVP_SIGN_STE = """
@jax.custom_jvp
def sign_ste(w):
  # binarised weights: sign forward, straight through inside [-1, 1]
  return jnp.where(w >= 0, 1., -1.)

def reference(w):
  c = jnp.clip(w, -1., 1.)
  return c + jax.lax.stop_gradient(jnp.where(w >= 0, 1., -1.) - c)

@sign_ste.defjvp
def sign_ste_jvp(primals, tangents):
  (w,), (t,) = primals, tangents
  return sign_ste(w), jnp.where(jnp.abs(w) <= 1., t, 0.)
"""

EQX_LINEAR = """
import equinox as eqx

from fix_corpus.held_out import Lin

@jax.custom_vjp
def linear(layer, x):
  return layer.weight @ x + layer.bias

def linear_fwd(layer, x):
  return linear(layer, x), (layer, x)

def linear_bwd(res, g):
  layer, x = res
  dW = jnp.outer(g, x)
  db = g
  dx = layer.weight.T @ g
  return eqx.tree_at(lambda l: (l.weight, l.bias), layer, (dW, db)), dx

linear.defvjp(linear_fwd, linear_bwd)
"""

REPLACED = """
import dataclasses
from fix_corpus.held_out import Affine

@jax.custom_vjp
def film(p, x):
  # feature-wise modulation of a batch
  return x * p.scale + p.shift

def film_fwd(p, x):
  return film(p, x), (p, x)

def film_bwd(res, g):
  p, x = res
  dp = dataclasses.replace(p, scale=(g * x).sum(0), shift=g.sum(0))
  return dp, g * p.scale

film.defvjp(film_fwd, film_bwd)
"""

NNX_TREE_MODE = """
from flax import nnx

from fix_corpus.held_out import NLin

@nnx.custom_vjp(graph_updates=False)
def nnx_linear(m, x):
  return x @ m.w[...] + m.b[...]

def nnx_linear_fwd(m, x):
  return nnx_linear(m, x), (m, x)

def nnx_linear_bwd(res, g):
  m, x = res
  m_g = nnx.clone(m)
  m_g.w.set_value(x.T @ g)
  m_g.b.set_value(g.sum(0))
  return m_g, g @ m.w[...].T

nnx_linear.defvjp(nnx_linear_fwd, nnx_linear_bwd)
"""

FLAX_PARAMS = """
@jax.custom_vjp
def dense_apply(variables, x):
  p = variables['params']['dense']
  return x @ p['kernel'] + p['bias']

def dense_apply_fwd(variables, x):
  return dense_apply(variables, x), (variables, x)

def dense_apply_bwd(res, g):
  variables, x = res
  kernel = variables['params']['dense']['kernel']
  grads = {'params': {'dense': {'kernel': x.T @ g, 'bias': g.sum(0)}}}
  return grads, g @ kernel.T

dense_apply.defvjp(dense_apply_fwd, dense_apply_bwd)
"""

TREE_MAP_DECAY = """
@jax.custom_vjp
def decayed(params, lam):
  # an L2 penalty over a parameter tree
  return lam * sum(jnp.sum(w ** 2) for w in jax.tree.leaves(params))

def decayed_fwd(params, lam):
  return decayed(params, lam), (params, lam)

def decayed_bwd(res, g):
  params, lam = res
  dparams = jax.tree.map(lambda w: 2. * g * lam * w, params)
  dlam = g * sum(jnp.sum(w ** 2) for w in jax.tree.leaves(params))
  return dparams, dlam

decayed.defvjp(decayed_fwd, decayed_bwd)
"""

POSITIONAL = """
from fix_corpus.held_out import Affine

@jax.custom_vjp
def modulate(p, x):
  return x * p.scale + p.shift

def modulate_fwd(p, x):
  return modulate(p, x), (p.scale, x)

def modulate_bwd(res, g):
  scale, x = res
  return Affine((g * x).sum(0), g.sum(0)), g * scale

modulate.defvjp(modulate_fwd, modulate_bwd)
"""

NAMED_WHERE = """
import equinox as eqx

from fix_corpus.held_out import Scale

def gain_of(m):
  return m.gain

@jax.custom_vjp
def rescale(m, x):
  return x * m.gain + m.offset

def rescale_fwd(m, x):
  return rescale(m, x), (m, x)

def rescale_bwd(res, g):
  m, x = res
  dm = eqx.tree_at(gain_of, m, (g * x).sum(0))
  dm = eqx.tree_at(lambda t: t.offset, dm, g.sum(0))
  return dm, g * m.gain

rescale.defvjp(rescale_fwd, rescale_bwd)
"""


CASES = (
    c("ln_channels", "reduction", "gamma's gradient summed over the batch axis only",
      LAYER_NORM_CH, ("dgamma = (dy * xhat).sum(axis=(0, 2))", "dgamma = (dy * xhat).sum(0)"),
      lambda r: (normal(r, 2, 5, 3), positive(r, 5))),
    c("ln_channels", "sign_scale", "the projection term's sign flipped",
      LAYER_NORM_CH, ("- xhat * (dxhat * xhat)", "+ xhat * (dxhat * xhat)"),
      lambda r: (normal(r, 2, 5, 3), positive(r, 5))),
    c("rms_norm", "swapped", "returns (dw, dx)",
      RMS_BF16, ("return dx.astype(jnp.bfloat16), dw", "return dw, dx.astype(jnp.bfloat16)"),
      lambda r: (bf16(normal(r, 2, 3, 6)), positive(r, 6))),
    c("rms_norm", "dtype", "dx left in float32 for a bfloat16 input",
      RMS_BF16, ("return dx.astype(jnp.bfloat16), dw", "return dx, dw"),
      lambda r: (bf16(normal(r, 2, 3, 6)), positive(r, 6))),
    c("xent", "missing_tuple", "no entry for the integer labels",
      XENT_INT, ("return dlogits, None", "return dlogits"),
      lambda r: (normal(r, 4, 7), ints(r, 7, 4))),
    c("xent", "sign_scale", "the upstream cotangent forgotten",
      XENT_INT, ("dlogits = g[:, None] * (probs - onehot)", "dlogits = probs - onehot"),
      lambda r: (normal(r, 4, 7), ints(r, 7, 4))),
    c("lse", "wrong_axis", "the softmax taken over axis 0, not the reduced axis",
      LSE, ("p = jnp.exp(x - jnp.expand_dims(out, axis))",
            "p = jax.nn.softmax(x, axis=0)"),
      lambda r: (normal(r, 5, 5), 1)),
    c("lse", "extra_output", "a cotangent for the static axis too",
      LSE, ("return (jnp.expand_dims(g, axis) * p,)", "return (jnp.expand_dims(g, axis) * p, None)"),
      lambda r: (normal(r, 3, 6), 1)),
    c("scores", "transposed", "dk from g, not g's transpose (square in T)",
      SCORES, ("dk = jnp.einsum('bhts,bhtd->bhsd', g, q) * scale",
               "dk = jnp.einsum('bhst,bhtd->bhsd', g, q) * scale"),
      lambda r: (normal(r, 2, 3, 5, 4), normal(r, 2, 3, 5, 4))),
    c("scores", "sign_scale", "dq without the 1/sqrt(d) scale",
      SCORES, ("dq = jnp.einsum('bhts,bhsd->bhtd', g, k) * scale",
               "dq = jnp.einsum('bhts,bhsd->bhtd', g, k)"),
      lambda r: (normal(r, 2, 3, 5, 4), normal(r, 2, 3, 5, 4))),
    c("lookup", "scatter", "duplicate ids overwrite instead of accumulate",
      EMBED, ("dtable = jax.ops.segment_sum(g.reshape(-1, g.shape[-1]), ids.reshape(-1), "
              "num_segments=vocab)",
              "dtable = jnp.zeros((vocab, g.shape[-1]), g.dtype).at[ids.reshape(-1)].set("
              "g.reshape(-1, g.shape[-1]))"),
      lambda r: (normal(r, 6, 3), ints(r, 6, 2, 5))),
    c("lookup", "reduction", "the output cotangent returned as the table's",
      EMBED, ("return dtable, None", "return g.sum(0), None"),
      lambda r: (normal(r, 6, 3), ints(r, 6, 2, 5))),
    c("pick", "scatter", "gathered cotangent not scattered back",
      GATHER, ("return jnp.zeros(shape, g.dtype).at[rows, idx].add(g), None", "return g, None"),
      lambda r: (normal(r, 4, 7), ints(r, 7, 4, 3))),
    c("seg_sum", "scatter", "segment cotangent not gathered back",
      SEGSUM, ("return g[seg], None", "return g, None"),
      lambda r: (normal(r, 8, 3), np.sort(ints(r, 5, 8)), 5)),
    c("seg_sum", "extra_output", "a cotangent for the static num_segments",
      SEGSUM, ("return g[seg], None", "return g[seg], None, None"),
      lambda r: (normal(r, 8, 3), np.sort(ints(r, 5, 8)), 5)),
    c("hardtanh", "sign_scale", "the gradient clipped instead of masked",
      CLIP, ("return (jnp.where(inside, g, 0.),)", "return (jnp.clip(g, -1., 1.),)"),
      lambda r: (2 * normal(r, 3, 5),)),
    c("quantize", "transposed", "straight-through gradient transposed",
      STE_ROUND, ("return (g,)", "return (g.T,)"),
      lambda r: (normal(r, 3, 5),)),
    c("grad_reverse", "extra_output", "a cotangent for the static lambda too",
      GRAD_REVERSE, ("return (-lam * g,)", "return (-lam * g, None)"),
      lambda r: (normal(r, 4, 3), 0.5)),
    c("power", "sign_scale", "the conjugate forgotten",
      CABS2, ("return (2. * g * jnp.conj(z),)", "return (2. * g * z,)"),
      lambda r: ((normal(r, 6) + 1j * normal(r, 6)).astype(np.complex64),)),
    c("phase_shift", "dtype", "dtheta left complex",
      CMUL, ("dtheta = jnp.sum((1j * g * z * rot).real, axis=0)",
                "dtheta = jnp.sum(1j * g * z * rot, axis=0)"),
      lambda r: ((normal(r, 4, 3) + 1j * normal(r, 4, 3)).astype(np.complex64), normal(r, 3))),
    c("proj", "reduction", "dw per batch element, not summed",
      BMM, ("dw = jnp.einsum('btk,btn->kn', x, g)", "dw = jnp.swapaxes(x, -1, -2) @ g"),
      lambda r: (normal(r, 2, 3, 4), normal(r, 4, 5))),
    c("bmm", "reduction", "the broadcast axis summed without keepdims",
      BMM_BCAST, ("db = (jnp.swapaxes(a, -1, -2) @ g).sum(0, keepdims=True)",
                  "db = (jnp.swapaxes(a, -1, -2) @ g).sum(0)"),
      lambda r: (normal(r, 2, 1, 3, 4), normal(r, 1, 5, 4, 6))),
    c("rnn_cell", "transposed", "dW = dz.T @ h (square, so well-typed)",
      RNN, ("h.T @ dz", "dz.T @ h"),
      lambda r: (normal(r, 2, 4), normal(r, 2, 4), 0.5 * normal(r, 4, 4))),
    c("rnn_cell", "swapped", "dh and dW returned in each other's place",
      RNN, ("return dz @ W.T, dz, h.T @ dz", "return h.T @ dz, dz, dz @ W.T"),
      lambda r: (normal(r, 3, 4), normal(r, 3, 4), 0.5 * normal(r, 4, 4))),
    c("softsign", "missing_tuple", "a bare array from a jitted primal's rule",
      JITTED, ("return (g / (1. + jnp.abs(x)) ** 2,)", "return g / (1. + jnp.abs(x)) ** 2"),
      lambda r: (normal(r, 3, 4),)),
    c("dense_relu", "structure", "the params cotangent as a tuple, not the dict",
      DICT_MLP, ("return {'kernel': x.T @ dz, 'bias': dz.sum(0)}, dz @ kernel.T",
                 "return (x.T @ dz, dz.sum(0)), dz @ kernel.T"),
      lambda r: ({"kernel": normal(r, 5, 3), "bias": normal(r, 3)}, normal(r, 4, 5))),
    c("dense_relu", "transposed", "the kernel's gradient transposed",
      DICT_MLP, ("'kernel': x.T @ dz", "'kernel': dz.T @ x"),
      lambda r: ({"kernel": normal(r, 5, 3), "bias": normal(r, 3)}, normal(r, 4, 5))),
    c("affine", "reduction", "the shift's gradient not summed over the batch",
      DATACLASS, ("shift=g.sum(0)", "shift=g"),
      lambda r: (_affine(r), normal(r, 4, 3))),
    c("bilinear", "swapped", "du and dv returned in each other's place",
      TUPLE_ARG, ("return (du, dv), dW", "return (dv, du), dW"),
      lambda r: ((normal(r, 4, 3), normal(r, 4, 5)), normal(r, 3, 5))),
    c("center", "wrong_axis", "the mean taken over axis 0 whatever the axis",
      NORMALIZE_AXIS, ("g.mean(axis, keepdims=True)", "g.mean(0, keepdims=True)"),
      lambda r: (normal(r, 4, 6), 1)),
    c("temper", "transposed", "x's cotangent transposed (t's None by choice)",
      STOP_SCALE, ("return g / t, None", "return (g / t).T, None"),
      lambda r: (normal(r, 3, 5), positive(r, 1))),
    c("mp_dense", "dtype", "dw left bfloat16 for a float32 master weight",
      BF16_MATMUL, ("dw = (xb.T @ g).astype(jnp.float32)", "dw = xb.T @ g"),
      lambda r: (normal(r, 4, 6), normal(r, 6, 3))),
    c("gelu16", "dtype", "the cotangent left float32 for a float16 input",
      FP16_GELU, ("return ((g.astype(jnp.float32) * d).astype(jnp.float16),)",
                  "return (g.astype(jnp.float32) * d,)"),
      lambda r: (normal(r, 3, 4).astype(np.float16),)),
    c("softmax", "wrong_axis", "the inner sum over every axis, not the softmax axis",
      SOFTMAX, ("(g * y).sum(-1, keepdims=True)", "(g * y).sum()"),
      lambda r: (normal(r, 3, 5),)),
    c("huber", "swapped", "d returned for target and -d for pred",
      HUBER, ("return d, -d", "return -d, d"),
      lambda r: (normal(r, 4, 3), normal(r, 4, 3), 1.0)),
    c("sq_dist", "sign_scale", "the factor 2 forgotten on b",
      VMAPPED, ("-2. * g * d", "-g * d"),
      lambda r: (normal(r, 5), normal(r, 5))),
    c("cosine", "missing_tuple", "only a's cotangent returned",
      COSINE, ("return da, db", "return da"),
      lambda r: (normal(r, 3, 4), normal(r, 3, 4))),
    c("glu", "structure", "the two halves returned separately",
      GLU, ("return (jnp.concatenate([da, db], axis=-1),)", "return (da, db)"),
      lambda r: (normal(r, 3, 8),)),
    c("mean_pool", "reduction", "the pooled cotangent not broadcast back over time",
      POOL, ("dx = (g / lengths[:, None])[:, None, :] * mask[..., None]",
             "dx = g / lengths[:, None]"),
      lambda r: (normal(r, 3, 5, 4), r.integers(1, 6, 3).astype(np.int32))),
    # Written after 49276f4 (the fixes the cases above led to), measured once before any
    # further change: how those fixes generalise.
    c("inorm", "sign_scale", "the mean of g forgotten",
      INSTANCE_NORM, ("g - g.mean(1, keepdims=True) - y", "g - y"),
      lambda r: (normal(r, 2, 6, 3),)),
    c("nll", "sign_scale", "the minus sign dropped",
      NLL, ("return -g[..., None] * jax.nn.one_hot(labels, n), None",
            "return g[..., None] * jax.nn.one_hot(labels, n), None"),
      lambda r: (normal(r, 3, 4, 5), ints(r, 5, 3, 4))),
    c("outer", "transposed", "v's cotangent through g, not its transpose (square)",
      OUTER, ("u @ g", "g @ u"),
      lambda r: (normal(r, 4), normal(r, 4))),
    c("rope", "sign_scale", "the rotation applied forwards in the backward pass",
      ROTARY, ("unrotate_half(g * sin)", "rotate_half(g * sin)"),
      lambda r: (normal(r, 5, 6), normal(r, 5, 6), normal(r, 5, 6))),
    c("mix", "structure", "the audio entry missing",
      DICT_SUM, ("dfeats = {'audio': w[0] * g, 'video': w[1] * g}",
                 "dfeats = {'video': w[1] * g}"),
      lambda r: ({"audio": normal(r, 3, 4), "video": normal(r, 3, 4)}, normal(r, 2))),
    c("diag_part", "reduction", "summed over the batch of matrices",
      DIAG, ("(g[..., None] * jnp.eye(n, dtype=g.dtype),)",
             "((g[..., None] * jnp.eye(n, dtype=g.dtype)).sum(0),)"),
      lambda r: (normal(r, 2, 4, 4),)),
    c("layer_scale", "dtype", "dx left float32 for a float16 input",
      FP16_SCALE, ("dx = (g32 * gamma).astype(jnp.float16)", "dx = g32 * gamma"),
      lambda r: (normal(r, 3, 4).astype(np.float16), positive(r, 4))),
    c("polar", "sign_scale", "the rotation conjugated",
      POLAR, ("dr = (g * rot).real", "dr = (g * jnp.conj(rot)).real"),
      lambda r: (positive(r, 5), normal(r, 5))),
    c("heads", "reduction", "dx not summed over the heads",
      SHARED_W, ("dx = (g @ jnp.swapaxes(w, -1, -2)).sum(0)", "dx = g @ jnp.swapaxes(w, -1, -2)"),
      lambda r: (normal(r, 3, 4), normal(r, 2, 4, 5))),
    c("masked_softmax", "missing_tuple", "no entry for the mask",
      MASKED_SOFTMAX, ("return y * (g - (g * y).sum(-1, keepdims=True)), None",
                       "return y * (g - (g * y).sum(-1, keepdims=True))"),
      lambda r: (normal(r, 3, 5), r.uniform(size=(3, 5)) < 0.7)),
    # Written after f2af3ec (the value slips), measured once before any further change.
    c("unit", "sign_scale", "the projection added, not removed (under vmap)",
      VMAPPED_NORM, ("(g - u * jnp.dot(u, g))", "(g + u * jnp.dot(u, g))"),
      lambda r: (normal(r, 4),)),
    c("sq_norm_rows", "reduction", "summed over rows under checkpoint and jit",
      REMAT, ("(2. * g[:, None] * x,)", "((2. * g[:, None] * x).sum(0),)"),
      lambda r: (normal(r, 3, 5),)),
    c("shift_scale", "sign_scale", "mu's gradient with the wrong sign",
      DICT_BIAS, ("'mu': -(g * p['gain']).sum(0)", "'mu': (g * p['gain']).sum(0)"),
      lambda r: ({"mu": normal(r, 4), "gain": positive(r, 4)}, normal(r, 3, 4))),
    c("hypot", "swapped", "a's and b's cotangents exchanged",
      LIST_RET, ("return (g * a / h, g * b / h)", "return (g * b / h, g * a / h)"),
      lambda r: (positive(r, 5), positive(r, 5))),
    # Written for issue 30, measured before any change for it (surrogates unmarked).
    c("binarize", "surrogate", "the straight-through sign returns a bare array",
      BINARY_STE, ("return (g * inside,)", "return g * inside"),
      lambda r: (1.5 * normal(r, 4, 3),)),
    c("fake_quant", "surrogate", "the straight-through cotangent returned in bfloat16",
      ROUND_BF16, ("return (g,)", "return (g.astype(jnp.bfloat16),)"),
      lambda r: (normal(r, 3, 5),)),
    c("flip_grad", "surrogate", "the reversed gradient not in a tuple",
      REVERSAL, ("return (-lam * g,)", "return -lam * g"),
      lambda r: (normal(r, 4, 3), 0.5)),
    c("clip_grad", "surrogate", "a cotangent for nothing appended",
      CLIP_GRAD, ("return (jnp.clip(g, -0.5, 0.5),)", "return (jnp.clip(g, -0.5, 0.5), None)"),
      lambda r: (normal(r, 6),)),
    c("lsq", "surrogate", "the step's None forgotten",
      LSQ, ("return g, None", "return g"),
      lambda r: (normal(r, 3, 4), positive(r, 1))),
    c("spike", "surrogate", "the surrogate slope transposed",
      SMOOTH_STEP, ("return (g * 4. * s * (1. - s),)", "return ((g * 4. * s * (1. - s)).T,)"),
      lambda r: (normal(r, 3, 5),)),
    c("hard_choice", "surrogate", "the straight-through softmax gradient as a bare array",
      HARD_ONEHOT, ("return (y * (g - (g * y).sum(-1, keepdims=True)),)",
                    "return y * (g - (g * y).sum(-1, keepdims=True))"),
      lambda r: (normal(r, 4, 6),)),
    c("bucketize", "surrogate", "a cotangent for the static bucket count",
      BUCKETS, ("return (g * inside,)", "return (g * inside, None)"),
      lambda r: (r.uniform(-0.2, 1.2, (3, 4)).astype(np.float32), 8)),
    c("clip_tree", "surrogate", "the clipped dict returned without its tuple",
      TREE_CLIP, ("return (jax.tree.map(lambda t: jnp.clip(t, -0.5, 0.5), g),)",
                  "return jax.tree.map(lambda t: jnp.clip(t, -0.5, 0.5), g)"),
      lambda r: ({"w": normal(r, 3, 2), "b": normal(r, 2)},)),
    c("vmf_log_norm", "sign_scale", "the 0.5/kappa term with the wrong sign (a host callback)",
      CALLBACK, ("(_ratio(kappa) - 0.5 / kappa)", "(_ratio(kappa) + 0.5 / kappa)"),
      lambda r: (positive(r, 5),)),
    # Written for issue 30's second part, measured before any change for it.
    c("softplus", "jvp_dtype", "the tangent cast to bfloat16",
      JVP_SOFTPLUS, ("return softplus(x), t * jax.nn.sigmoid(x)",
                     "return softplus(x), (t * jax.nn.sigmoid(x)).astype(jnp.bfloat16)"),
      lambda r: (normal(r, 3, 4),)),
    c("swish16", "jvp_dtype", "the tangent left float32 for a float16 output",
      JVP_F16, ("(t.astype(jnp.float32) * d).astype(jnp.float16)", "t.astype(jnp.float32) * d"),
      lambda r: (normal(r, 3, 4).astype(np.float16),)),
    c("dense", "jvp_shape", "x's tangent term written transposed",
      JVP_MATMUL, ("tx @ w + x @ tw", "w.T @ tx.T + (x @ tw).T"),
      lambda r: (normal(r, 4, 5), normal(r, 5, 3))),
    c("lse_rows", "jvp_shape", "the tangent not summed over the reduced axis",
      JVP_LSE, ("(p * t).sum(-1)", "p * t"),
      lambda r: (normal(r, 3, 5),)),
    c("moments", "jvp_structure", "the tangents as a list for a tuple output",
      JVP_MOMENTS, ("(dmu, dvar)", "[dmu, dvar]"),
      lambda r: (normal(r, 6, 3),)),
    c("sq_norm", "jvp_structure", "a bare tangent for a 1-tuple output",
      JVP_ONE_TUPLE, ("((2. * x * t).sum(-1),)", "(2. * x * t).sum(-1)"),
      lambda r: (normal(r, 3, 4),)),
    c("ste_round", "surrogate", "the straight-through tangent in bfloat16 (custom_jvp)",
      JVP_STE, ("return jnp.round(x), t", "return jnp.round(x), t.astype(jnp.bfloat16)"),
      lambda r: (2 * normal(r, 3, 5),)),
    c("sign_ste", "surrogate", "the straight-through tangent transposed (custom_jvp)",
      JVP_SIGN_STE, ("jnp.where(jnp.abs(w) <= 1., t, 0.)", "jnp.where(jnp.abs(w) <= 1., t, 0.).T"),
      lambda r: (1.5 * normal(r, 4, 3),)),
    c("film", "library_built", "the shift's gradient not summed, in dataclasses.replace",
      REPLACED, ("shift=g.sum(0)", "shift=g"),
      lambda r: (_affine(r), normal(r, 4, 3))),
    c("dense_apply", "library_built", "the kernel's gradient transposed in a flax param dict",
      FLAX_PARAMS, ("'kernel': x.T @ g", "'kernel': g.T @ x"),
      lambda r: ({"params": {"dense": {"kernel": normal(r, 5, 3), "bias": normal(r, 3)}}},
                 normal(r, 4, 5))),
    c("decayed", "library_built", "each leaf's gradient cast to bfloat16 in jax.tree.map",
      TREE_MAP_DECAY, ("lambda w: 2. * g * lam * w", "lambda w: (2. * g * lam * w).astype(jnp.bfloat16)"),
      lambda r: ({"w": normal(r, 3, 4), "b": normal(r, 4)}, positive(r))),
    c("modulate", "library_built", "the shift's gradient not summed, positional constructor",
      POSITIONAL, ("Affine((g * x).sum(0), g.sum(0))", "Affine((g * x).sum(0), g)"),
      lambda r: (_affine(r), normal(r, 4, 3))),
) + ((   # equinox's own: only where it is installed
    c("linear", "library_built", "dW = outer(x, g) inside eqx.tree_at",
      EQX_LINEAR, ("dW = jnp.outer(g, x)", "dW = jnp.outer(x, g)"),
      lambda r: (_lin(r), normal(r, 5))),
    c("rescale", "library_built", "the gain's gradient not summed, eqx.tree_at with a named where",
      NAMED_WHERE, ("eqx.tree_at(gain_of, m, (g * x).sum(0))", "eqx.tree_at(gain_of, m, g * x)"),
      lambda r: (_scale(r), normal(r, 4, 3))),
) if eqx is not None else ()) + ((   # flax nnx's own: only where it is installed
    c("nnx_linear", "library_built", "the kernel's gradient transposed, set on an nnx.clone "
      "of the module (nnx.custom_vjp(graph_updates=False))",
      NNX_TREE_MODE, ("m_g.w.set_value(x.T @ g)", "m_g.w.set_value(g.T @ x)"),
      lambda r: (_nlin(r), normal(r, 4, 5))),
) if nnx is not None else ())



@functools.partial(jax.tree_util.register_dataclass, data_fields=["scale", "shift"], meta_fields=[])
@dataclasses.dataclass
class Affine:
  """A parameter dataclass (the cells import it: every cell must see the same class)."""
  scale: jax.Array
  shift: jax.Array


def _affine(rng):
  return Affine(normal(rng, 3), normal(rng, 3))



if eqx is not None:
  class Lin(eqx.Module):
    """An equinox linear layer (the cells import it, as ``Affine``)."""
    weight: jax.Array
    bias: jax.Array

  class Scale(eqx.Module):
    gain: jax.Array
    offset: jax.Array


def _lin(rng):
  return Lin(normal(rng, 4, 5), normal(rng, 4))


def _scale(rng):
  return Scale(normal(rng, 3), normal(rng, 3))


if nnx is not None:
  class NLin(nnx.Module):
    """A flax nnx linear layer (the cells import it, as ``Lin``)."""

    def __init__(self, w, b):
      self.w, self.b = nnx.Param(w), nnx.Param(b)


def _nlin(rng):
  return NLin(normal(rng, 5, 3), normal(rng, 3))
