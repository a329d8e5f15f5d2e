"""Generated NaN programs that judge ``vv.nans``'s fixes: each family is a way a value goes
non-finite (an ``exp`` that overflows under a hand-written softplus or logsumexp, a ``log``
at 0 hidden by a clamp, a norm or a sum at a zero row, ``arccos`` at 1, ``atan2`` at the
origin, a fractional power at 0) written one of several ways (inline, through variables, in
a helper function, in a method, under ``jit``, ``vmap`` or ``scan``), in a plain pytree,
equinox, flax linen or flax nnx model, in float32, bfloat16 or float16.

Every program is Python source written to a module file of its own and imported, so each
operation has a real ``file:line``. Its truth is constructed: the line that made the
non-finite value (``made``), and whether its loss has a stable rewrite at all (a non-finite
input has none). A draw whose plain ``jax.grad`` is finite is drawn again.

Per program: ``line right`` (the diagnosis names the made line), ``fix offered`` (any fix),
``verified`` (vjpviz calls its first fix verified), ``right as pasted`` (that fix, pasted
at the diagnosis's line by this file, keeps the loss (the original's in its dtype where
finite, else the float64 original's), has a finite gradient, and in float64 its directional
derivatives equal central differences of the original along random directions), and
``verified-but-wrong`` (verified, and this file's check fails or judges no direction).

    PYTHONPATH=$PWD python benchmarks/nan_fixes.py --n 320 --seed 0 [--families ..]
        [--index I ..] [--keep DIR]
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

import jax
import jax.numpy as jnp
import numpy as np

import jupyter_vjpviz as vv
from jupyter_vjpviz.base import safety
from model_zoo import load

B, K = 6, 4
FRAMEWORKS = ("pytree", "equinox", "linen", "nnx")
SPELLINGS = ("inline", "variable", "helper", "method", "jit", "vmap", "scan")
DTYPES, DTYPE_WEIGHTS = ("float32", "bfloat16", "float16"), (6, 2, 2)
ATTEMPTS = 4
COLUMNS = ("programs", "line right", "fix offered", "verified", "right as pasted",
           "verified-but-wrong", "crash", "unbuildable")


# ------------------------------------------------------------------------- the families
# Each kernel maps ``z`` (the model's output, one row or a batch of rows) and ``x`` (its
# input) to ``v``, per row. ``#@made`` marks the line that makes the non-finite value (or,
# where the forward stays finite, whose derivative is infinite); ``{a|b}`` picks one
# spelling at random. ``variable`` is the same kernel through more variables.

@dataclasses.dataclass(frozen=True)
class Family:
  inline: tuple
  variable: tuple
  batch: str            # how the input rows are drawn (``_batch``)
  rowwise: bool = True  # may run per row (vmap, scan)
  stable: bool = True   # the loss has a stable rewrite


FAMILIES = {
  "softplus": Family(
      ("v = jnp.sum({jnp.log(1 + jnp.exp(z))|jnp.log1p(jnp.exp(z))|jnp.log(1.0 + jnp.exp(-(-z)))"
       "|jnp.where(z > 30, z, jnp.log1p(jnp.exp(z)))}, axis=-1)  #@made",),
      ("t = jnp.exp(z)  #@made", "v = jnp.sum({jnp.log(1 + t)|jnp.log1p(t)}, axis=-1)"),
      "large"),
  "logsumexp": Family(
      ("v = {jnp.log(jnp.sum(jnp.exp(z), axis=-1))|jnp.log(jnp.exp(z).sum(axis=-1))"
       "|jnp.log(jnp.sum(jnp.exp(z), axis=-1)) - z[..., 0]}  #@made",),
      ("e = jnp.exp(z)  #@made", "s = jnp.sum(e, axis=-1)", "v = jnp.log(s)"),
      "large"),
  "logaddexp": Family(
      ("v = jnp.log(jnp.exp(z[..., 0]) + jnp.exp(z[..., 1]))  #@made",),
      ("a = jnp.exp(z[..., 0])", "b = jnp.exp(z[..., 1])  #@made", "v = jnp.log(a + b)"),
      "large1"),
  "bce_clamp": Family(
      ("v = -jnp.sum(jnp.maximum(jnp.log(jax.nn.sigmoid(z)), -100.0), axis=-1)  #@made",),
      ("p = jax.nn.sigmoid(z)",
       "v = -jnp.sum(jnp.maximum(jnp.log(p), -100.0), axis=-1)  #@made"),
      "saturated"),
  "xlogy": Family(
      ("v = -jnp.sum(jnp.where(z * z > 0, z * z * jnp.log(z * z), 0.0), axis=-1)  #@made",),
      ("q = z * z", "v = -jnp.sum(jnp.where(q > 0, q * jnp.log(q), 0.0), axis=-1)  #@made"),
      "padded"),
  "distance": Family(
      ("v = jnp.mean({jnp.sqrt(jnp.sum((z[:, None, :] - z[None, :, :]) ** 2, axis=-1))"
       "|jnp.linalg.norm(z[:, None, :] - z[None, :, :], axis=-1)}, axis=-1)  #@made",),
      ("diff = z[:, None, :] - z[None, :, :]", "d2 = jnp.sum(diff ** 2, axis=-1)",
       "v = jnp.mean(jnp.sqrt(d2), axis=-1)  #@made"),
      "normal", rowwise=False),
  "norm_div": Family(
      ("u = z / jnp.linalg.norm(z, axis=-1, keepdims=True)  #@made",
       "v = jnp.where(jnp.any(x != 0, axis=-1), jnp.sum(u ** 3, axis=-1), 0.0)"),
      ("n = jnp.linalg.norm(z, axis=-1, keepdims=True)", "u = z / n  #@made",
       "s = jnp.sum(u ** 3, axis=-1)", "m = jnp.any(x != 0, axis=-1)", "v = jnp.where(m, s, 0.0)"),
      "padded"),
  "sum_div": Family(
      ("u = jax.nn.relu(z) / jnp.sum(jax.nn.relu(z), axis=-1, keepdims=True)  #@made",
       "v = jnp.where(jnp.any(x != 0, axis=-1), jnp.sum(u * z, axis=-1), 0.0)"),
      ("q = jax.nn.relu(z)", "s = jnp.sum(q, axis=-1, keepdims=True)", "u = q / s  #@made",
       "v = jnp.where(jnp.any(x != 0, axis=-1), jnp.sum(u * z, axis=-1), 0.0)"),
      "padded"),
  "arccos": Family(
      ("en = z / jnp.linalg.norm(z, axis=-1, keepdims=True)",
       "a = jnp.where(jnp.eye(z.shape[0], dtype=bool), 0.0, "
       "jnp.arccos(jnp.clip(en @ en.T, -1.0, 1.0)))  #@made",
       "v = jnp.mean(a, axis=-1)"),
      ("en = z / jnp.linalg.norm(z, axis=-1, keepdims=True)", "cos = jnp.clip(en @ en.T, -1.0, 1.0)",
       "same = jnp.eye(z.shape[0], dtype=bool)",
       "a = jnp.where(same, 0.0, jnp.arccos(cos))  #@made", "v = jnp.mean(a, axis=-1)"),
      "normal", rowwise=False),
  "atan2": Family(
      ("v = jnp.where(z[..., 0] ** 2 + z[..., 1] ** 2 > 0, jnp.arctan2(z[..., 1], z[..., 0]), "
       "0.0)  #@made",),
      ("r = z[..., 0] ** 2 + z[..., 1] ** 2", "ang = jnp.arctan2(z[..., 1], z[..., 0])  #@made",
       "v = jnp.where(r > 0, ang, 0.0)"),
      "padded"),
  "pow": Family(
      ("v = jnp.sum(jnp.where(z * z > 0, {(z * z) ** 0.3|jnp.power(z * z, 0.3)}, 0.0), "
       "axis=-1)  #@made",),
      ("q = z * z", "p = {q ** 0.3|jnp.power(q, 0.3)}  #@made",
       "v = jnp.sum(jnp.where(q > 0, p, 0.0), axis=-1)"),
      "padded"),
  "nan_input": Family(
      ("v = jnp.sum(jnp.sqrt(z ** 2 + 1.0), axis=-1)",),
      ("s = z ** 2 + 1.0", "v = jnp.sum(jnp.sqrt(s), axis=-1)"),
      "nan", stable=False),
}


def _batch(kind: str, rng: np.random.Generator, dtype: str) -> np.ndarray:
  """The input rows: ``large`` has entries past exp's overflow in ``dtype`` (``large1``:
  in column 1 only), ``saturated`` logits where the sigmoid is 0, ``padded`` zero rows,
  ``nan`` one NaN."""
  x = rng.normal(size=(B, K)) * 2
  big = 95.0 if dtype != "float16" else 12.0
  if kind in ("large", "large1"):
    col = 1 if kind == "large1" else rng.integers(K)
    x[rng.choice(B, 2, replace=False), col] = rng.uniform(big, big + 30, 2)
  elif kind == "saturated":
    x[rng.choice(B, 2, replace=False), rng.integers(K)] = -rng.uniform(92, 99, 2)
  elif kind == "padded":
    x[rng.choice(B, 2, replace=False)] = 0.0
  elif kind == "nan":
    x[2, 1] = np.nan
  return x


# ---------------------------------------------------------------------------- rendering

@dataclasses.dataclass
class Program:
  seed: int
  index: int
  family: str
  framework: str
  spelling: str
  dtype: str
  text: str
  made: int | None         # 1-based line that makes the non-finite value
  path: str
  module: object
  args: tuple
  loss0: float = float("nan")
  loss64: float = float("nan")

  @property
  def name(self) -> str:
    return f"{self.family}/{self.framework}/{self.spelling}"


def _pick(line: str, rng: random.Random) -> str:
  return re.sub(r"\{([^{}]*\|[^{}]*)\}", lambda m: rng.choice(m[1].split("|")), line)


def render(family: str, framework: str, spelling: str, rng: random.Random) -> tuple[str, int]:
  """The module's text, and the 1-based line marked ``#@made``."""
  fam = FAMILIES[family]
  kernel = [_pick(l, rng) for l in (fam.variable if spelling == "variable" else fam.inline)]
  head = ["import jax", "import jax.numpy as jnp"]
  head += {"pytree": [], "equinox": ["import equinox as eqx"], "linen": ["import flax.linen as nn"],
           "nnx": ["from flax import nnx"]}[framework]
  helpers, body = [], []
  if spelling in ("helper", "vmap", "scan"):
    helpers = ["", "", "def kernel(z, x):", *["  " + l for l in kernel], "  return v"]
    body = {"helper": ["v = kernel(z, x)"], "vmap": ["v = jax.vmap(kernel)(z, x)"],
            "scan": ["_, v = jax.lax.scan(lambda c, zx: (c, kernel(*zx)), None, (z, x))"]}[spelling]
  elif spelling == "method" and framework == "pytree":
    helpers = ["", "", "class Head:", "  def __call__(self, z, x):", *["    " + l for l in kernel],
               "    return v", "", "", "HEAD = Head()"]
    body = ["v = HEAD(z, x)"]
  else:
    body = kernel
  jit = ["@jax.jit"] if spelling == "jit" else []
  if framework == "pytree":
    model = [*jit, "def loss(p, x):", "  z = x @ p['w']", *["  " + l for l in body],
             "  return jnp.mean(v)"]
  else:
    inner = ["    " + l for l in body] + ["    return jnp.mean(v)"]
    if framework == "equinox":
      model = ["class Net(eqx.Module):", "  w: jax.Array", "", "  def __call__(self, x):",
               "    z = x @ self.w", *inner, "", "", *jit, "def loss(model, x):",
               "  return model(x)"]
    elif framework == "linen":
      model = ["class Net(nn.Module):", "  @nn.compact", "  def __call__(self, x):",
               "    z = x @ self.param('w', nn.initializers.zeros, (x.shape[-1], 4), x.dtype)",
               *inner, "", "", "NET = Net()", "", "", *jit, "def loss(params, x):",
               "  return NET.apply(params, x)"]
    else:
      model = ["class Net(nnx.Module):", "  def __init__(self):",
               "    self.w = nnx.Param(jnp.zeros((4, 4)))", "", "  def __call__(self, x):",
               "    z = x @ self.w[...]", *inner, "", "", "GRAPHDEF = nnx.split(Net())[0]", "", "",
               *jit, "def loss(state, x):", "  return nnx.merge(GRAPHDEF, state)(x)"]
  lines = head + helpers + ["", ""] + model
  made = next((i + 1 for i, l in enumerate(lines) if "#@made" in l), None)
  return "\n".join(l.replace("  #@made", "") for l in lines) + "\n", made


def arguments(framework: str, module, w: np.ndarray, x: np.ndarray, dtype: str) -> tuple:
  w, x = jnp.asarray(w, dtype), jnp.asarray(x, dtype)
  if framework == "pytree":
    return {"w": w}, x
  if framework == "equinox":
    return module.Net(w), x
  if framework == "linen":
    return {"params": {"w": w}}, x
  from flax import nnx
  net = module.Net()
  net.w[...] = w
  return nnx.split(net)[1], x


def as64(tree):
  return jax.tree_util.tree_map(
      lambda a: jnp.asarray(a, jnp.float64) if isinstance(a, jax.Array)
      and jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def build(seed: int, index: int, family: str, framework: str, spelling: str,
          directory: str) -> Program | str:
  """The program, drawn until plain jax.grad is not finite (and, where the loss has a
  stable rewrite, the float64 loss and gradient are); else why not."""
  rng = random.Random(f"{seed}/{index}")
  dtype = rng.choices(DTYPES, DTYPE_WEIGHTS)[0]
  problem = ""
  for attempt in range(ATTEMPTS):
    text, made = render(family, framework, spelling, rng)
    nrng = np.random.default_rng(rng.getrandbits(32))
    w = np.eye(K) + 0.05 * nrng.normal(size=(K, K))
    x = _batch(FAMILIES[family].batch, nrng, dtype)
    stem = f"s{seed}_i{index}_a{attempt}"
    module = load(text, directory, stem)
    args = arguments(framework, module, w, x, dtype)
    p = Program(seed, index, family, framework, spelling, dtype, text, made,
                os.path.join(directory, f"{stem}.py"), module, args)
    problem = _truth(p)
    if not problem:
      return p
  return f"unbuildable after {ATTEMPTS} draws: {problem}"


def _finite(tree) -> bool:
  return all(np.isfinite(np.asarray(g, np.float64)).all() for g in jax.tree_util.tree_leaves(tree))


def _truth(p: Program) -> str:
  """Fills the losses; what disagrees with the construction ("" when nothing): the
  gradient must not be finite, and where the loss has a stable rewrite, its float64 value
  must be (the reference; its float64 gradient may be NaN too: the trap is in the code)."""
  p.loss0 = float(p.module.loss(*p.args))
  if _finite(jax.grad(p.module.loss)(*p.args)):
    return "plain jax.grad is finite"
  if not FAMILIES[p.family].stable:
    return ""
  with jax.enable_x64(True):
    args = as64(p.args)
    p.loss64 = float(p.module.loss(*args))
    if not np.isfinite(p.loss64):
      return "the float64 loss is not finite"
  return ""


# ---------------------------------------------------------------------------- the judge

def _line_of(source: str | None, path: str) -> int | None:
  if not source:
    return None
  file, _, line = source.rpartition(":")
  return int(line) if os.path.realpath(file) == os.path.realpath(path) else -1


def paste(text: str, line: int, code: str) -> str:
  """``code``'s statement in place of line ``line`` at its indent; the defs before it
  (helpers, ended by a blank line) at the top level before the first definition."""
  lines = text.splitlines()
  indent = re.match(r"\s*", lines[line - 1])[0]
  helpers, _, statement = code.rpartition("\n\n")
  if not helpers.lstrip().startswith(("def ", "#")):
    helpers, statement = "", code
  lines[line - 1:line] = [indent + l for l in textwrap.dedent(statement).strip("\n").splitlines()]
  first = next(k for k, l in enumerate(lines) if l.startswith(("def ", "class ", "@")))
  lines[first:first] = helpers.splitlines() + ["", ""] if helpers else []
  return "\n".join(lines) + "\n"


RTOL = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 3e-2}


def check_fix(p: Program, source: str | None, code: str) -> str:
  """Why the fix is wrong ("" when it is right), judged without vjpviz."""
  line = _line_of(source, p.path)
  if line is None or line < 1:
    return f"the fix names {source}, not a line of the program"
  stem = f"s{p.seed}_i{p.index}_fixed"
  try:
    fixed = load(paste(p.text, line, code), os.path.dirname(p.path), stem)
    args = arguments(p.framework, fixed, *_raw(p), p.dtype)
    loss1 = float(fixed.loss(*args))
    grad1 = jax.grad(fixed.loss)(*args)
  except Exception as e:  # noqa: BLE001  a paste that does not run is a wrong fix
    return f"pasted, it raises {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
  rtol = RTOL[p.dtype]
  same = lambda a, b: np.isclose(a, b, rtol=rtol, atol=rtol)
  if not ((np.isfinite(p.loss0) and same(loss1, p.loss0)) or same(loss1, p.loss64)):
    return f"the loss changes: {p.loss0!r} (float64 {p.loss64!r}) -> {loss1!r}"
  if not _finite(grad1):
    return "its gradient is still not finite"
  return _matches_differences(p, fixed)


def _raw(p: Program) -> tuple:
  """The draft's own (w, x), read back from the program's arguments."""
  leaf = jax.tree_util.tree_leaves(p.args[0])[0]
  return np.asarray(leaf, np.float64), np.asarray(p.args[1], np.float64)


def _matches_differences(p: Program, fixed) -> str:
  """Float64: the fixed program's directional derivatives against central differences of
  the original (steps 1e-5 and 5e-6: where they disagree the direction crosses a kink and
  is skipped); "" when at least one direction was judged and all agree."""
  rng = np.random.default_rng(p.index)
  with jax.enable_x64(True):
    w, x = _raw(p)
    args = arguments(p.framework, p.module, w, x, "float64")
    fargs = arguments(p.framework, fixed, w, x, "float64")
    grad = jax.grad(fixed.loss)(*fargs)
    flat_g = [np.asarray(g, np.float64) for g in jax.tree_util.tree_leaves(grad)]
    flat, tree = jax.tree_util.tree_flatten(args[0])
    loss = lambda d, e: float(p.module.loss(jax.tree_util.tree_unflatten(
        tree, [a + e * v for a, v in zip(flat, d)]), args[1]))
    checked = 0
    for _ in range(8):
      d = [rng.normal(size=np.shape(a)) for a in flat]
      fd = [(loss(d, e) - loss(d, -e)) / (2 * e) for e in (1e-5, 5e-6)]
      if not np.isfinite(fd).all() or not np.isclose(*fd, rtol=1e-4, atol=1e-7):
        continue
      dd = sum(float(np.vdot(g, v)) for g, v in zip(flat_g, d))
      if not np.isclose(dd, fd[0], rtol=1e-3, atol=1e-6 * (1 + abs(fd[0]))):
        return f"float64 directional derivative {dd:.6g}, central differences {fd[0]:.6g}"
      checked += 1
      if checked == 3:
        return ""
  return "" if checked else "no direction along which the original is smooth: not judged"


def judge(p: Program) -> tuple[collections.Counter, str]:
  """The program's row in the table, and a hint when it falls short."""
  row = collections.Counter(programs=1)
  printed = io.StringIO()
  safety.forget_failures()
  try:
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
      d = vv.nans(p.module.loss, *p.args)
  except Exception as e:  # noqa: BLE001  every exception out of vjpviz is the finding
    row["crash"] += 1
    return row, f"vv.nans raised {type(e).__name__}: {str(e)[:200]}"
  if "internal error" in printed.getvalue():
    row["crash"] += 1
    return row, f"vv.nans printed {printed.getvalue().strip()[:240]}"
  if d is None:
    return row, "vv.nans returned None; jax.grad is not finite"
  named = getattr(d, "call_site", None) or d.source
  hints = []
  if FAMILIES[p.family].stable:
    row["line right"] += _line_of(named, p.path) == p.made
  else:
    row["line right"] += "x" in (d.detail or "") and "[2, 1]" in (d.detail or "")
  if _line_of(named, p.path) != p.made and FAMILIES[p.family].stable:
    hints.append(f"named {named}, made at line {p.made}")
  row["fix offered"] += bool(d.fixes)
  fix = d.fixes[0] if d.fixes and d.fixes[0].verdict == "verified" else None
  if fix is None:
    hints.append(f"no verified fix: {[(f.title, f.verdict, f.note[:120]) for f in d.fixes]}")
    return row, "; ".join(hints)
  row["verified"] += 1
  problem = check_fix(p, d.source, fix.code)
  if problem:
    row["verified-but-wrong"] += 1
    hints.append(f"verified but wrong: {fix.title!r} at {d.source}: {problem}; code {fix.code!r}")
  else:
    row["right as pasted"] += 1
  return row, "; ".join(hints)


# ---------------------------------------------------------------------------- the run

def plan(n: int, seed: int, families=tuple(FAMILIES)) -> list:
  """(index, family, framework, spelling): families in turn, the rest drawn (vmap and scan
  only for the kernels that run per row)."""
  rng = random.Random(seed)
  out = []
  for i in range(n):
    family = families[i % len(families)]
    spellings = [s for s in SPELLINGS if FAMILIES[family].rowwise or s not in ("vmap", "scan")]
    out.append((i, family, rng.choice(FRAMEWORKS), rng.choice(spellings)))
  return out


def run(n: int, seed: int, families=tuple(FAMILIES), out=print, only=None,
        keep: str | None = None, rows: bool = False) -> dict:
  """Builds and judges ``n`` programs (``only``: those indices); prints a hint per program
  that falls short (``rows``: every program's row too, so that a run cut short still
  gives its table). Returns {family: Counter of the table's columns}."""
  table = collections.defaultdict(collections.Counter)
  with tempfile.TemporaryDirectory(prefix="nan_fixes_") as scratch:
    directory = keep or scratch
    os.makedirs(directory, exist_ok=True)
    for index, family, framework, spelling in plan(n, seed, families):
      if only is not None and index not in only:
        continue
      p = build(seed, index, family, framework, spelling, directory)
      if isinstance(p, str):
        table[family]["unbuildable"] += 1
        out(f"  seed {seed} index {index} {family}/{framework}/{spelling}: {p}")
        continue
      row, hint = judge(p)
      table[family].update(row)
      if rows:
        out(f"  row {index} {family} {dict(row)}")
      if hint:
        out(f"  seed {seed} index {index} {p.name} [{p.dtype}] "
            f"{os.path.basename(p.path)}: {hint}")
  return table


def totals(table: dict) -> collections.Counter:
  total = collections.Counter()
  for row in table.values():
    total.update(row)
  return total


def goal(table: dict) -> tuple[int, int]:
  """(programs with a stable rewrite, of which a verified fix was right as pasted)."""
  rows = [r for f, r in table.items() if FAMILIES[f].stable]
  return sum(r["programs"] for r in rows), sum(r["right as pasted"] for r in rows)


def print_table(table: dict, out=print) -> None:
  width = [len(c) + 2 for c in COLUMNS]
  out(f"{'family':<12}" + "".join(f"{c:>{w}}" for c, w in zip(COLUMNS, width)))
  for key in sorted(table):
    mark = "" if FAMILIES[key].stable else "*"
    out(f"{key + mark:<12}" + "".join(f"{table[key][c]:>{w}}" for c, w in zip(COLUMNS, width)))
  total = totals(table)
  out(f"{'total':<12}" + "".join(f"{total[c]:>{w}}" for c, w in zip(COLUMNS, width)))
  stable, right = goal(table)
  out(f"* no stable rewrite. With one: {right}/{stable} right as pasted "
      f"({100 * right / max(stable, 1):.0f}%)")


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=336)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
  parser.add_argument("--index", type=int, nargs="*")
  parser.add_argument("--keep")
  parser.add_argument("--rows", action="store_true", help="print each program's row")
  args = parser.parse_args(argv)
  start = time.perf_counter()
  table = run(args.n, args.seed, tuple(args.families), out=lambda s: print(s, flush=True),
              only=args.index and set(args.index), keep=args.keep, rows=args.rows)
  print_table(table)
  print(f"{sum(r['programs'] for r in table.values())} programs, seed {args.seed}, "
        f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
  main()
