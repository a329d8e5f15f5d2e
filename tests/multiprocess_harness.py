"""Jobs of several JAX processes on this machine, as ``jax.distributed`` runs them on many.

``run_job(body, n)`` starts ``n`` Python processes, each running ``PRELUDE`` (connect to a
coordinator on a free localhost port, CPU devices, gloo collectives, a global mesh) and
then ``body``, which reports by calling ``result(**values)``: one script file, in a
temporary working directory (``python -m jupyter_vjpviz run`` writes its report there). Each job has a hard timeout:
past it every process's group is killed, and the test fails with what each printed. No
process outlives its job.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIMEOUT = 90.0     # seconds a job may take, all its processes together

PRELUDE = """
import json, os, sys, time
PID, N, PORT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{PORT}", num_processes=N,
                           process_id=PID, initialization_timeout=30)
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jupyter_vjpviz as vv
MESH = Mesh(np.array(jax.devices()), ("d",))

def batch(local):
  '''A global array of every process's ``local`` rows, this one's at rows PID*len(local).'''
  return jax.make_array_from_process_local_data(NamedSharding(MESH, P("d")),
                                                np.asarray(local, np.float32))

def replicated(value):
  return jax.make_array_from_process_local_data(NamedSharding(MESH, P()),
                                                np.asarray(value, np.float32))

def collective():
  '''A computation every process must take part in: a sum over the global batch.'''
  return float(jax.jit(lambda x: x.sum())(batch(np.ones((2, 3)))))

def result(**values):
  print("RESULT " + json.dumps(values), flush=True)
"""


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_job(body: str, n: int, env: dict | None = None, timeout: float = TIMEOUT,
            under_run: bool = False, failing: frozenset = frozenset()) -> list[dict]:
  """Each process's ``result(...)`` values (the last it reported), by process index, its
  output as ``stdout`` and ``stderr``, its exit status as ``status``; fails the test on a
  timeout or a non-zero exit of a process not in ``failing``. ``under_run``: each process
  runs the script under ``python -m jupyter_vjpviz run``."""
  port = free_port()
  with tempfile.TemporaryDirectory() as where:   # the job's working directory
    script = os.path.join(where, "the_job.py")   # a file, as a job's script is: its source is read
    pathlib.Path(script).write_text(PRELUDE + textwrap.dedent(body))
    command = [sys.executable, *(["-m", "jupyter_vjpviz", "run"] if under_run else []), script]
    outputs, status = _run(command, n, port, env, timeout, where)
  failed = [i for i, rc in enumerate(status) if rc != 0 and i not in failing]
  assert not failed, f"processes {failed} failed:\n" + _printed(outputs)
  return [{**_last_result(out), "stdout": out, "stderr": err, "status": rc}
          for (out, err), rc in zip(outputs, status)]


def _run(command: list[str], n: int, port: int, env: dict | None, timeout: float,
         cwd: str) -> tuple:
  env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={2 if n == 2 else 1}",
         **(env or {})}
  procs = [subprocess.Popen([*command, str(i), str(n), str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            start_new_session=True) for i in range(n)]
  deadline = time.monotonic() + timeout
  outputs = []
  try:
    for p in procs:
      outputs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
  except subprocess.TimeoutExpired:
    _kill(procs)
    outs = [p.communicate() for p in procs]
    pytest.fail(f"the job ran past {timeout:.0f} s:\n" + _printed(outs))
  finally:
    _kill(procs)
  return outputs, [p.returncode for p in procs]


def _kill(procs) -> None:
  """Every process's group ended (a process and whatever it started)."""
  for p in procs:
    if p.poll() is None:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      p.wait()


def _last_result(out: str) -> dict:
  lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
  assert lines, f"no result:\n{out}"
  return json.loads(lines[-1][len("RESULT "):])


def _printed(outputs) -> str:
  return "\n".join(f"--- process {i}\n{out[-3000:]}\n{err[-3000:]}"
                   for i, (out, err) in enumerate(outputs))


def skip_unless_available() -> None:
  """Skip where this machine cannot run such a job: no gloo CPU collectives in this JAX,
  or no loopback port to put a coordinator on."""
  import jax
  if "jax_cpu_collectives_implementation" not in jax.config.values:
    pytest.skip(f"jax {jax.__version__} has no CPU collectives option (gloo)")
  try:
    free_port()
  except OSError as e:
    pytest.skip(f"no loopback port for a coordinator: {e}")
