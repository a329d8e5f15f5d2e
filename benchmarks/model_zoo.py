"""A generated model zoo that judges vjpviz's values: ``vv.grads`` and ``vv.nans`` on
seeded random programs, each with at most one injected defect whose truth is known.

Every program is written as Python source into a module file of its own and imported, so
each operation has a real ``file:line`` and a fix can be pasted at its line. A program is
a model (plain pytree, equinox split as ``eqx.filter_grad`` would, flax linen's ``init``
params, flax nnx's ``split`` state) of random blocks (dense, residual, layer norm, RMS
norm, masked attention, an embedding lookup, a scanned stack, a ``jax.checkpoint`` block,
equinox's MLP with ``gelu`` as a function field), a loss, sometimes under ``jit``, in
float32, bfloat16 or float16, and one defect at a random place, written one of a few
ways: a zero-gradient one (``ZERO_DEFECTS``: which leaves go zero and why), a NaN one
(``NAN_DEFECTS``: which line makes the gradient NaN), or none (``control``). The
constructed truth is checked against plain ``jax.grad`` (the exact zeros per leaf,
finiteness): the expected zero leaves are jax.grad's (the defect's own leaves must be
among them, and a control has none), and a draw that disagrees is drawn again; one that
keeps disagreeing is reported unbuildable, never counted.

Each program gets one verdict: ``exact``, ``wrong reason`` (a wrong reason, source line
or zero factor for any zero leaf; for NaNs a culprit on another line), ``missed``,
``false alarm`` (a control with any zero leaf, alarm, layer flag or NaN diagnosis; or a
leaf claimed zero that jax.grad gives a gradient), ``crash`` (vjpviz raised, or its
safety net printed an internal error, on a program jax.grad takes) or
``verified-but-wrong``: the first ``verified`` fix, pasted at its line by this file (not
by vjpviz's oracle), does not give the same loss, a finite gradient, and the original
loss's float64 central differences. ``fixed`` counts the verified fixes that passed.

    PYTHONPATH=$PWD python benchmarks/model_zoo.py --n 500 --seed 0 [--families ..]
        [--defects ..] [--index I ..] [--keep DIR] [--traceback]

Each non-exact program prints a one-line repro hint (seed, index, family/defect, dtype,
file, expected against got); ``--index I --keep DIR --traceback`` re-runs it alone and
keeps its module file.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import io
import os
import random
import re
import tempfile
import textwrap
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

import jupyter_vjpviz as vv
import module_files
from jupyter_vjpviz.base import safety

D, BATCH, VOCAB, CLASSES = 8, 8, 16, 4
FAMILIES = ("pytree", "equinox", "linen", "nnx")
DTYPES, DTYPE_WEIGHTS = ("float32", "bfloat16", "float16"), (6, 2, 2)
BLOCKS = ("dense", "residual", "layernorm", "rmsnorm", "attention", "embedding", "scan", "remat")
ZERO_DEFECTS = {          # defect -> the reason vv.grads should give
    "unused": "unused", "discarded": "unused", "stopped": "stopped", "frozen": "stopped",
    "integer": "non_differentiable", "dead_relu": "dead", "saturated": "saturated",
    "lora": "zero_factor", "rezero": "zero_factor", "zero_mask": "zero_factor",
    "zero_head": "zero_factor"}
NAN_DEFECTS = ("sqrt", "sqrt_alias", "sqrt_square", "norm", "std", "log_softmax", "where_log",
               "where_sqrt", "where_div")
DEFECTS = ("control", *ZERO_DEFECTS, *NAN_DEFECTS)
VERDICTS = ("exact", "wrong reason", "missed", "false alarm", "crash", "verified-but-wrong")
ATTEMPTS = 4              # draws of one program before it is reported unbuildable


# ----------------------------------------------------------------------------- drafts

@dataclasses.dataclass
class Draft:
  """A program before it is text. Body lines name a parameter as ``$block.name``; ``marked``
  indexes the injected line; ``core`` are the (block, name) leaves the defect must zero."""
  family: str
  defect: str
  dtype: str
  params: dict                       # (block, name) -> float64 ndarray, in order
  lines: list
  marked: int | None = None
  core: tuple = ()
  factor: tuple | None = None        # zero_factor: the (block, name) that is all zero
  mlp: bool = False                  # equinox: an eqx.nn.MLP(activation=gelu) first
  jit: bool = False                  # the loss under jax.jit (equinox: eqx.filter_jit)


def _dense_params(nrng, block, bias=0.0, scale=1.0):
  return {(block, "w"): nrng.normal(size=(D, D)) * scale / D ** 0.5,
          (block, "b"): np.full(D, bias) + 0.1 * nrng.normal(size=D)}


def block(kind: str, name: str, nrng) -> tuple[dict, list]:
  """One healthy block acting on ``h`` [BATCH, D]: its parameters and lines."""
  if kind == "dense":
    return _dense_params(nrng, name), [f"h = jnp.tanh(h @ ${name}.w + ${name}.b)"]
  if kind == "residual":
    return _dense_params(nrng, name), [f"h = h + jnp.tanh(h @ ${name}.w + ${name}.b)"]
  if kind == "layernorm":
    return ({(name, "g"): 1 + 0.1 * nrng.normal(size=D), (name, "beta"): 0.1 * nrng.normal(size=D)},
            ["mu = h.mean(-1, keepdims=True)",
             "var = ((h - mu) ** 2).mean(-1, keepdims=True)",
             f"h = (h - mu) * jax.lax.rsqrt(var + 1e-5) * ${name}.g + ${name}.beta"])
  if kind == "rmsnorm":
    return ({(name, "g"): 1 + 0.1 * nrng.normal(size=D)},
            [f"h = h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + 1e-6) * ${name}.g"])
  if kind == "attention":
    return ({(name, k): nrng.normal(size=(D, D)) / D ** 0.5 for k in ("wq", "wk", "wv")},
            [f"q, k, v = h @ ${name}.wq, h @ ${name}.wk, h @ ${name}.wv",
             "s = jnp.where(CAUSAL, q @ k.T / D ** 0.5, -1e4)",
             "h = h + jax.nn.softmax(s, axis=-1) @ v"])
  if kind == "embedding":
    return {(name, "table"): nrng.normal(size=(VOCAB, D))}, [f"h = h + ${name}.table[IDS]"]
  if kind == "scan":
    return ({(name, "ws"): nrng.normal(size=(3, D, D)) / D ** 0.5,
             (name, "bs"): 0.1 * nrng.normal(size=(3, D))},
            ["def step(c, wb):",
             "  return c + jnp.tanh(c @ wb[0] + wb[1]), None",
             f"h, _ = jax.lax.scan(step, h, (${name}.ws, ${name}.bs))"])
  if kind == "remat":
    return _dense_params(nrng, name), [
        f"h = jax.checkpoint(lambda h: h + jnp.tanh(h @ ${name}.w + ${name}.b))(h)"]
  raise ValueError(kind)


def special_block(defect: str, name: str, nrng, rng) -> tuple[dict, list, tuple, tuple | None]:
  """The dense block a value defect replaces one with: parameters, lines (the last is the
  injected one), the leaves it must zero, and the zero factor."""
  z = f"h @ ${name}.w + ${name}.b"
  if defect == "dead_relu":
    p = _dense_params(nrng, name, bias=-100.0)
    lines = rng.choice([[f"h = jax.nn.relu({z})"], [f"h = jnp.maximum({z}, 0.0)"],
                        [f"z = {z}", "h = jnp.where(z > 0, z, 0.0)"]])
    return p, lines, tuple(p), None
  if defect == "saturated":
    p = _dense_params(nrng, name, bias=50.0)
    return p, [f"h = {rng.choice(['jnp.tanh', 'jax.nn.sigmoid'])}({z})"], tuple(p), None
  if defect == "frozen":
    p = _dense_params(nrng, name)
    return p, [f"h = jnp.tanh(h @ jax.lax.stop_gradient(${name}.w) + ${name}.b)"], \
        ((name, "w"),), None
  if defect == "lora":
    p = {**_dense_params(nrng, name), (name, "lora_a"): nrng.normal(size=(D, 2)) / D ** 0.5,
         (name, "lora_b"): np.zeros((2, D))}
    return p, [f"h = jnp.tanh(h @ ${name}.w + (h @ ${name}.lora_a) @ ${name}.lora_b + ${name}.b)"], \
        ((name, "lora_a"),), (name, "lora_b")
  if defect == "rezero":
    p = {**_dense_params(nrng, name), (name, "alpha"): np.zeros(())}
    return p, [f"h = h + ${name}.alpha * jnp.tanh({z})"], ((name, "w"), (name, "b")), \
        (name, "alpha")
  if defect == "zero_mask":
    p = _dense_params(nrng, name)
    return p, [f"h = h + MASK0 * jnp.tanh({z})"], tuple(p), None
  raise ValueError(defect)


SPECIAL = ("dead_relu", "saturated", "frozen", "lora", "rezero", "zero_mask")
NAN_LINES = {
    # defect -> ways to write it: lines inserted after a block, the culprit the one marked
    # "!" or else the last; {r} is a local's name, sometimes x (the loss's input's name).
    "sqrt": [["h = jnp.sqrt(jnp.maximum(h, 0.0)) + h"],
             ["h = jax.checkpoint(lambda h: jnp.sqrt(jnp.maximum(h, 0.0)) + h)(h)"],
             ["def nan_step(c, w):",
              "!  return c + jnp.sqrt(jnp.maximum(c @ w, 0.0)), None",
              "h, _ = jax.lax.scan(nan_step, h, $ns.ws)"]],
    "sqrt_alias": [["x = jnp.maximum(h, 0.0)", "h = h + jnp.sqrt(x)"]],
    "sqrt_square": [["{r} = h * FEAT", "h = h + jnp.sqrt({r} ** 2)"]],
    "norm": [["h = h + jnp.linalg.norm(h - h[:1], axis=-1, keepdims=True)"],
             ["{r} = h * FEAT", "h = h + jnp.linalg.norm({r}[:, :1], axis=-1, keepdims=True)"]],
    "std": [["h = h * FEAT", "h = (h - h.mean(0)) / (h.std(0) + 1e-2)"],
            ["h = h * FEAT", "h = (h - h.mean(0)) / (jnp.sqrt(h.var(0)) + 1e-2)"]],
    "where_log": [["{r} = jnp.maximum(h, 0.0)", "h = h + jnp.where({r} > 0, jnp.log({r}), 0.0)"]],
    "where_sqrt": [["{r} = jnp.maximum(h, 0.0)",
                    "h = h + jnp.where({r} > 0, jnp.sqrt({r}), 0.0)"]],
    "where_div": [["{r} = jnp.maximum(h, 0.0)", "h = h + jnp.where({r} > 0, 0.1 / {r}, 0.0)"]],
}
INSERTED = {              # zero defects that insert lines after a block: ways to write them
    "stopped": [["h = jax.lax.stop_gradient(h)"]],
    "integer": [["h = jnp.round(h * 4).astype(jnp.int32).astype(DT) / 4"],
                ["h = jnp.round(h * 4) / 4"], ["h = jnp.sign(h)"]],
    "discarded": [["aux = h @ $aux.w"]],
}
REGRESSION_HEAD = ["out = (h @ $head.w).astype(jnp.float32)",
                   "return ((out[:, 0] - Y) ** 2).mean()"]
SOFTMAX_HEADS = [         # the saturated softmax's log: the culprit line is the third
    ["logits = (h @ $head.w) * 100.0", "probs = jax.nn.softmax(logits, axis=-1)",
     "logp = jnp.log(probs)"],
    ["logits = (h @ $head.w) * 100.0", "n = logits.shape[-1]",
     "logp = jnp.log(jax.nn.softmax(logits, axis=-1))"]]
SOFTMAX_LOSS = ("return -jnp.take_along_axis(logp, jnp.argmax(logits, -1)[:, None], axis=-1)"
                ".astype(jnp.float32).mean()")


def draft(rng: random.Random, family: str, defect: str, dtype: str) -> Draft:
  """Random blocks, a head, and the defect at a random block, written one of its ways."""
  nrng = np.random.default_rng(rng.getrandbits(32))
  kinds = [rng.choice(BLOCKS) for _ in range(rng.randint(2, 4))]
  at = rng.randrange(len(kinds))
  params, lines, marked, core, factor = {}, [], None, (), None
  for i, kind in enumerate(kinds):
    name = f"b{i}"
    if i == at and defect in SPECIAL:
      p, body, core, factor = special_block(defect, name, nrng, rng)
      params.update(p)
      lines += body
      marked = len(lines) - 1
      continue
    p, body = block(kind, name, nrng)
    params.update(p)
    lines += body
    if i == at and (defect in INSERTED or defect in NAN_LINES):
      local = rng.choice(["r", "x"])   # x: a local named as the loss's input
      inserted = [l.format(r=local) for l in rng.choice(INSERTED.get(defect) or NAN_LINES[defect])]
      culprit = next((k for k, l in enumerate(inserted) if l.startswith("!")), len(inserted) - 1)
      marked = len(lines) + culprit
      lines += [l.removeprefix("!") for l in inserted]
      if any("$ns." in l for l in inserted):
        params[("ns", "ws")] = nrng.normal(size=(2, D, D)) / D ** 0.5
      core = tuple(p) if defect in ("stopped", "integer") else ()
  if defect in ("unused", "discarded"):
    params[("aux", "w")] = nrng.normal(size=(D, 2))
    core = (("aux", "w"),)
  if defect == "log_softmax":
    params[("head", "w")] = nrng.normal(size=(D, CLASSES)) / D ** 0.5
    marked = len(lines) + 2
    lines += rng.choice(SOFTMAX_HEADS) + [SOFTMAX_LOSS]
  else:
    params[("head", "w")] = nrng.normal(size=(D, 1)) / D ** 0.5 * (defect != "zero_head")
    if defect == "zero_head":
      marked, factor = len(lines), ("head", "w")
      core = tuple(k for k in params if k != factor)
    lines += REGRESSION_HEAD
  return Draft(family, defect, dtype, params, lines, marked, core, factor,
               mlp=family == "equinox" and rng.random() < 0.5, jit=rng.random() < 0.3)


# ----------------------------------------------------------------------------- families

PARAM = re.compile(r"\$(\w+)\.(\w+)")
HEADER = """\
import jax
import jax.numpy as jnp
{imports}
DT = jnp.{dtype}
D = {D}
IDS = jnp.array({ids}, jnp.int32)
CAUSAL = jnp.tril(jnp.ones(({B}, {B}), bool))
MASK0 = jnp.zeros(D, DT)
FEAT = (jnp.arange(D) > 0).astype(DT)
Y = jnp.array({y}, jnp.float32)
"""


def _linear(dr: Draft, block_name: str) -> bool:
  """An equinox block held as ``eqx.nn.Linear``: exactly a square dense layer."""
  names = {n for b, n in dr.params if b == block_name}
  return names == {"w", "b"} and dr.params[(block_name, "w")].shape == (D, D)


def spell(dr: Draft, block_name: str, name: str) -> str:
  """How the source reads a parameter."""
  if dr.family == "pytree":
    return f'p["{block_name}"]["{name}"]'
  if dr.family == "linen":
    return f"{block_name}_{name}"
  if dr.family == "nnx":
    return f"self.{block_name}_{name}[...]"
  if _linear(dr, block_name):
    return f"m.{block_name}." + ("weight.T" if name == "w" else "bias")
  return f'm.{block_name}["{name}"]'


def leaf_path(dr: Draft, block_name: str, name: str) -> str:
  """The parameter's ``keystr`` in the differentiated argument."""
  if dr.family == "pytree":
    return f"['{block_name}']['{name}']"
  if dr.family == "linen":
    return f"['params']['{block_name}_{name}']"
  if dr.family == "nnx":
    return f"['{block_name}_{name}'].value"
  if _linear(dr, block_name):
    return f".{block_name}." + ("weight" if name == "w" else "bias")
  return f".{block_name}['{name}']"


def render(dr: Draft, nrng_seed: int) -> tuple[str, int | None]:
  """The module's text and the file line of the injected line."""
  nrng = np.random.default_rng(nrng_seed)
  imports = {"pytree": "", "equinox": "import equinox as eqx", "linen": "import flax.linen as nn",
             "nnx": "from flax import nnx"}
  head = HEADER.format(imports=imports[dr.family], dtype=dr.dtype, D=D, B=BATCH,
                       ids=nrng.integers(0, VOCAB - 4, BATCH).tolist(),
                       y=np.round(nrng.normal(size=BATCH), 3).tolist())
  body = [PARAM.sub(lambda m: spell(dr, m[1], m[2]), l) for l in ["h = x.astype(DT)", *dr.lines]]
  jit = ["@eqx.filter_jit" if dr.family == "equinox" else "@jax.jit"] if dr.jit else []
  if dr.family == "pytree":
    pre, indent = jit + ["def loss(p, x):"], "  "
  elif dr.family == "equinox":
    pre, indent = _equinox_class(dr) + jit + ["def loss(params, static, x):",
                                              "  m = eqx.combine(params, static)"], "  "
    if dr.mlp:
      body.insert(1, "h = jax.vmap(m.mlp)(h)")
  elif dr.family == "linen":
    pre = ["class Net(nn.Module):", "  @nn.compact", "  def __call__(self, x):"]
    pre += [f'    {b}_{n} = self.param("{b}_{n}", nn.initializers.zeros, {v.shape}, DT)'
            for (b, n), v in dr.params.items()]
    indent = "    "
  else:
    pre = ["class Net(nnx.Module):", "  def __init__(self):"]
    pre += [f"    self.{b}_{n} = nnx.Param(jnp.zeros({v.shape}, DT))"
            for (b, n), v in dr.params.items()]
    pre += ["  def __call__(self, x):"]
    indent = "    "
  text_lines = head.splitlines() + pre + [indent + l for l in body]
  if dr.family == "linen":
    text_lines += ["NET = Net()", *jit, "def loss(params, x):", "  return NET.apply(params, x)"]
  if dr.family == "nnx":
    text_lines += ["GRAPHDEF = nnx.split(Net())[0]", *jit, "def loss(state, x):",
                   "  return nnx.merge(GRAPHDEF, state)(x)"]
  first_body = len(head.splitlines()) + len(pre) + 1   # 1-based line of "h = x..."
  extra = 1 if dr.family == "equinox" and dr.mlp else 0
  line = None if dr.marked is None else first_body + 1 + extra + dr.marked
  return "\n".join(text_lines) + "\n", line


def _equinox_class(dr: Draft) -> list:
  """The model's class: a field per block (``eqx.nn.Linear`` or a dict of arrays), and the
  MLP whose ``activation`` is a function field."""
  blocks = list(dict.fromkeys(b for b, _ in dr.params))
  fields = [f"  {b}: {'eqx.nn.Linear' if _linear(dr, b) else 'dict'}" for b in blocks]
  return ["class Model(eqx.Module):", *fields] + (["  mlp: eqx.nn.MLP"] if dr.mlp else [])


def arguments(dr: Draft, module, x) -> tuple:
  """The loss's arguments, its differentiated one first, from the draft's values."""
  dt = jnp.dtype(module.DT)
  if dr.family == "pytree":
    tree = collections.defaultdict(dict)
    for (b, n), v in dr.params.items():
      tree[b][n] = jnp.asarray(v, dt)
    return dict(tree), x
  if dr.family == "linen":
    init = module.NET.init(jax.random.PRNGKey(0), x)
    ours = {f"{b}_{n}": jnp.asarray(v, dt) for (b, n), v in dr.params.items()}
    assert set(init["params"]) == set(ours), (set(init["params"]), set(ours))
    return {"params": ours}, x
  if dr.family == "nnx":
    from flax import nnx
    net = module.Net()
    for (b, n), v in dr.params.items():
      getattr(net, f"{b}_{n}").value = jnp.asarray(v, dt)
    return nnx.split(net)[1], x
  return _equinox_arguments(dr, module, x, dt)


def _equinox_arguments(dr: Draft, module, x, dt) -> tuple:
  """The model split as ``eqx.filter_grad`` would: its inexact arrays, and the rest (the
  MLP's ``gelu``)."""
  import equinox as eqx
  key = jax.random.PRNGKey(0)
  fields = {}
  for b in dict.fromkeys(b for b, _ in dr.params):
    if _linear(dr, b):
      lin = eqx.nn.Linear(D, D, key=key, dtype=dt)
      fields[b] = eqx.tree_at(lambda l: (l.weight, l.bias), lin,
                              (jnp.asarray(dr.params[(b, "w")].T, dt),
                               jnp.asarray(dr.params[(b, "b")], dt)))
    else:
      fields[b] = {n: jnp.asarray(v, dt) for (bb, n), v in dr.params.items() if bb == b}
  if dr.mlp:
    fields["mlp"] = eqx.nn.MLP(D, D, D, 1, activation=jax.nn.gelu, key=key, dtype=dt)
  params, static = eqx.partition(module.Model(**fields), eqx.is_inexact_array)
  return params, static, x


# ----------------------------------------------------------------------------- programs

@dataclasses.dataclass
class Program:
  """A built program and its truth: the leaves plain jax.grad gives exactly zero, and
  whether its gradient is finite."""
  seed: int
  index: int
  draft: Draft
  text: str
  line: int | None                   # the injected line, 1-based, in ``path``
  path: str
  module: object
  args: tuple
  loss0: float
  zero: frozenset
  finite: bool

  @property
  def name(self) -> str:
    return f"{self.draft.family}/{self.draft.defect}"

  @property
  def reason(self) -> str | None:
    return ZERO_DEFECTS.get(self.draft.defect)

  @property
  def factor_path(self) -> str | None:
    return self.draft.factor and leaf_path(self.draft, *self.draft.factor)


def load(text: str, directory: str, stem: str):
  """``text`` written to ``directory/stem.py`` and imported as a fresh module."""
  return module_files.load(text, directory, stem, "zoo")


def _input(seed: int):
  return jax.random.normal(jax.random.PRNGKey(seed), (BATCH, D))


def build(seed: int, index: int, family: str, defect: str, directory: str) -> Program | str:
  """The program (seed, index), drawn until plain jax.grad agrees with its construction;
  else why not, as a string."""
  rng = random.Random(f"{seed}/{index}")
  dtype = rng.choices(DTYPES, DTYPE_WEIGHTS)[0]
  problem = ""
  for attempt in range(ATTEMPTS):
    dr = draft(rng, family, defect, dtype)
    text_seed = rng.getrandbits(32)
    text, line = render(dr, text_seed)
    stem = f"s{seed}_i{index}_a{attempt}"
    module = load(text, directory, stem)
    args = arguments(dr, module, _input(text_seed))
    program = Program(seed, index, dr, text, line, os.path.join(directory, f"{stem}.py"),
                      module, args, float("nan"), frozenset(), True)
    problem = ground_truth(program)
    if not problem:
      return program
  return f"unbuildable after {ATTEMPTS} draws: {problem}"


def ground_truth(p: Program) -> str:
  """Fills ``p.loss0``, ``p.zero`` and ``p.finite`` from plain jax.grad; says what
  disagrees with the construction ("" when nothing)."""
  p.loss0 = float(p.module.loss(*p.args))
  grad = jax.grad(p.module.loss)(*p.args)
  leaves = {jax.tree_util.keystr(k): np.asarray(g, np.float32)
            for k, g in jax.tree_util.tree_flatten_with_path(grad)[0]}
  p.zero = frozenset(k for k, g in leaves.items() if not np.any(g))
  p.finite = all(np.isfinite(g).all() for g in leaves.values())
  core = {leaf_path(p.draft, *c) for c in p.draft.core}
  assert core <= set(leaves), (core, set(leaves))
  if not np.isfinite(p.loss0):
    return f"the forward loss is {p.loss0}"
  if p.draft.defect in NAN_DEFECTS:
    return "" if not p.finite else "the NaN defect left the gradient finite"
  if not p.finite:
    return "the gradient is not finite"
  if p.draft.defect == "control":
    return f"control with zero leaves {sorted(p.zero)}" if p.zero else ""
  return "" if core <= p.zero else f"leaves {sorted(core - p.zero)} still get a gradient"


# ----------------------------------------------------------------------------- the judge

@dataclasses.dataclass
class Verdict:
  verdict: str
  hint: str = ""
  fixed: bool = False                # a verified fix passed the independent check


def _line_of(source: str | None, path: str) -> int | None:
  """The line of ``file:line`` when the file is ``path``; -1 for another file, None for
  no source."""
  if not source:
    return None
  file, _, line = source.rpartition(":")
  return int(line) if file and os.path.realpath(file) == os.path.realpath(path) else -1


def judge_grads(p: Program, show_traceback: bool = False) -> Verdict:
  """vv.grads against the truth: the zero leaves, their reason, line and factor."""
  report = vjpviz("grads", p, show_traceback)
  got = {z.path: z for z in report.zero}
  if p.draft.defect == "control":
    alarms = ([f"zero {z.path} ({z.reason})" for z in report.zero]
              + [f"partly {q.path} ({q.reason})" for q in report.partly_zero if q.alarm]
              + [f"layer {l.name} {l.flag} ({l.why})" for l in report.layers if l.flag])
    return Verdict("false alarm", "; ".join(alarms)) if alarms else Verdict("exact")
  if twice := [f"{l.name} {l.flag} ({l.why})" for l in report.layers if l.flag and not l.grad_norm]:
    return Verdict("false alarm", f"blocks with no gradient also flagged: {twice}")   # their
    # zero leaves say why, each with its reason
  if missing := sorted(p.zero - set(got)):
    return Verdict("missed", f"expected zero {missing} ({p.reason}), got "
                             f"{[(z.path, z.reason) for z in report.zero]}")
  if extra := sorted(set(got) - p.zero):
    return Verdict("false alarm", f"claimed zero {extra}; jax.grad gives them a gradient")
  for path in sorted(p.zero):
    z, line = got[path], _line_of(got[path].source, p.path)
    if z.reason != p.reason:
      return Verdict("wrong reason", f"{path}: expected {p.reason} at line {p.line}, got "
                                     f"{z.reason} at {z.source}")
    if z.source is not None and line != p.line:
      return Verdict("wrong reason", f"{path}: {z.reason} at {z.source}, expected line {p.line}")
    if p.factor_path and z.factor != p.factor_path:
      return Verdict("wrong reason", f"{path}: factor {z.factor}, expected {p.factor_path}")
  return Verdict("exact")


def judge_nans(p: Program, show_traceback: bool = False) -> Verdict:
  """vv.nans against the truth: the culprit's line, and its first verified fix checked
  independently."""
  d = vjpviz("nans", p, show_traceback)
  if p.draft.defect == "control":
    return Verdict("false alarm", f"nans: {d.headline}") if d is not None else Verdict("exact")
  if d is None:
    return Verdict("missed", "vv.nans returned None; jax.grad is not finite")
  fix = next((f for f in d.fixes if f.verdict == "verified"), None)
  if fix is not None:
    problem = check_fix(p, d.source, fix.code)
    if problem:
      return Verdict("verified-but-wrong", f"fix {fix.title!r} at {d.source}: {problem}; "
                                           f"code {fix.code!r}")
  line = _line_of(d.source, p.path)
  if line != p.line:
    return Verdict("wrong reason", f"culprit {d.function} at {d.source}, expected line {p.line}",
                   fixed=fix is not None)
  if fix is None:
    return Verdict("exact", f"no verified fix ({[(f.title, f.verdict) for f in d.fixes]})")
  return Verdict("exact", fixed=True)


class Crashed(Exception):
  """vjpviz raised (the message names what); the zoo's own errors propagate."""


def vjpviz(call: str, p: Program, show_traceback: bool = False):
  """``vv.grads``/``vv.nans`` of the program as jax.grad takes it; what it raises, the
  internal error its safety net prints, or its answer that it could not check, as
  ``Crashed``."""
  printed = io.StringIO()
  safety.forget_failures()    # else its safety net prints each kind of failure only once
  try:
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
      answer = getattr(vv, call)(p.module.loss, *p.args)
  except Exception as e:  # noqa: BLE001  every exception out of vjpviz is the finding
    if show_traceback:
      traceback.print_exc()
    first = str(e).splitlines()[0][:200] if str(e) else ""
    raise Crashed(f"vv.{call} raised {type(e).__name__}: {first}") from e
  if "internal error" in printed.getvalue():
    raise Crashed(f"vv.{call} printed {printed.getvalue().strip()[:240]}")
  if vv.unchecked(answer) is not None:   # it said it could not check: no answer to judge
    raise Crashed(str(vv.unchecked(answer))[:240])
  return answer


def judge(p: Program, show_traceback: bool = False) -> Verdict:
  """The program's one verdict: ``vv.nans`` for a NaN defect, ``vv.grads`` for a zero one,
  both for a control."""
  try:
    if p.draft.defect in NAN_DEFECTS:
      return judge_nans(p, show_traceback)
    first = judge_grads(p, show_traceback)
    if p.draft.defect != "control" or first.verdict != "exact":
      return first
    return judge_nans(p, show_traceback)
  except Crashed as e:
    return Verdict("crash", str(e))


# ----------------------------------------------------------------------------- fixes

def paste(text: str, line: int, code: str) -> str:
  """``code`` in place of ``text``'s line ``line`` at its indentation; a ``def`` at the
  top of ``code`` (a helper, ``safe_norm``) goes before the function, at module level."""
  lines = text.splitlines()
  indent = re.match(r"\s*", lines[line - 1])[0]
  helpers, rest, in_def = [], [], False
  for l in code.splitlines():   # a helper (and its comment) ends at its first blank line
    in_def = l.startswith(("def ", "#")) or (in_def and bool(l.strip()))
    (helpers if in_def else rest).append(l)
  rest = textwrap.dedent("\n".join(rest)).splitlines()
  if not any(l.strip() for l in rest):
    raise ValueError("the fix has no statement to paste")
  lines[line - 1:line] = [indent + l for l in rest]
  first_def = next(k for k, l in enumerate(lines) if l.startswith(("def ", "class ", "@")))
  lines[first_def:first_def] = helpers
  return "\n".join(lines) + "\n"


def _twin(text: str) -> str:
  """The program in float64, its loss too."""
  return re.sub(r"^DT = jnp\.\w+$", "DT = jnp.float64", text, count=1,
                flags=re.M).replace("jnp.float32", "jnp.float64")


def _same_loss(a: float, b: float, dtype: str) -> bool:
  """Equal up to the program's rounding: relative, and absolute at 10 ulps of 1 (a loss
  near 0 made of O(1) terms: ``log(softmax)`` against ``log_softmax`` near p = 1)."""
  rtol = 1e-5 if dtype == "float32" else 2e-2
  return bool(np.isclose(a, b, rtol=rtol, atol=10 * float(jnp.finfo(dtype).eps)))


def check_fix(p: Program, source: str | None, code: str) -> str:
  """Why the fix is wrong ("" when it is right), judged without vjpviz: pasted at the
  culprit's line, the loss is unchanged, the gradient finite, and in float64 equal to
  central differences of the original loss along random directions where that loss is
  smooth."""
  line = _line_of(source, p.path)
  if line is None or line < 1:
    return f"the fix names {source}, not a line of the program"
  directory = os.path.dirname(p.path)
  stem = f"s{p.seed}_i{p.index}_fixed"
  try:
    fixed_text = paste(p.text, line, code)
    fixed = load(fixed_text, directory, stem)
    loss1 = float(fixed.loss(*p.args))
    grad1 = jax.grad(fixed.loss)(*p.args)
  except Exception as e:  # noqa: BLE001  a paste that does not run is a wrong fix
    return f"pasted, it raises {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
  if not _same_loss(loss1, p.loss0, p.draft.dtype):
    return f"the loss changes: {p.loss0!r} -> {loss1!r}"
  if not all(np.isfinite(np.asarray(g, np.float32)).all() for g in jax.tree_util.tree_leaves(grad1)):
    return "its gradient is still not finite"
  return _matches_differences(p, fixed_text, directory, stem)


def _matches_differences(p: Program, fixed_text: str, directory: str, stem: str) -> str:
  """Float64: the fixed program's directional derivative against the original loss's
  central differences (step 1e-4, checked against step 5e-5: a direction where the two
  disagree, or the loss is not finite, crosses a kink and is skipped)."""
  rng = np.random.default_rng(p.index)
  with jax.enable_x64(True):
    original = load(_twin(p.text), directory, stem + "64_original")
    fixed = load(_twin(fixed_text), directory, stem + "64")
    args = jax.tree_util.tree_map(
        lambda a: a.astype(jnp.float64) if isinstance(a, jax.Array)
        and jnp.issubdtype(a.dtype, jnp.floating) else a, p.args)
    theta, rest = args[0], args[1:]
    grad = jax.grad(fixed.loss)(theta, *rest)
    loss = lambda t: float(original.loss(t, *rest))
    checked = 0
    for _ in range(12):
      v = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.normal(size=a.shape)), theta)
      along = lambda eps: jax.tree_util.tree_map(lambda a, b: a + eps * b, theta, v)
      fd = [(loss(along(e)) - loss(along(-e))) / (2 * e) for e in (1e-4, 5e-5)]
      if not np.isfinite(fd).all() or not np.isclose(*fd, rtol=1e-3, atol=1e-8):
        continue
      dd = sum(float(jnp.vdot(g, b)) for g, b in zip(jax.tree_util.tree_leaves(grad),
                                                      jax.tree_util.tree_leaves(v)))
      if not np.isclose(dd, fd[0], rtol=1e-2, atol=1e-6 * (1 + abs(fd[0]))):
        return f"float64 directional derivative {dd:.6g}, central differences {fd[0]:.6g}"
      checked += 1
      if checked == 3:
        break
  return ""


# ----------------------------------------------------------------------------- the run

def plan(n: int, seed: int, families, defects) -> list:
  """(index, family, defect) for each program: the defects in turn, families at random."""
  rng = random.Random(seed)
  return [(i, rng.choice(families), defects[i % len(defects)]) for i in range(n)]


def run(n: int, seed: int, families=FAMILIES, defects=DEFECTS, out=print, only=None,
        keep: str | None = None, show_traceback: bool = False, every: int = 0) -> dict:
  """Builds and judges ``n`` programs (``only``: those indices); prints a repro hint per
  non-exact one, and the table so far every ``every`` programs (a long run's partial
  answer). ``keep``: the programs' files are written there and kept. Returns
  {(family, defect): Counter of verdicts, "programs", "fixed", "unbuildable"}."""
  table = collections.defaultdict(collections.Counter)
  with tempfile.TemporaryDirectory(prefix="model_zoo_") as scratch:
    directory = keep or scratch
    os.makedirs(directory, exist_ok=True)
    for index, family, defect in plan(n, seed, families, defects):
      if only is not None and index not in only:
        continue
      program = build(seed, index, family, defect, directory)
      row = table[(family, defect)]
      if isinstance(program, str):
        row["unbuildable"] += 1
        out(f"  seed {seed} index {index} {family}/{defect}: {program}")
        continue
      verdict = judge(program, show_traceback)
      row["programs"] += 1
      row[verdict.verdict] += 1
      row["fixed"] += verdict.fixed
      if verdict.verdict != "exact":
        out(f"  seed {seed} index {index} {program.name} [{program.draft.dtype}] "
            f"{os.path.basename(program.path)}: {verdict.verdict}: {verdict.hint}")
      if every and (index + 1) % every == 0:
        print_table(table, out)
  return table


def print_table(table: dict, out=print) -> None:
  """Rows family/defect, a column per verdict, and the totals."""
  columns = ("programs", *VERDICTS, "fixed", "unbuildable")
  width = [len(c) + 2 for c in columns]
  out(f"{'family/defect':<24}" + "".join(f"{c:>{w}}" for c, w in zip(columns, width)))
  total = collections.Counter()
  for key in sorted(table):
    total.update(table[key])
    out(f"{'/'.join(key):<24}" + "".join(f"{table[key][c]:>{w}}" for c, w in zip(columns, width)))
  out(f"{'total':<24}" + "".join(f"{total[c]:>{w}}" for c, w in zip(columns, width)))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=500)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES)
  parser.add_argument("--defects", nargs="*", default=list(DEFECTS), choices=DEFECTS)
  parser.add_argument("--index", type=int, nargs="*", help="run only these programs (repro)")
  parser.add_argument("--keep", help="write the programs' files here and keep them")
  parser.add_argument("--traceback", action="store_true", help="print each crash's traceback")
  parser.add_argument("--every", type=int, default=100, help="print the table every N programs")
  args = parser.parse_args(argv)
  start = time.perf_counter()
  table = run(args.n, args.seed, tuple(args.families), tuple(args.defects),
              out=lambda s: print(s, flush=True), only=args.index and set(args.index),
              keep=args.keep, show_traceback=args.traceback, every=args.every)
  print_table(table)
  print(f"{sum(r['programs'] for r in table.values())} programs, seed {args.seed}, "
        f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
  main()
