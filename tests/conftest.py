import os

# shard_map tests need several devices; this must be set before JAX starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import pytest  # noqa: E402

import jupyter_vjpviz as vv  # noqa: E402

pytest_plugins = ["kernel_helpers"]   # its fixture ``panel``: a real kernel, played as the panel


@pytest.fixture
def hook():
  """The hook installed for one test, with a clean history and JAX defaults after."""
  vv.install()
  vv.clear()
  yield vv
  vv.uninstall()
  vv.clear()
  jax.config.update("jax_custom_vjp3", False)
  jax.config.update("jax_disable_bwd_checks", False)


@pytest.fixture(params=["classic", "hijax"])
def path(request, hook):
  """Run a test on both custom_vjp implementations."""
  jax.config.update("jax_custom_vjp3", request.param == "hijax")
  return request.param
