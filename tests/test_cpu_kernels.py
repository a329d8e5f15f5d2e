"""The watch's reductions on the CPU (capture/cpu_kernels): compiled once per machine,
equal to XLA's reductions they replace on every kind of element, used inside a watched
step only where they may be (one device, the CPU), and where they cannot be built, the
same rows from XLA's reductions and a reason."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jupyter_vjpviz.analysis import watch_rows
from jupyter_vjpviz.capture import cpu_kernels, flow_taps

ROOT = pathlib.Path(__file__).resolve().parents[1]
KINDS = np.array([0.0, -0.0, 1e-45, -2.5, 1e-30, 7.0, 1e15, 3e-39, -1e-3], np.float32)
"""Zeros of both signs, subnormals (XLA:CPU flushes them: zero to it and to the
kernel), numbers of every size."""

needs_kernel = pytest.mark.skipif(cpu_kernels.built() is not None,
                                  reason=f"no CPU kernels here: {cpu_kernels.built()}")


def _array(n: int, extra=(), seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  x = np.resize(np.concatenate([KINDS, rng.normal(size=n)]).astype(np.float32), n)
  x[rng.permutation(n)[:len(extra)]] = extra
  return x


@needs_kernel
@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 65536 + 3])
@pytest.mark.parametrize("extra", [(), (np.inf,), (np.nan, -np.inf), (3e30,)])
def test_the_summary_equals_xlas_reductions(n, extra):
  """One pass of the kernel equals the XLA reductions it replaces: the counts exactly,
  the sum of squares and max |.| to float32 rounding, at every length around its lanes;
  both not finite where an element is not (NaN where one is NaN: the kernel's always,
  XLA's max on older jaxlib says Inf), or where the squares overflow."""
  if len(extra) > n:
    pytest.skip("fewer elements than the extras")
  x = jnp.asarray(_array(n, extra))
  got = np.asarray(jax.jit(cpu_kernels.summary)(x))
  want = np.asarray(jax.jit(flow_taps.reduced)(x))
  assert np.array_equal(got[2:], want[2:])
  assert np.array_equal(np.isfinite(got), np.isfinite(want))
  assert got[np.isfinite(got)] == pytest.approx(want[np.isfinite(want)], rel=2e-6)
  assert np.isnan(got[0]) == np.isnan(want[0]) == np.isnan(x).any()


@needs_kernel
def test_the_summary_under_vmap_is_one_per_example():
  """A tap under vmap (twice nested) summarises each example apart, as XLA's would."""
  x = jnp.asarray(_array(3 * 4 * 50, (np.nan, 0.0)).reshape(3, 4, 50))
  got = np.asarray(jax.jit(jax.vmap(jax.vmap(cpu_kernels.summary)))(x))
  want = np.asarray(jax.jit(jax.vmap(jax.vmap(flow_taps.reduced)))(x))
  assert got.shape == (3, 4, 5) and np.array_equal(got[..., 2:], want[..., 2:])
  assert got[..., :2] == pytest.approx(want[..., :2], rel=2e-6, nan_ok=True)


@needs_kernel
def test_the_squared_norms_equal_each_leafs_reduction():
  """One call for every leaf equals a reduction a leaf: shapes of every rank, an empty
  leaf, a non-finite one, a bfloat16 one (cast as the watch casts it)."""
  leaves = [jnp.asarray(_array(n, seed=n)).reshape(shape) for n, shape in
            ((35, (5, 7)), (1, ()), (0, (0, 3)), (64, (2, 4, 8)))]
  leaves += [leaves[0].at[1, 2].set(jnp.nan), leaves[3].astype(jnp.bfloat16)]
  got = np.asarray(jax.jit(cpu_kernels.squared_norms)(*(g.astype(jnp.float32) for g in leaves)))
  want = np.array([watch_rows.health(g) for g in leaves])
  assert got == pytest.approx(want, rel=2e-6, nan_ok=True)


@needs_kernel
def test_a_taps_summary_is_never_differentiated():
  """Differentiating through a tap's summary (a backward taken again) sees a constant,
  as it did before the kernel: no differentiation rule is asked of the custom call."""
  x = jnp.asarray(_array(40))
  assert float(jax.grad(lambda x: flow_taps.summary(x).sum())(x).sum()) == 0.0


def _watch_rows(env: dict) -> dict:
  """A flow watch of a small MLP run in a fresh process under ``env`` (one device unless
  it says otherwise): its rows, its flow, whether the kernels were usable, and the
  custom calls in its step."""
  code = textwrap.dedent("""
      import json, jax, jax.numpy as jnp, numpy as np
      from jupyter_vjpviz.api.watch import watch
      from jupyter_vjpviz.capture import cpu_kernels
      k = jax.random.split(jax.random.key(0), 4)
      p = {"a": jax.random.normal(k[0], (6, 16)), "b": jax.random.normal(k[1], (16, 16)),
           "layers": jax.random.normal(k[3], (3, 16, 16)) / 4,
           "c": jax.random.normal(k[2], (16, 2))}
      x = jax.random.normal(jax.random.key(1), (8, 6))
      def loss(p):
        h = jnp.tanh(x @ p["a"])
        h = jax.nn.relu(h @ p["b"])
        h, _ = jax.lax.scan(lambda h, w: (h + jnp.tanh(h @ w), None), h, p["layers"])
        return ((h @ p["c"]) ** 2).mean()
      @jax.jit
      def step(p):
        l, g = jax.value_and_grad(loss)(p)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), l
      w = watch(step, flow=True)
      for _ in range(3):
        p, _ = w(p)
      hlo = w._step._direct.lower(p).as_text()
      print(json.dumps({"rows": np.asarray(w.steps).tolist(), "flow": w.flow(),
                        "usable": cpu_kernels.usable(), "why": cpu_kernels.why_not(),
                        "calls": hlo.count("vjpviz_")}))
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": "", **env}, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_without_a_compiler_the_watch_gives_the_same_rows_from_xla(tmp_path):
  """No compiler on the machine (and an empty cache): the kernels are not usable and
  say why, the step has no custom call, and its rows and flow (a layer scan's taps in
  its body too) equal those the kernels make, to float32 rounding."""
  plain = _watch_rows({"CXX": "", "PATH": str(tmp_path), "VJPVIZ_CACHE_DIR": str(tmp_path)})
  assert not plain["usable"] and "no C++ compiler" in plain["why"] and plain["calls"] == 0
  assert not list(tmp_path.iterdir())
  if cpu_kernels.built() is not None:
    pytest.skip(f"no CPU kernels here to compare with: {cpu_kernels.built()}")
  fast = _watch_rows({"VJPVIZ_CACHE_DIR": str(tmp_path / "cache")})
  assert fast["usable"] and fast["calls"] > 0
  assert [p.name.startswith("cpu_kernels-") for p in (tmp_path / "cache").iterdir()] == [True]
  assert np.allclose(plain["rows"], fast["rows"], rtol=1e-5)
  assert [r["block"] for r in plain["flow"]] == [r["block"] for r in fast["flow"]]
  assert sum("layers" in r["block"] for r in fast["flow"]) == 3 * 3   # per step and layer
  for a, b in zip(plain["flow"], fast["flow"]):
    assert [a[k] for k in ("norm", "max_abs", "finite_fraction", "zero_fraction")] == \
        pytest.approx([b[k] for k in ("norm", "max_abs", "finite_fraction", "zero_fraction")],
                      rel=1e-5)


def test_a_job_of_several_devices_keeps_xlas_reductions(tmp_path):
  """Two devices: a custom call over a sharded array would be gathered whole, so the
  watch keeps XLA's reductions, says why, and compiles nothing."""
  got = _watch_rows({"XLA_FLAGS": "--xla_force_host_platform_device_count=2",
                     "VJPVIZ_CACHE_DIR": str(tmp_path)})
  assert not got["usable"] and got["why"] == "more than one device" and got["calls"] == 0
  assert not list(tmp_path.iterdir())


@needs_kernel
def test_large_leaves_keep_xlas_reductions_in_the_leaves_order(monkeypatch):
  """Leaves of ``SMALL`` elements or more (XLA's reductions run on every core) are
  reduced by XLA, the rest by one kernel call, each norm in its leaf's place."""
  monkeypatch.setattr(cpu_kernels, "usable", lambda: True)
  monkeypatch.setattr(cpu_kernels, "SMALL", 100)
  leaves = [jnp.asarray(_array(n, seed=n)) for n in (10, 300, 3, 100, 99, 1000)]
  healths = jax.jit(watch_rows.healths)
  got = np.asarray(healths(leaves))
  assert got == pytest.approx([float(watch_rows.health(g)) for g in leaves], rel=2e-6)
  assert healths.lower(leaves).as_text().count("vjpviz_squared_norms") == 1
  assert "vjpviz_" not in healths.lower(leaves[1::2]).as_text()   # none small
