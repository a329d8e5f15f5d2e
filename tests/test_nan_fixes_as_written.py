"""A NaN fix called verified is right as written (issue 37): pasted at the line it names, in
the user's own names, it keeps the forward values, makes the gradient finite and equal to
the derivative of the original; a rewrite that does not is never called verified.

Each program is written to a module file of its own (real lines to paste at); the check
here pastes the fix's code into that file's text itself and compares with plain JAX,
apart from vjpviz's own judge.
"""
import importlib.util
import itertools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.fixes import pasted

PROGRAMS = {
    # probabilities kept in a variable, then logged on the next line
    "softmax_then_log": """
        def loss(w, x):
            logits = x @ w
            probs = jax.nn.softmax(logits)
            logp = jnp.log(probs)
            return -logp[:, 0].mean()
        """,
    # a standard deviation that is 0 for one feature; a local named like the input
    "std_of_a_constant_feature": """
        def loss(w, x):
            x = jnp.tanh(x @ w)
            sd = x.std(0)
            return (x / (sd + 1.0)).sum() + sd.sum()
        """,
    # a radius through intermediate variables
    "radius_through_variables": """
        def loss(w, x):
            y = x @ w
            r2 = jnp.sum(y * y, 1)
            r = jnp.sqrt(r2)
            return r.sum()
        """,
    # a norm written with jnp.linalg.norm, in a helper the loss calls
    "norm_in_a_helper": """
        def features(w, x):
            h = x @ w
            n = jnp.linalg.norm(h, axis=1)
            return n

        def loss(w, x):
            return features(w, x).sum() ** 2
        """,
}

_serial = itertools.count()


def module(tmp_path, text: str):
  path = tmp_path / f"user_model_{next(_serial)}.py"
  path.write_text("import jax\nimport jax.numpy as jnp\n" + textwrap.dedent(text))
  spec = importlib.util.spec_from_file_location(path.stem, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod, path


def inputs(name):
  rng = np.random.RandomState(0)
  x = jnp.asarray(rng.randn(4, 3), jnp.float32)
  w = jnp.asarray(rng.randn(3, 3), jnp.float32)
  if name == "softmax_then_log":
    return jnp.array([[200., -200.], [0., 0.], [0., 0.]]), jnp.abs(x)
  if name == "std_of_a_constant_feature":
    return w.at[:, 1].set(0.), x
  return w, x.at[2].set(0.)   # one row maps to 0: its norm is 0


def line_of(path, text: str) -> str:
  """``file:line`` of the first line of ``path`` holding ``text``."""
  return f"{path}:{1 + next(i for i, l in enumerate(path.read_text().splitlines()) if text in l)}"


def pasted_by_hand(path, line: int, code: str, tmp_path):
  """The user's file with ``line`` replaced by the fix's statement, its helpers (defs) put
  at the top: the independent paste."""
  rows = path.read_text().splitlines()
  indent = rows[line - 1][:len(rows[line - 1]) - len(rows[line - 1].lstrip())]
  helpers, statement = code.rsplit("\n\n", 1) if "def " in code else ("", code)
  rows[line - 1:line] = [indent + s for s in textwrap.dedent(statement).splitlines()]
  body = "\n".join(rows[2:])   # module() writes the imports again
  return module(tmp_path, f"{helpers}\n\n{body}" if helpers else body)[0]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_first_fix_is_verified_and_right_as_pasted(name, tmp_path):
  mod, path = module(tmp_path, PROGRAMS[name])
  w, x = inputs(name)
  assert not np.isfinite(jax.grad(mod.loss)(w, x)).all()
  d = vv.nans(mod.loss, w, x)
  file, line = d.source.rsplit(":", 1)
  assert file == str(path)
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.verdict, f.code, f.note) for f in d.fixes]
  fixed = pasted_by_hand(path, int(line), first.code, tmp_path)
  # the forward is kept where it was finite
  before, after = float(mod.loss(w, x)), float(fixed.loss(w, x))
  if np.isfinite(before):
    np.testing.assert_allclose(after, before, rtol=1e-5)
  # the gradient is finite and is the derivative: float64 differences along directions
  # through the entries whose plain gradient was finite (all, where none was: the loss is
  # smooth at these inputs along every direction then)
  g = np.asarray(jax.grad(fixed.loss)(w, x), np.float64)
  assert np.isfinite(g).all()
  support = np.isfinite(np.asarray(jax.grad(mod.loss)(w, x)))
  support = support if support.any() else np.ones_like(support)
  with jax.enable_x64(True):
    w64, x64 = np.asarray(w, np.float64), np.asarray(x, np.float64)
    rng = np.random.default_rng(1)
    for _ in range(3):
      v = rng.standard_normal(w.shape) * support
      v /= np.linalg.norm(v)
      h = 1e-6
      fd = (float(mod.loss(w64 + h * v, x64)) - float(mod.loss(w64 - h * v, x64))) / (2 * h)
      np.testing.assert_allclose(np.vdot(g, v), fd, rtol=2e-3, atol=1e-4)


def test_each_fix_is_a_whole_statement_in_the_users_names(tmp_path):
  mod, _ = module(tmp_path, PROGRAMS["softmax_then_log"])
  d = vv.nans(mod.loss, *inputs("softmax_then_log"))
  assert d.fixes[0].code.strip() == "logp = jax.nn.log_softmax(logits)"
  mod, _ = module(tmp_path, PROGRAMS["std_of_a_constant_feature"])
  d = vv.nans(mod.loss, *inputs("std_of_a_constant_feature"))
  assert [l.strip() for l in d.fixes[0].code.splitlines()] == [
      "var = jnp.var(x, 0)",
      "sd = jnp.where(var > 0, jnp.sqrt(jnp.where(var > 0, var, 1.0)), 0.0)"]


def test_a_rewrite_that_changes_the_model_is_never_verified(tmp_path):
  """The judge itself, on the wrong rewrites users were handed: log_softmax of the
  probabilities (the loss changes), and a guard that makes the gradient finite but zero
  where the derivative is not (a stop_gradient)."""
  mod, path = module(tmp_path, PROGRAMS["softmax_then_log"])
  w, x = inputs("softmax_then_log")
  wrong = pasted.pasted(mod.loss, line_of(path, "jnp.log("), "logp = jax.nn.log_softmax(probs)")
  why = pasted.judge(mod.loss, wrong, (w, x), {}, (0,))
  assert why.startswith("it changes the forward values"), why

  mod, path = module(tmp_path, PROGRAMS["radius_through_variables"])
  w, x = inputs("radius_through_variables")
  stopped = "r = jax.lax.stop_gradient(jnp.sqrt(r2))"
  why = pasted.judge(mod.loss, pasted.pasted(mod.loss, line_of(path, "jnp.sqrt("), stopped), (w, x), {}, (0,))
  assert why == "its gradient is not finite" or why.startswith("its gradient differs"), why
  zeroed = "r = jax.lax.stop_gradient(jnp.sqrt(jnp.where(r2 > 0, r2, 1.0))) * (r2 > 0)"
  why = pasted.judge(mod.loss, pasted.pasted(mod.loss, line_of(path, "jnp.sqrt("), zeroed), (w, x), {}, (0,))
  assert why.startswith("its gradient differs from central differences"), why


def test_a_rewrite_that_changes_an_overflowed_forward_is_never_verified(tmp_path):
  """Where the original's forward overflowed (inf in float32, finite in float64), a rewrite
  with the right gradient but another value (a logsumexp that drops the max it took out)
  changes the loss: the float64 forward is the reference there, not an all-clear."""
  mod, path = module(tmp_path, """
      def loss(w, x):
          z = (x @ w) * 100.
          lse = jnp.log(jnp.sum(jnp.exp(z), 1))
          return lse.sum()
  """)
  w, x = jnp.ones((3, 3)), jnp.ones((4, 3))
  assert not np.isfinite(float(mod.loss(w, x)))
  dropped = ("lse = jnp.log(jnp.sum(jnp.exp(z - jax.lax.stop_gradient(z.max(1, keepdims=True))), 1))")
  why = pasted.judge(mod.loss, pasted.pasted(mod.loss, line_of(path, "jnp.log("), dropped), (w, x), {}, (0,))
  assert why is not None and why.startswith("it changes the forward values"), why
  kept = ("m = jax.lax.stop_gradient(z.max(1, keepdims=True)); "
          "lse = jnp.log(jnp.sum(jnp.exp(z - m), 1)) + m[:, 0]")
  why = pasted.judge(mod.loss, pasted.pasted(mod.loss, line_of(path, "jnp.log("), kept), (w, x), {}, (0,))
  assert why is None, why


def test_a_line_that_cannot_be_rewritten_gets_no_verified_pattern(tmp_path):
  """A lambda (no line of its own to paste at): the pattern shown is unverifiable."""
  mod, _ = module(tmp_path, "loss = lambda w, x: jnp.sqrt(jnp.sum((x @ w) ** 2, 1)).sum()\n")
  d = vv.nans(mod.loss, *inputs("radius_through_variables"))
  assert d.fixes and all(f.verdict != "verified" for f in d.fixes), d.fixes
  assert any("lambda" in f.note or "pattern" in f.note for f in d.fixes), d.fixes


EQUINOX_MODEL = """
    import equinox as eqx

    class Block(eqx.Module):
        lin: eqx.nn.Linear

        def __call__(self, x):
            h = self.lin(x)
            r = jnp.sqrt(jnp.sum(h * h))
            return h / (1.0 + r)

    class Net(eqx.Module):
        blocks: list

        def __call__(self, x):
            for b in self.blocks:
                x = b(x)
            return x.sum()

    def loss(net, x):
        return net(x)
    """


def equinox_net(mod):
  """A net whose first block maps everything to 0: its norm's sqrt is at 0."""
  import equinox as eqx
  k0, k1 = jax.random.split(jax.random.PRNGKey(0))
  zero = eqx.tree_at(lambda l: (l.weight, l.bias), eqx.nn.Linear(3, 3, key=k0),
                     (jnp.zeros((3, 3)), jnp.zeros(3)))
  return mod.Net([mod.Block(zero), mod.Block(eqx.nn.Linear(3, 3, key=k1))])


def test_a_line_in_a_method_of_a_block_in_a_list_is_fixed_there(tmp_path):
  """The line is in ``Block.__call__``, reached from the loss only through the model (an
  argument) and its list of blocks: the fix is pasted there and verified."""
  mod, path = module(tmp_path, EQUINOX_MODEL)
  x = jnp.ones(3)
  d = vv.nans(mod.loss, equinox_net(mod), x)
  assert d.source == line_of(path, "jnp.sqrt(")
  first = d.fixes[0]
  assert first.verdict == "verified", d.fixes
  fixed = pasted_by_hand(path, int(d.source.rsplit(":", 1)[1]), first.code, tmp_path)
  net, fixed_net = equinox_net(mod), equinox_net(fixed)
  np.testing.assert_allclose(fixed.loss(fixed_net, x), mod.loss(net, x), rtol=1e-6)
  import equinox as eqx
  g = eqx.filter_grad(fixed.loss)(fixed_net, x)
  assert all(np.isfinite(leaf).all() for leaf in jax.tree_util.tree_leaves(g))
  assert type(net).__call__ is mod.Net.__call__   # the user's classes are as they were


def test_apply_fix_writes_exactly_what_was_verified(tmp_path):
  """The patch puts the verified statement at the line and its helper before the function;
  applied to the file, the module is the one the judge verified. Other code is refused."""
  mod, path = module(tmp_path, PROGRAMS["norm_in_a_helper"])
  d = vv.nans(mod.loss, *inputs("norm_in_a_helper"))
  first = d.fixes[0]
  assert first.verdict == "verified" and "def safe_norm" in first.code
  applied = vv.apply_fix(d, first.code)
  assert not applied.applied and applied.path == str(path)
  patched = tmp_path / "patched.py"
  old = path.read_text().splitlines(keepends=True)
  new, at = [], 0
  for hunk in applied.patch.split("\n@@")[1:]:   # apply the unified diff by hand
    header, *body = hunk.split("\n")
    start = int(header.split()[0].lstrip("-").split(",")[0]) - 1
    new += old[at:start]
    at = start
    for row in body:
      if row.startswith((" ", "-")):
        at += 1
      if row.startswith((" ", "+")):
        new.append(row[1:] + "\n")
  patched.write_text("".join(new + old[at:]))
  fixed = module(tmp_path, patched.read_text().split("\n", 2)[2])[0]
  w, x = inputs("norm_in_a_helper")
  np.testing.assert_allclose(fixed.loss(w, x), mod.loss(w, x), rtol=1e-6)
  assert np.isfinite(jax.grad(fixed.loss)(w, x)).all()
  with pytest.raises(ValueError, match="not a fix vv.nans verified"):
    vv.apply_fix(d, "n = jnp.linalg.norm(h, axis=1) + 1")
