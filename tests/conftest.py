import os

# shard_map tests need several devices; this must be set before JAX starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
# Kernels the tests start judge fixes unhurried too (see ``unhurried`` below).
os.environ.setdefault("VJPVIZ_BUDGET", "600")

import jax  # noqa: E402
import pytest  # noqa: E402

import jupyter_vjpviz as vv  # noqa: E402
import jax_features  # noqa: E402

jax_features.baseline_on()   # VJPVIZ_JAX_FLAGS: the upgrade flags on before any test module loads

pytest_plugins = ["kernel_helpers"]   # its fixture ``panel``: a real kernel, played as the panel


@pytest.fixture(autouse=True)
def unhurried(monkeypatch):
  """vjpviz's time per failing call (diagnosing, then judging fixes) made long: tests judge verdicts,
  not the machine's load (a test of a budget sets its own)."""
  from jupyter_vjpviz.analysis.values import replay
  monkeypatch.setattr(replay, "BUDGET", 600.)


@pytest.fixture
def hook():
  """The hook installed for one test, with a clean history and JAX defaults after."""
  vv.install()
  vv.clear()
  yield vv
  vv.uninstall()
  vv.clear()
  jax_features.flags_off()


@pytest.fixture(params=["classic", "hijax"])
def path(request, hook):
  """Run a test on both custom_vjp implementations (the hijax one where vjpviz watches it)."""
  if request.param == "hijax":
    if not jax_features.has(jax_features.HIJAX_PATH):
      pytest.skip(jax_features.why_not(jax_features.HIJAX_PATH))
    jax.config.update("jax_custom_vjp3", True)
  return request.param


def pytest_report_header(config):
  return f"jax {jax.__version__}, upgrade flags on: {', '.join(jax_features.BASELINE) or 'none'}"


def pytest_configure(config):
  config.addinivalue_line("markers", "needs(feature): skip unless vjpviz diagnoses that "
                          "kind, rule source or path on this JAX (tests/jax_features.py)")


def pytest_runtest_setup(item):
  for mark in item.iter_markers("needs"):
    for feature in mark.args:
      if not jax_features.has(feature):
        pytest.skip(jax_features.why_not(feature))
