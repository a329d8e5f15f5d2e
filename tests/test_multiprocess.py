"""vjpviz in ``jax.distributed`` jobs: 2 and 4 processes on this machine (issue 38).

Each test is one job (``multiprocess_harness``): CPU devices, gloo collectives, a
coordinator on a free localhost port, a hard timeout, every process reaped. The last
process's rows of a global batch carry a NaN where a test needs one.
"""
import subprocess
import sys

import pytest

from multiprocess_harness import PRELUDE, ROOT, run_job, skip_unless_available

SIZES = [2, 4]


@pytest.fixture(autouse=True)
def distributed():
  skip_unless_available()


NAN_ROWS = """
x = batch(np.ones((2, 3)) if PID != N - 1 else np.array([[1., 1., 1.], [-1., -1., -1.]]))
w = replicated(np.ones(3))

def loss(w, x):
  return jnp.sqrt(x @ w).sum()
"""
SQRT_LINE = "_job.py:{}".format((PRELUDE + NAN_ROWS).splitlines().index(
    "  return jnp.sqrt(x @ w).sum()") + 1)


@pytest.mark.parametrize("n", SIZES)
def test_the_checks_take_the_arrays_whole_and_agree(n):
  """vv.nans (of a loss, and of a jitted step that takes its gradient), vv.grads, vv.check
  and vv.gradcheck on a batch spanning the processes: no internal error, nothing raised;
  every process reaches the same answer as one process does (the gradient is searched on
  the arrays copied whole once): the NaN's ``sqrt`` line, the gradient of ``x`` with its
  global shape; and every process reaches the next collective."""
  found = run_job(NAN_ROWS + """
truth = jax.grad(loss, argnums=(0, 1))(w, x)
bad = [int(jax.jit(lambda g: (~jnp.isfinite(g)).sum())(g)) for g in truth]
vv.install()
d = vv.nans(loss, w, x)
dx = vv.nans(loss, w, x, argnums=1)
r = vv.grads(loss, w, x)
step = jax.jit(lambda w, x: w - 0.1 * jax.grad(loss)(w, x))
stepped = vv.nans(step, w, x, argnums=None)   # the step run again, its gradient screened
result(bad=bad, function=d.function, got=d.got, source=d.source, dx=dx.got, note=r.note,
       stepped=[stepped.function, stepped.got, stepped.source],
       report_process=r.to_dict()["process"], check=len(vv.check(loss, w, x)),
       gradcheck=len(vv.gradcheck(loss, w, x).rules), after=collective())
""", n)
  for i, r in enumerate(found):
    assert r["bad"] == [3, 3], r["bad"]        # plain JAX: w's 3 and x's last row
    assert r["function"] == "sqrt" and r["source"].endswith(SQRT_LINE), r["source"]
    assert r["got"].endswith("the gradient of w has 3 NaN of 3 elements"), r["got"]
    assert r["dx"].endswith(f"the gradient of x has 3 NaN of {6 * n} elements"), r["dx"]
    assert r["stepped"] == [r["function"], r["got"], r["source"]], r["stepped"]
    assert r["note"] is None and r["report_process"] == i
    assert r["check"] == 0 and r["gradcheck"] == 0
    assert r["after"] == 6 * n and "could not" not in r["stderr"], r["stderr"]


WRONG_RULE = """
f = jax.custom_vjp(lambda x: x * 2.)
f.defvjp(lambda x: (x * 2., None), lambda r, g: (g[:1],))

def fails():
  '''A failing gradient, and what JAX raised: (type, message).'''
  try:
    jax.grad(lambda v: f(v).sum())(jnp.ones(3))
  except Exception as e:
    return type(e).__name__, str(e).split("\\n")[0]
"""


@pytest.mark.parametrize("n", SIZES)
def test_a_process_that_fails_alone_holds_no_other(n):
  """Process 1's own computation fails and is caught; vjpviz diagnoses it there (judging
  fixes within its budget) while the others go straight on to a collective, which every
  process then completes: what vjpviz does after the error is local to process 1."""
  found = run_job(WRONG_RULE + """
plain = fails() if PID == 1 else None
vv.install()
hooked = fails() if PID == 1 else None
start = time.monotonic()
total = collective()
d = vv.last()
result(plain=plain, hooked=hooked, kind=d and d.kind, total=total,
       waited=time.monotonic() - start)
""", n, env={"VJPVIZ_BUDGET": "2"})
  failed = found[1]
  assert failed["hooked"] == failed["plain"] and failed["plain"][0] == "ValueError"
  assert failed["kind"] == "bwd_type"
  for i, r in enumerate(found):
    assert r["total"] == 6 * n and "could not" not in r["stderr"], r["stderr"]
    assert i == 1 or r["kind"] is None


@pytest.mark.parametrize("n", SIZES)
def test_records_know_the_processes_that_had_the_same_problem(n):
  """A wrong rule in a data-parallel jitted step fails on every process with JAX's error
  unchanged; each records its diagnosis, and process 0's says "on processes 0-(n-1)".
  A problem only the last process had shows on process 0 once, "on process n-1 only";
  the other processes print one line each of theirs."""
  found = run_job(WRONG_RULE + """
g = jax.custom_vjp(lambda x: x * 3.)
g.defvjp(lambda x: (x * 3., None), lambda r, ct: (ct.astype(jnp.float16),))
xs = batch(np.ones((2, 3)))

def step(w, x):
  return jax.grad(lambda w: f(x @ w).sum())(w)

def attempt():
  try:
    jax.jit(step)(replicated(np.ones(3)), xs)
  except Exception as e:
    return type(e).__name__, str(e).split("\\n")[0]

plain = attempt()
vv.install()
hooked = attempt()
if PID == N - 1:   # this process alone: a rule only its own computation reaches
  jax.grad(lambda v: g(v).sum())(jnp.ones(3, jnp.float32))
collective()       # the last process has published its problem before it gets here
from jupyter_vjpviz.deliver import console
last = vv.last().to_dict()
seen = [(d.kind, d.where, d.process) for d in vv.diagnoses()]
result(same=plain == hooked, processes=last["processes"], process=last["process"], seen=seen,
       lines=len(console.report(vv.last()).splitlines()), text=vv.diagnoses()[0].to_text())
""", n)
  lead = found[0]
  assert lead["same"] and lead["processes"] == list(range(n)) and lead["process"] == 0
  assert sorted(lead["seen"]) == sorted([
      ["bwd_type", f"on processes 0-{n - 1}", 0],
      ["silent_dtype", f"on process {n - 1} only", n - 1]]), lead["seen"]
  assert f"processes on processes 0-{n - 1}" in " ".join(lead["text"].split())
  for i, r in enumerate(found[1:], 1):
    assert r["same"] and r["process"] == i and r["lines"] == 1
    assert len(r["seen"]) == 1 + (i == n - 1)   # only process 0 gathers the others'


@pytest.mark.parametrize("n", SIZES)
def test_a_watched_step_keeps_one_series_on_process_0(n):
  """vv.watch on a data-parallel jitted step: process 0 keeps the global gradient's norms
  (the NaN the last process's rows bring at step 2 among them), its event naming that
  process and the rows it holds; the others copy no norms to the host and say where the
  series is."""
  found = run_job("""
w = replicated(np.ones(3))
good = np.ones((2, 3))
nan = np.array([[1., 1., 1.], [np.nan, 1., 1.]]) if PID == N - 1 else good

@jax.jit
def step(w, x):
  return w - 0.1 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w)

watched = vv.watch(step)
for rows in (good, good, nan):
  w = watched(w, batch(rows))
steps = watched.steps
result(steps=len(steps), events=[e.first_nonfinite for e in watched.events()],
       text=str(watched), after=collective())
""", n)
  assert found[0]["steps"] == 3 and found[0]["events"] == [2]
  assert (f"step 2: the gradient: non-finite on process {n - 1} only (x[{2 * n - 2}:{2 * n}, 0:3])"
          in found[0]["text"]), found[0]["text"]
  for i, r in enumerate(found[1:], 1):
    assert r["steps"] == 0 and r["text"].startswith(f"vjpviz watch: process {i} of a job")
  assert all(r["after"] == 6 * n for r in found)


@pytest.mark.parametrize("n", SIZES)
def test_a_headless_job_writes_each_process_records_and_merges_them(n, tmp_path):
  """VJPVIZ_REPORT_DIR: each process writes its records there as it records them (an
  error the script catches and never reads vjpviz's history for too);
  ``python -m jupyter_vjpviz report DIR`` makes one page, each problem once, with its
  processes, and counts problems only (not a healthy gradient report)."""
  run_job(WRONG_RULE + NAN_ROWS + """
vv.install()
xs = batch(np.ones((2, 3)))
try:
  jax.jit(lambda w: jax.grad(lambda w: f(xs @ w).sum())(w))(replicated(np.ones(3)))
except ValueError:
  pass
vv.nans(loss, w, x)
vv.grads(lambda w, x: (x @ w).sum(), w, x)
result(done=True)
""", n, env={"VJPVIZ_REPORT_DIR": str(tmp_path)})
  assert sorted(p.name for p in tmp_path.iterdir()) == [f"process-{i}.json" for i in range(n)]
  merged = subprocess.run([sys.executable, "-m", "jupyter_vjpviz", "report", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert merged.returncode == 0, merged.stderr
  assert "vjpviz: 2 problem(s)" in merged.stderr, merged.stderr
  page = (tmp_path / "report.html").read_text()
  assert page.count(f"diagnosis: on processes 0-{n - 1}") == 2      # the rule's, the NaN's
  assert page.count(f"gradient report: on processes 0-{n - 1}") == 1


def test_a_watched_steps_backward_flow_is_named_on_process_0():
  """vv.watch(step, flow=True) on a data-parallel step of two blocks, the last process's
  rows NaN at step 2: every process computes the same global flow in its step (none
  re-runs anything); process 0 names the first non-finite block and that process."""
  found = run_job("""
p = {"a": replicated(np.ones((3, 3)) / 3), "b": replicated(np.ones(3))}
good = np.ones((2, 3))
nan = np.array([[1., 1., 1.], [np.nan, 1., 1.]]) if PID == N - 1 else good

@jax.jit
def step(p, x):
  g = jax.grad(lambda p: ((jnp.tanh(x @ p["a"]) @ p["b"]) ** 2).mean())(p)
  return jax.tree_util.tree_map(lambda w, d: w - 0.1 * d, p, g)

watched = vv.watch(step, flow=True)
for rows in (good, good, nan):
  p = watched(p, batch(rows))
result(blocks=watched.flow_blocks, rows=len(watched.flow()), text=str(watched),
       after=collective())
""", 2)
  assert found[0]["blocks"] == ["['a']", "['b']"] and found[0]["rows"] == 6
  assert ("backward flow: step 2: the cotangent first went non-finite at ['b']'s output on "
          "process 1 only (x[2:4, 0:3]): made in the loss" in found[0]["text"]), found[0]["text"]
  assert found[1]["rows"] == 0 and found[1]["blocks"] == ["['a']", "['b']"]
  assert all(r["after"] == 12 for r in found)


ON_MESH = """
from jax.sharding import AxisType
def loss(w, x):
  return jnp.mean(jnp.sqrt(jnp.sum((x @ w) ** 2, axis=1)))
double = jax.custom_vjp(lambda v: v * 2.)
double.defvjp(lambda v: (v * 2., None), lambda r, g: (g * 3.,))        # its values wrong
reduced = jax.custom_vjp(lambda v: v * .5)
reduced.defvjp(lambda v: (v * .5, None), lambda r, g: (g.sum(0) * .5,))   # its type wrong

def ruled(w, x):
  return (double(x @ w) ** 2).sum()

found = {}
vv.install()
for types in ("Explicit", "Auto"):
  mesh = jax.make_mesh((len(jax.devices()),), ("data",), axis_types=(getattr(AxisType, types),))
  with jax.set_mesh(mesh):   # FSDP: w's rows over every device of every process
    w = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data", None)),
        np.arange(1., 1. + 3 * len(jax.local_devices())).reshape(-1, 3).astype(np.float32) * (PID + 1))
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P()), np.array(
        [[1.] * len(jax.devices()), [0.] * len(jax.devices())], np.float32))
    truth = jax.grad(loss)(w, x)
    bad = int(jax.jit(lambda g: (~jnp.isfinite(g)).sum())(truth))
    d = vv.nans(loss, w, x)
    r = vv.grads(lambda w, x: (x @ w).sum(), w, x)
    try:
      jax.grad(lambda w: reduced(w).sum())(w)
    except ValueError:
      pass
    rule = vv.last()
    checked = vv.gradcheck(ruled, w, x)
    found[types] = dict(
        bad=bad, size=truth.size, nans=[d.function, d.source, d.got], grads=r.healthy,
        leaves=[n for _, n, _ in r.leaves], check=[c.kind for c in vv.check(lambda w: reduced(w).sum(), w)],
        gradcheck=[c.status for c in checked.rules],
        gathered=[d.to_dict()["processes"] for d in checked],
        rule=[rule.kind, [f.verdict for f in rule.fixes], rule.to_dict()["processes"]])
    found[types]["ref"] = float(jnp.sqrt((jnp.sum(x, 0) ** 2).sum() * 3))   # |d/dw sum(x @ w)|
"""
CANNOT_CHECK = """
from jupyter_vjpviz.base import hosts
from jupyter_vjpviz.api import nans as searched
limit, search = hosts.WHOLE_LIMIT, searched._nonfinite
hosts.WHOLE_LIMIT = 0                  # too large to copy: every process alike
copy, report = vv.nans(loss, w, x), vv.grads(loss, w, x)
hosts.WHOLE_LIMIT = limit

def broken(*args):
  raise RuntimeError("a bug of vjpviz's in the search")
searched._nonfinite = broken
internal = vv.nans(loss, w, x)
searched._nonfinite = search
unchecked = [[copy.got, copy.detail], [internal.got, internal.detail],
             [report.judged, report.unchecked and report.unchecked.reason]]
"""
MESH_SQRT_LINE = (PRELUDE + ON_MESH).splitlines().index(
    "  return jnp.mean(jnp.sqrt(jnp.sum((x @ w) ** 2, axis=1)))") + 1


def test_fsdp_weights_under_set_mesh():
  """Weights sharded over every device of every process (P("data", None)) under a
  ``jax.set_mesh`` context, with Explicit and with Auto axes: vv.nans finds the NaN plain
  JAX's gradient has and names the ``sqrt`` line; vv.grads measures the whole gradient
  (its norm is plain JAX's); vv.check and vv.gradcheck find the wrong rules; the wrong
  rule's diagnosis has a verified fix, on both processes; where vjpviz cannot look (the
  arrays too large to copy, its own search failing) vv.nans says the gradient is not
  finite and why it does not say where, vv.grads that it is not judged, never an
  all-clear; and both reach the next collective."""
  found = run_job(ON_MESH + CANNOT_CHECK
                  + "result(found=found, unchecked=unchecked, after=collective())", 2)
  for r in found:
    for types, got in r["found"].items():
      assert got["bad"] == got["size"] and got["nans"][0] == "sqrt", (types, got)
      assert got["nans"][1].endswith(f":{MESH_SQRT_LINE}"), got["nans"]
      assert got["nans"][2].endswith(f"{got['bad']} NaN of {got['size']} elements"), got["nans"]
      assert got["grads"] and abs(got["leaves"][0] - got["ref"]) < 1e-4 * got["ref"], got
      assert got["check"] == ["bwd_type"] and got["gradcheck"] == ["wrong"], (types, got)
      kind, verdicts, processes = got["rule"]
      lead = r is found[0]   # only process 0 gathers
      assert kind == "bwd_type" and processes == ([0, 1] if lead else [])
      assert got["gathered"] == [[0, 1] if lead else []], got["gathered"]
      assert verdicts and verdicts[0] in ("verified", "unverifiable"), (types, verdicts)
    assert r["after"] == 12
    copy, internal, report = r["unchecked"]
    assert copy == ["the gradient is not finite", "where it went non-finite is unknown: not "
                    "searched: its arrays spanning processes (0.0 GiB) are more than vjpviz "
                    "copies to one process (0 GiB)"], copy
    assert internal[0] == f"the gradient has {r['found']['Auto']['size']} NaN of " \
        f"{r['found']['Auto']['size']} elements", internal
    assert internal[1].endswith("vjpviz failed at it (an internal error)"), internal
    assert report[0] is False and report[1].startswith("gradient not taken: its arrays"), report


def test_one_process_of_many_devices():
  """The same in one process of 4 devices: nothing spans processes, the set_mesh context
  and the FSDP weights remain."""
  found = run_job(ON_MESH + "result(found=found)", 1, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
  for types, got in found[0]["found"].items():
    assert got["bad"] == got["size"] and got["nans"][0] == "sqrt", (types, got)
    assert got["grads"] and abs(got["leaves"][0] - got["ref"]) < 1e-4 * got["ref"], got
    assert got["check"] == ["bwd_type"] and got["gradcheck"] == ["wrong"], (types, got)
    assert got["rule"][0] == "bwd_type" and got["rule"][1], (types, got)


@pytest.mark.parametrize("n", [2])
def test_a_process_failing_alone_prints_and_writes_its_own_diagnosis(n, tmp_path):
  """Under ``python -m jupyter_vjpviz run``: a problem only the last process has is
  printed whole there (process 0 never recorded it) and by process 0 as that process's,
  never as "(process 0 has the diagnosis)"; then the last process dies alone of an error
  it does not catch: it prints and writes its own full diagnosis, which process 0
  (finishing without it) never had."""
  found = run_job(WRONG_RULE + """
g = jax.custom_vjp(lambda x: x * 3.)
g.defvjp(lambda x: (x * 3., None), lambda r, ct: (ct.astype(jnp.float16),))
if PID == N - 1:
  jax.grad(lambda v: g(v).sum())(jnp.ones(3, jnp.float32))   # a warning: this process alone
collective()        # published before process 0 reads its records at the end
result(done=True)
if PID == N - 1:    # its own computation fails, uncaught
  jax.grad(lambda v: f(v).sum())(jnp.ones(3))
""", n, under_run=True, failing=frozenset({n - 1}), env={"VJPVIZ_REPORT_DIR": str(tmp_path)})
  lead, last = found[0], found[-1]
  assert last["status"] == 1 and lead["status"] == 0
  assert "process 0 has the diagnosis" not in lead["stderr"] + last["stderr"], lead["stderr"]
  assert f"processes on process {n - 1} only" in " ".join(lead["stderr"].split()), lead["stderr"]
  assert "kind      silent_dtype" in last["stderr"], last["stderr"]
  assert "kind      bwd_type" in last["stderr"] and "ValueError" in last["stderr"]
  import json
  written = json.loads((tmp_path / f"process-{n - 1}.json").read_text())
  assert sorted(r["data"]["kind"] for r in written["records"]) == ["bwd_type", "silent_dtype"]
