"""vv.grads: zero-gradient reasons, paths and sources on small real programs."""
import functools
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jupyter_vjpviz.api.grads import grads

HERE = pathlib.Path(__file__)


def line_of(marker: str) -> str:
  """``file:line`` of the line in this file holding ``# <marker>``."""
  lines = HERE.read_text().splitlines()
  return f"{HERE}:{next(k + 1 for k, l in enumerate(lines) if l.rstrip().endswith(f'# {marker}'))}"


@jax.custom_vjp
def no_grad(x):
  return x * 2


no_grad.defvjp(lambda x: (x * 2, None), lambda r, g: (jnp.zeros_like(g),))


def mixed(p, x):
  h = jax.nn.relu(x @ p["w"] - 100.0)  # dead
  out = (h @ p["after"]).sum()
  out += (jax.lax.stop_gradient(p["frozen"]) * 2).sum()  # stopped
  out += p["count"].astype(jnp.int32).sum()  # intcast
  out += jnp.round(p["rounded"]).sum()  # round
  out += jnp.tanh(p["gate"] * 100 + 50).sum()  # saturated
  out += no_grad(p["rule"]).sum()  # rule
  out += (p["half"] * jnp.float16(1e-4) * jnp.float16(1e-4)).astype(jnp.float32).sum()  # under
  out += p["emb"][jnp.array([0, 2])].sum()
  return out + (x @ p["ok"]).sum()


@pytest.fixture(scope="module")
def report():
  p = {k: jnp.ones((3, 3)) for k in ["w", "after", "frozen", "count", "rounded", "gate", "rule",
                                     "unused", "emb", "ok"]}
  p["half"] = jnp.ones((3,), jnp.float16)
  return grads(mixed, p, jnp.ones((2, 3)))


@pytest.mark.parametrize("path, reason, marker", [
    ("['unused']", "unused", None),
    ("['frozen']", "stopped", "stopped"),
    ("['count']", "non_differentiable", "intcast"),
    ("['rounded']", "non_differentiable", "round"),
    ("['rule']", "rule_zero", "rule"),
    ("['w']", "dead", "dead"),
    ("['after']", "dead", "dead"),
    ("['gate']", "saturated", "saturated"),
    ("['half']", "underflow", "under"),
])
def test_each_reason_with_its_line(report, path, reason, marker):
  found = {z.path: z for z in report.zero}
  assert found[path].reason == reason
  assert found[path].source == (line_of(marker) if marker else None)


def test_only_the_cut_leaves_are_zero(report):
  assert {z.path for z in report.zero} == {
      "['unused']", "['frozen']", "['count']", "['rounded']", "['rule']", "['w']", "['after']",
      "['gate']", "['half']"}
  assert not report.healthy


def test_embedding_rows_not_gathered_are_no_alarm(report):
  (emb,) = [p for p in report.partly_zero if p.path == "['emb']"]
  assert (emb.units, emb.reason, emb.alarm) == ("rows", "not gathered", False)
  assert emb.fraction == pytest.approx(1 / 3)


@pytest.mark.parametrize("jit", [False, True])
def test_units_sliced_away_are_not_read_not_dead(jit):
  """Rows no static slice reads (a positional table longer than the sequence) are named
  for the slice; a read row whose gradient dies at a relu is still dead."""
  def loss(p, x):
    pos = p["pos"][:x.shape[0]]                       # rows 4.. never read
    h = jax.nn.relu(x + pos - jnp.array([[0.], [0.], [9.], [0.]]))   # row 2 dead at these values
    return h.sum() + p["w"][:, 1:].sum()              # column 0 never read
  fn = jax.jit(loss) if jit else loss
  r = grads(fn, {"pos": jnp.ones((6, 3)), "w": jnp.ones((2, 3))}, jnp.ones((4, 3)))
  found = {(z.path, z.units, z.reason): (z.fraction, z.alarm) for z in r.partly_zero}
  assert found == {("['pos']", "rows", "not read"): (pytest.approx(2 / 6), False),
                   ("['pos']", "rows", "dead"): (pytest.approx(1 / 6), True),
                   ("['w']", "columns", "not read"): (pytest.approx(1 / 3), False)}


def test_to_dict_round_trips_through_json(report):
  d = report.to_dict()
  assert json.loads(json.dumps(d)) == d
  assert {z["reason"] for z in d["zero"]} >= {"unused", "stopped", "dead", "underflow"}
  assert d["graph"]["edges"]


def test_graph_edges_carry_cotangent_norms_and_zero_is_marked(report):
  flows = [e.flow for e in report.graph.edges if e.flow is not None]
  assert any(f[4] == 0 for f in flows) and any(f[4] > 0 for f in flows)
  (frozen,) = [e for e in report.graph.edges
                if report.graph.node(e.dst).primitive == "stop_gradient"]
  assert frozen.primal_norm == pytest.approx(3.0)   # ‖ones((3, 3))‖
  page = report._repr_html_()
  assert "(zero)" in page and "<script" not in page


def test_text_names_reason_and_line(report):
  text = str(report)
  assert "['frozen']: stopped at stop_gradient" in text and line_of("stopped") in text


def test_stack_layers_in_depth_order_with_vanishing_flagged():
  ws = [jnp.eye(4) * 3.0 for _ in range(5)]   # tanh saturating: each block ~30x less

  def deep(ws, x):
    for w in ws:
      x = jnp.tanh(x @ w)
    return x.sum()
  r = grads(deep, ws, jnp.ones(4))
  assert [layer.name for layer in r.layers] == [f"[{i}]" for i in range(5)]
  assert [layer.flag for layer in r.layers] == ["vanishing"] * 4 + [None]
  assert r.layers[0].ratio == pytest.approx(r.layers[0].grad_norm / r.layers[0].param_norm)
  assert "<svg" in r._repr_html_()


@pytest.mark.parametrize("dtype, scale", [(jnp.float32, 1e8), (jnp.bfloat16, 1e3)])
def test_a_block_whose_updates_round_away_at_any_learning_rate_is_flagged(dtype, scale):
  """Gradient norms even from block to block (no 10x change), but block 2's weights are so
  large against its gradient that even a learning rate of 1 moves them less than their
  rounding: lost in float32 at 1e8 times the others' scale, in bfloat16 already at 1e3."""
  blocks = [{"w": jnp.eye(4, dtype=dtype), "table": jnp.full(64, scale if k == 2 else 0.01, dtype)}
            for k in range(5)]

  def deep(blocks, x):
    for b in blocks:
      t = b["table"].astype(jnp.float32)
      x = x @ b["w"].astype(jnp.float32) + (t - jax.lax.stop_gradient(t)).mean()   # adds 0
    return (x ** 2).sum()
  r = grads(deep, blocks, jnp.ones(4))
  norms = [layer.grad_norm for layer in r.layers]
  assert max(norms) / min(norms) < 10
  assert [layer.flag for layer in r.layers] == [None, None, "vanishing", None, None]
  assert "is lost" in r.layers[2].why and "rounding" in str(r)
  assert r.to_dict()["layers"][2]["why"] == r.layers[2].why


def test_named_scope_layers_in_program_order_with_vanishing_flagged():
  nn = pytest.importorskip("flax.linen")
  eye3 = lambda key, shape, dtype=jnp.float32: 3.0 * jnp.eye(*shape, dtype=dtype)

  class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
      return jnp.tanh(nn.Dense(4, name="proj", kernel_init=eye3)(x))   # ~30x less per block

  class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
      for name in ("stem", "body", "head"):     # the params sort body, head, stem
        x = Block(name=name)(x)
      return x.sum()
  net = Net()
  params = net.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
  r = grads(lambda p, x: net.apply(p, x), params, jnp.ones((1, 4)))
  assert [layer.name for layer in r.layers] == ["Net/stem", "Net/body", "Net/head"]
  assert [layer.flag for layer in r.layers] == ["vanishing", "vanishing", None]
  norms = {p: (g, w) for p, g, w in r.leaves}
  stem = [norms[f"['params']['stem']['proj']['{k}']"] for k in ("kernel", "bias")]
  assert r.layers[0].grad_norm == pytest.approx(sum(g * g for g, _ in stem) ** 0.5)
  assert r.layers[0].param_norm == pytest.approx(6.0)    # ‖3 I₄‖, the bias zero

  @jax.jit
  def scoped(p, x):
    for name in ("up", "down"):
      with jax.named_scope(name):
        x = jnp.tanh(x @ p[name])
    return x.sum()
  r = grads(scoped, {"up": 3.0 * jnp.eye(3), "down": 3.0 * jnp.eye(3)}, jnp.ones(3))
  assert [(layer.name, layer.flag) for layer in r.layers] == [("up", "vanishing"), ("down", None)]


def test_nnx_variables_group_into_their_layers():
  nnx = pytest.importorskip("flax.nnx")

  class Stack(nnx.Module):
    def __init__(self, rngs):
      self.layers = nnx.List([nnx.Linear(3, 3, rngs=rngs) for _ in range(3)])

    def __call__(self, x):
      for layer in self.layers:
        x = jnp.tanh(layer(x))
      return x.sum()
  graphdef, state = nnx.split(Stack(nnx.Rngs(0)))
  r = grads(lambda s, x: nnx.merge(graphdef, s)(x), state, jnp.ones((2, 3)))
  assert [layer.name for layer in r.layers] == [f"['layers'][{i}]" for i in range(3)]


def test_equinox_paths():
  eqx = pytest.importorskip("equinox")

  class Model(eqx.Module):
    body: eqx.nn.Linear
    head: eqx.nn.Linear

    def __call__(self, x):
      return self.body(x).sum()
  m = Model(eqx.nn.Linear(3, 3, key=jax.random.PRNGKey(0)),
            eqx.nn.Linear(3, 1, key=jax.random.PRNGKey(1)))
  r = grads(lambda m, x: m(x), m, jnp.ones(3))
  assert {(z.path, z.reason) for z in r.zero} == {(".head.weight", "unused"),
                                                  (".head.bias", "unused")}
  mlp = eqx.nn.MLP(3, 1, 4, 2, key=jax.random.PRNGKey(0))   # holds jax.nn.relu, no array
  r = grads(lambda m, x: jax.vmap(m)(x).sum(), mlp, jnp.ones((2, 3)))
  assert [layer.name for layer in r.layers] == [f".layers[{i}]" for i in range(3)]


def test_flax_linen_and_nnx_paths():
  nn = pytest.importorskip("flax.linen")
  from flax import nnx

  class Frozen(nn.Module):
    @nn.compact
    def __call__(self, x):
      h = nn.Dense(4, name="encoder")(x)
      return nn.Dense(1, name="head")(jax.lax.stop_gradient(h)).sum()  # frozen
  f = Frozen()
  params = f.init(jax.random.PRNGKey(0), jnp.ones((2, 3)))
  r = grads(lambda p, x: f.apply(p, x), params, jnp.ones((2, 3)))
  assert {(z.path, z.reason, z.source) for z in r.zero} == {
      (f"['params']['encoder']['{k}']", "stopped", line_of("frozen")) for k in ("kernel", "bias")}

  class Two(nnx.Module):
    def __init__(self, rngs):
      self.a, self.b = nnx.Linear(3, 3, rngs=rngs), nnx.Linear(3, 3, rngs=rngs)

    def __call__(self, x):
      return self.a(x).sum()
  graphdef, state = nnx.split(Two(nnx.Rngs(0)))
  r = grads(lambda s, x: nnx.merge(graphdef, s)(x), state, jnp.ones((2, 3)))
  assert {z.path for z in r.zero} == {"['b']['kernel'].value", "['b']['bias'].value"}


def test_jitted_with_static_argument_is_healthy():
  @functools.partial(jax.jit, static_argnums=1)
  def loss(w, n):
    return (w ** n).sum()
  r = grads(loss, jnp.ones(3), 2)
  assert r.healthy and r.leaves[0][1] == pytest.approx(2 * 3 ** 0.5)


def test_bad_inputs_say_what_is_wrong():
  with pytest.raises(TypeError, match="must return a real scalar.*float32\\[3\\]"):
    grads(lambda w: w * 2, jnp.ones(3))
  with pytest.raises(TypeError, match="no floating-point array"):
    grads(lambda w: 1.0, {"a": jnp.ones(3, jnp.int32)})


# ------------------------------------------------------------------ vv.watch over training

def test_watch_names_first_zero_stuck_and_nonfinite_steps():
  optax = pytest.importorskip("optax")
  from jupyter_vjpviz.api.watch import watch
  opt = optax.sgd(0.1)

  @jax.jit
  def step(params, state, t):
    def loss(p):
      alive = jnp.where(t < 3, (p["gate"] ** 2).sum(), 0.0)   # gate stops mattering at 3
      blowup = (p["w"] * jnp.where(t == 5, jnp.nan, 0.0)).sum()   # a NaN gradient at step 5
      return alive + (p["w"] ** 2).sum() + blowup
    value, g = jax.value_and_grad(loss)(params)
    updates, state = opt.update(g, state)
    return optax.apply_updates(params, updates), state, value
  params = {"gate": jnp.ones(3), "w": jnp.ones(2)}
  state = opt.init(params)
  w = watch(step)
  for t in range(6):
    params, state, _ = w(params, state, jnp.int32(t))
  assert w.paths == ["['gate']", "['w']"] and w.norms.shape == (6, 2)
  events = {e.path: e for e in w.events()}
  assert (events["['gate']"].first_zero, events["['gate']"].stayed_zero) == (3, 3)
  assert events["['gate']"].first_nonfinite is None
  assert events["['w']"].first_nonfinite == 5 and events["['w']"].first_zero is None
  text = str(w)
  assert "step 3: ['gate']: no gradient, for 3+ steps" in text
  assert "step 5: ['w']: non-finite" in text
  assert json.loads(json.dumps(w.to_dict()))["events"]


def test_watch_equinox_and_flax_steps_keep_their_outputs_and_paths():
  eqx, optax = pytest.importorskip("equinox"), pytest.importorskip("optax")
  from flax import nnx
  from jupyter_vjpviz.api.watch import watch
  model = eqx.nn.MLP(3, 1, 8, 1, key=jax.random.PRNGKey(0))
  opt = optax.adam(1e-2)
  state = opt.init(eqx.filter(model, eqx.is_array))
  x, y = jnp.ones((4, 3)), jnp.zeros((4, 1))

  @eqx.filter_jit
  def step(model, state):
    loss, g = eqx.filter_value_and_grad(lambda m: ((jax.vmap(m)(x) - y) ** 2).mean())(model)
    updates, state = opt.update(g, state, model)
    return eqx.apply_updates(model, updates), state, loss
  plain = step(model, state)
  w = watch(step)
  got = w(model, state)
  assert float(got[2]) == pytest.approx(float(plain[2]))
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(plain)
  assert w.paths[:2] == [".layers[0].weight", ".layers[0].bias"]

  class Net(nnx.Module):
    def __init__(self, rngs):
      self.dense = nnx.Linear(3, 1, rngs=rngs)

    def __call__(self, x):
      return self.dense(x)
  graphdef, params = nnx.split(Net(nnx.Rngs(0)))

  @jax.jit
  def nnx_step(params):
    loss, g = jax.value_and_grad(lambda p: (nnx.merge(graphdef, p)(x) ** 2).mean())(params)
    return jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g), loss
  w = watch(nnx_step)
  w(params)
  assert sorted(w.paths) == ["['dense']['bias'].value", "['dense']['kernel'].value"]


def test_watch_an_nnx_jit_step_updates_its_live_modules_in_place():
  optax = pytest.importorskip("optax")
  nnx = pytest.importorskip("flax.nnx")
  from jupyter_vjpviz.api.watch import watch

  class MLP(nnx.Module):
    def __init__(self, rngs):
      self.layers = nnx.List([nnx.Linear(3, 3, rngs=rngs) for _ in range(3)])

    def __call__(self, x):
      for layer in self.layers:
        x = jnp.tanh(layer(x))
      return x
  x, y = jax.random.normal(jax.random.PRNGKey(1), (8, 3)), jnp.zeros((8, 3))
  loss = lambda m: ((m(x) - y) ** 2).mean()

  @nnx.jit(donate_argnums=(0, 1))
  def step(model, optimizer):
    value, g = nnx.value_and_grad(loss)(model)
    optimizer.update(model, g)
    return value

  def trained(run):
    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    first = nnx.grad(loss)(model)
    values = [float(run(model, optimizer)) for _ in range(3)]
    return model, optimizer, values, first
  model, optimizer, values, first = trained(step)
  w = watch(step)
  w_model, w_optimizer, w_values, _ = trained(w)
  assert w_values == values and int(w_optimizer.step[...]) == 3
  same = lambda a, b: jax.tree_util.tree_all(jax.tree_util.tree_map(
      lambda p, q: bool(jnp.array_equal(p, q)), a, b))
  assert same(nnx.state(w_model), nnx.state(model))          # updated in place, as unwatched
  assert same(nnx.state(w_optimizer), nnx.state(optimizer))  # adam's state too
  assert w.paths == [f".layers[{i}].{k}" for i in range(3) for k in ("bias", "kernel")]
  assert w.norms.shape == (3, 6) and w.norms[0, 5] == pytest.approx(
      float(jnp.linalg.norm(first["layers"][2]["kernel"][...])), rel=1e-5)


def test_watch_keeps_a_jitted_steps_static_arguments():
  from jupyter_vjpviz.api.watch import watch

  @functools.partial(jax.jit, static_argnums=1)
  def step(w, power):
    return w - 0.1 * jax.grad(lambda w: (w ** power).sum())(w)
  w = watch(step)
  out = w(jnp.ones(2), 3)
  assert out.tolist() == pytest.approx([0.7, 0.7]) and w.norms[0, 0] == pytest.approx(18 ** 0.5)
  for _ in range(40):    # past one batch of steps sent to the host together, in order
    out = w(out, 2)
  norms = w.norms[:, 0]
  assert norms.shape == (41,) and all(a > b for a, b in zip(norms[1:], norms[2:]))


def test_public_names_and_the_line_magic():
  import jupyter_vjpviz as vv
  from IPython.core.interactiveshell import InteractiveShell
  from jupyter_vjpviz.deliver.magics import VjpvizMagics
  from jupyter_vjpviz.api.watch import watch
  assert vv.grads is grads and vv.watch is watch
  shell = InteractiveShell.instance()
  shell.user_ns.update(loss=lambda p, x: (p["used"] * x).sum(), x=jnp.ones(2),
                       p={"used": jnp.ones(2), "spare": jnp.ones(2)})
  report = VjpvizMagics(shell=shell).vjpviz("grads loss(p, x)")
  assert [(z.path, z.reason) for z in report.zero] == [("['spare']", "unused")]


def test_one_array_held_twice_is_two_leaves_each_with_its_gradient():
  w = jnp.ones((2, 2))
  r = grads(lambda ws, x: jnp.tanh(x @ ws[0] @ ws[1]).sum(), [w, w], jnp.ones(2))
  assert r.healthy and [p for p, g, _ in r.leaves if g > 0] == ["[0]", "[1]"]


def grads_module():
  """The module ``jupyter_vjpviz.api.grads`` (the package's ``grads`` is the function)."""
  return sys.modules["jupyter_vjpviz.api.grads"]


def _request(op: str, **args) -> dict:
  return {"v": 1, "type": "request", "request_id": f"r-{op}", "op": op, "args": args}


def test_the_panel_message_validates_and_its_graph_is_asked_for_by_the_reports_id(report):
  """The GradsMessage a panel gets (schema), and the view ops on the report's graph: the
  default view centred on the first cut, a box opened, a search."""
  from kernel_helpers import REPLY, validator
  from jupyter_vjpviz.deliver import comm
  from jupyter_vjpviz.deliver.ops.grads import grads_message
  message = json.loads(json.dumps({"v": 1, "type": "grads", "grads": grads_message(report)}))
  validator("GradsMessage").validate(message)
  sent = message["grads"]
  assert sent["id"] == report.id and sent["headline"].startswith("vjpviz grads of mixed:")
  assert {z["path"]: z["reason"] for z in sent["zero"]} == {z.path: z.reason for z in report.zero}
  assert "leaves" not in sent and len(sent["graph"]["nodes"]) == len(report.graph.nodes)
  assert report in grads_module().reports()
  view = comm.handle(_request("view", report_id=report.id))
  REPLY.validate(view)
  assert view["ok"] and view["result"]["failed_node"] == report.node is not None
  assert view["result"]["svg"].startswith("<svg")
  found = comm.handle(_request("search", report_id=report.id, query="tanh"))
  assert found["ok"] and found["result"]["matches"]
  kept = comm.handle(_request("grads"))
  validator("GradsResult").validate(kept["result"])
  assert report.id in [r["id"] for r in kept["result"]["reports"]]
  gone = comm.handle(_request("view", report_id="g0"))
  assert not gone["ok"] and "no diagnosis 'g0'" in gone["error"]


def test_the_reports_kept_are_bounded_and_a_listener_hears_each():
  kept = grads_module()
  heard = []
  kept.add_listener(heard.append)
  try:
    made = [grads(lambda w: (w * k).sum(), jnp.ones(2)) for k in range(kept.KEPT + 2)]
  finally:
    kept.remove_listener(heard.append)
  assert heard == made and len({r.id for r in made}) == len(made)
  assert kept.reports() == made[2:]


def test_a_report_made_in_a_kernel_reaches_a_listening_panel(panel):
  """A real kernel: ``%vjpviz grads`` with a panel listening pushes the report and its graph,
  drawn; the panel's view request by the report's id is answered."""
  from kernel_helpers import SETUP, validator
  assert panel.execute(SETUP)["status"] == "ok"
  before = len(panel.opened())
  cell = ("p = {'used': jnp.ones(3), 'frozen': jnp.ones(3)}\n"
          "loss = lambda p: (p['used'] * 2 + jax.lax.stop_gradient(p['frozen'])).sum()\n"
          "%vjpviz grads loss(p)\n")
  assert panel.execute(cell)["status"] == "ok"
  pushed = [m["content"]["data"] for m in panel.opened()[before:]
            if m["content"]["data"]["type"] == "grads"]
  assert len(pushed) == 1
  validator("GradsMessage").validate(pushed[0])
  sent = pushed[0]["grads"]
  assert [(z["path"], z["reason"]) for z in sent["zero"]] == [("['frozen']", "stopped")]
  assert pushed[0]["view"]["svg"].startswith("<svg")
  reply = panel.request(panel.control, _request("view", report_id=sent["id"]))
  assert reply["ok"] and reply["result"]["failed_node"] == sent["zero"][0]["node"]


@pytest.mark.parametrize("jit", [False, True])
def test_a_product_with_an_all_zero_factor_names_that_factor(jit):
  """LoRA as initialised (B = 0: A gets none), a ReZero gate at 0 (scaled and transposed on
  the way), and a batch of zeros: each ``zero_factor`` at the product, naming the input."""
  def loss(p, x, mask):
    out = jnp.tanh(x @ p["w"] + (x @ p["a"]) @ p["b"]).sum()  # lora
    out += ((2 * p["alpha"].T).T * jnp.tanh(x @ p["f"])).sum()  # rezero
    return out + jnp.tanh(mask @ p["m"]).sum()  # data
  fn = jax.jit(loss) if jit else loss
  p = {"w": jnp.ones((3, 3)), "a": jnp.ones((3, 2)), "b": jnp.zeros((2, 3)),
       "alpha": jnp.zeros((1, 3)), "f": jnp.ones((3, 3)), "m": jnp.ones((3, 3))}
  r = grads(fn, p, jnp.ones((2, 3)), jnp.zeros((2, 3)))
  found = {z.path: (z.reason, z.factor, z.op, z.source) for z in r.zero}
  assert found == {
      "['a']": ("zero_factor", "['b']", "dot_general", line_of("lora")),
      "['f']": ("zero_factor", "['alpha']", "mul", line_of("rezero")),
      "['m']": ("zero_factor", "args[2]", "dot_general", line_of("data"))}
  assert "['a']: zero_factor at dot_general" in str(r) and "; ['b'] is all zero" in str(r)


def test_a_dead_relu_before_a_product_is_still_dead_not_a_zero_factor():
  r = grads(lambda p, x: (jax.nn.relu(x @ p["w1"] - 100.0) @ p["w2"]).sum(),  # relu
            {"w1": jnp.ones((3, 3)), "w2": jnp.ones((3, 1))}, jnp.ones((2, 3)))
  assert {(z.path, z.reason, z.op, z.factor) for z in r.zero} == {
      ("['w1']", "dead", "relu", None), ("['w2']", "dead", "relu", None)}


# ------------------------------------- reasons traced to what the user wrote (issue 37)

def _reasons(report):
  return {z.path: (z.reason, int(z.source.rsplit(":", 1)[1]) if z.source else None)
          for z in report.zero}


def _line(fn, text):
  import inspect
  lines, first = inspect.getsourcelines(fn)
  return first + next(i for i, l in enumerate(lines) if text in l)


def _dead_where_then_attention(p, x):
  h = jnp.where(x @ p["w"] - 100.0 > 0, x @ p["w"] - 100.0, 0.0)
  q, k = h @ p["wq"], h @ p["wk"]
  return (jax.nn.softmax(q @ k.T) @ h).sum() + (h @ p["v"]).sum()


def test_a_dead_where_before_attention_is_dead_at_the_where_for_every_projection():
  p = {k: jnp.ones((4, 4)) for k in ("w", "wq", "wk", "v")}
  report = grads(_dead_where_then_attention, p, jnp.ones((3, 4)))
  line = _line(_dead_where_then_attention, "jnp.where")
  assert _reasons(report) == {f"['{k}']": ("dead", line) for k in ("w", "wq", "wk", "v")}


def _dead_then_checkpoint(p, x):
  h = jax.nn.relu(x @ p["w"] - 100.0)
  h = jax.checkpoint(lambda h: h + jnp.tanh(h @ p["v"]))(h)
  return h.sum()


def test_a_zero_factor_inside_a_checkpoint_is_traced_out_to_the_dead_relu():
  p = {"w": jnp.ones((4, 4)), "v": jnp.ones((4, 4))}
  report = grads(_dead_then_checkpoint, p, jnp.ones((3, 4)))
  line = _line(_dead_then_checkpoint, "relu")
  assert _reasons(report) == {"['w']": ("dead", line), "['v']": ("dead", line)}


def _saturated_then_norm(p, x):
  h = jax.nn.sigmoid(x @ p["w"] + 100.0)
  h = (h - h.mean(-1, keepdims=True)) * p["g"]
  return h.sum() + (x @ p["u"]).sum()


def test_features_made_alike_by_a_saturated_activation_are_saturated_there():
  p = {"w": jnp.ones((4, 4)), "g": jnp.ones(4), "u": jnp.ones((4, 2))}
  report = grads(_saturated_then_norm, p, jnp.ones((3, 4)))
  line = _line(_saturated_then_norm, "sigmoid")
  assert _reasons(report)["['g']"] == ("saturated", line)


def _stack(first):
  """Three tanh layers after a first block ``first(w, x)`` whose output barely counts."""
  def loss(p, x):
    h = first(p["blocks"][0]["w"], x) * 1e-4 + 0.5
    for b in p["blocks"][1:]:
      h = jnp.tanh(h @ b["w"]) * 3
    return jax.nn.logsumexp(h, -1).mean()
  return loss


def test_an_embedding_tables_sparse_gradient_is_no_vanishing_block():
  """Rows not gathered get no gradient by nature: the table's norm is no evidence. The
  same block read whole (a dense layer) is flagged: the flag is the table's to lose."""
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  ids = jax.random.randint(keys[0], (4, 6), 0, 16)
  blocks = lambda first: {"blocks": [{"w": jax.random.normal(keys[0], (16, 16))}] + [
      {"w": jax.random.normal(k, (16, 16)) * 0.25} for k in keys[1:]]}
  embedded = grads(_stack(lambda w, ids: w[ids].mean(1)), blocks(0), ids)
  dense = grads(_stack(lambda w, x: x @ w), blocks(0), jax.nn.one_hot(ids[:, 0], 16))
  assert dense.layers[0].flag == "vanishing"
  assert embedded.layers[0].flag is None and embedded.healthy


def test_equinox_blocks_are_its_layers_by_path_attention_among_them():
  """equinox names scopes by class: two ``eqx.nn.Linear`` layers are two blocks, not one,
  and the attention's projections are a block of their own, in the order they are read."""
  import equinox as eqx

  class Net(eqx.Module):
    enc: eqx.nn.Linear
    attn: eqx.nn.MultiheadAttention
    dec: eqx.nn.Linear

    def __call__(self, x):
      h = jax.vmap(self.enc)(x)
      return jax.vmap(self.dec)(self.attn(h, h, h)).sum()
  k = jax.random.split(jax.random.PRNGKey(0), 3)
  net = Net(eqx.nn.Linear(4, 8, key=k[0]), eqx.nn.MultiheadAttention(2, 8, inference=True, key=k[1]),
            eqx.nn.Linear(8, 1, key=k[2]))
  report = grads(lambda m, x: m(x), net, jnp.ones((3, 4)))
  assert [layer.name for layer in report.layers] == [".enc", ".attn", ".dec"]


def _dead_then_residual_attention(p, x):
  h = jax.nn.relu(x @ p["w"] - 100.0)
  h = h + jax.nn.softmax((h @ p["wq"]) @ (h @ p["wk"]).T) @ (h @ p["wv"])
  return jnp.tanh(h @ p["out"]).sum()


def test_a_residual_sum_of_zeros_is_traced_to_the_dead_relu():
  p = {k: jnp.ones((4, 4)) for k in ("w", "wq", "wk", "wv", "out")}
  report = grads(_dead_then_residual_attention, p, jnp.ones((3, 4)))
  line = _line(_dead_then_residual_attention, "relu")
  assert _reasons(report)["['out']"] == ("dead", line)


def _nonfinite_truth(loss, *args):
  """Per leaf of jax.grad's own gradient: (NaN count, Inf count)."""
  return [(int(np.isnan(g).sum()), int(np.isinf(g).sum()))
          for g in jax.tree_util.tree_leaves(jax.grad(loss)(*args))]


def test_a_nan_gradient_is_reported_first_and_is_never_healthy():
  loss = lambda w, x: jnp.mean(jnp.sqrt(jnp.sum((x @ w) ** 2, axis=1)))   # the issue's
  w, x = jnp.ones((3, 2)), jnp.ones((4, 3)).at[1].set(0.0)
  r = grads(loss, w, x)
  assert r.judged and not r.healthy
  assert [(n.nan, n.inf) for n in r.nonfinite] == _nonfinite_truth(loss, w, x) == [(6, 0)]
  assert r.nonfinite[0].first == (0, 0)
  head, first, cause = str(r).splitlines()[:3]
  assert head == "vjpviz grads of <lambda>: 1 leaf with a NaN/Inf gradient"
  assert "6 NaN of 6, first at [0, 0]" in first and "vv.nans(<lambda>" in cause
  assert cause.startswith(f"  cause: made non-finite at sqrt ({HERE}:")   # as vv.nans's culprit


def test_an_inf_gradient_names_its_first_index():
  w = jnp.array([1.0, 0.0, 4.0])
  r = grads(lambda w: jnp.sqrt(w).sum(), w)
  assert [(n.nan, n.inf, n.first) for n in r.nonfinite] == [(0, 1, (1,))]
  assert _nonfinite_truth(lambda w: jnp.sqrt(w).sum(), w) == [(0, 1)] and not r.healthy


def test_a_flax_model_whose_every_leaf_is_nan_is_not_called_dead():
  nn = pytest.importorskip("flax.linen")
  model = nn.Dense(3)
  x = jnp.zeros((2, 4))
  params = model.init(jax.random.key(0), x)
  loss = lambda p, x: jnp.sqrt(jnp.sum(model.apply(p, x) ** 2))   # at 0: no finite derivative
  r = grads(loss, params, x)
  truth = _nonfinite_truth(loss, params, x)
  assert all(n + i for n, i in truth) and len(r.nonfinite) == len(truth) == 2
  assert not r.partly_zero and not r.zero and not any(layer.flag for layer in r.layers)
  assert str(r).splitlines()[0].endswith("2 leaves with a NaN/Inf gradient")


def test_print_gives_the_reports_text_and_repr_is_short(report):
  assert str(report).startswith("vjpviz grads of") and "\n" in str(report)
  assert repr(report).startswith("<GradReport") and len(repr(report)) < 120


HEADS = jnp.array([1.0, 0.0])   # a leftover head mask: head 1 off


def _masked_heads(p, x):
  hs = jnp.stack([jax.nn.softmax(x @ p["q0"] @ (x @ p["k0"]).T) @ x,
                  jax.nn.softmax(x @ p["q1"] @ (x @ p["k1"]).T) @ x])
  return (hs * HEADS[:, None, None]).sum()   # heads


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_a_head_mask_is_a_zero_factor_not_a_dead_unit_nor_an_underflow(dtype):
  x = jax.random.normal(jax.random.key(0), (4, 4), dtype)
  p = {k: jax.random.normal(jax.random.key(i), (4, 4), dtype) / 2
       for i, k in enumerate(("q0", "k0", "q1", "k1"))}
  r = grads(_masked_heads, p, x)
  zero = {leaf for leaf, g in jax.grad(_masked_heads)(p, x).items()
          if not np.any(np.asarray(g, np.float32))}
  assert zero == {"k1", "q1"}
  assert [(z.path, z.reason, z.op, z.source) for z in r.zero] == [
      (f"['{k}']", "zero_factor", "mul", line_of("heads")) for k in ("k1", "q1")]


def _dead_in_a_scan(p, x):
  h, _ = jax.lax.scan(lambda c, _: (jax.nn.relu(c @ p["w"] + p["b"]), None), x, None, length=2)
  return h.astype(jnp.float32).sum() + (x @ p["v"]).astype(jnp.float32).sum()


def test_a_dead_relu_in_a_bfloat16_scan_is_dead_not_underflow():
  dt = jnp.bfloat16
  p = {"w": jnp.ones((4, 4), dt), "b": jnp.full(4, -100.0, dt), "v": jnp.ones((4, 1), dt)}
  r = grads(_dead_in_a_scan, p, jnp.ones((3, 4), dt))
  assert {(z.path, z.reason) for z in r.zero} == {("['b']", "dead"), ("['w']", "dead")}


def _partly_dead(p, x):
  h = jax.nn.relu(x @ p["w"] + p["b"])   # units die
  return (h @ p["w2"]).sum()


def test_dead_units_carry_the_line_of_the_mask_where_they_die():
  p = {"w": jnp.ones((4, 4)), "b": jnp.array([-100.0, 0.5, 0.5, -100.0]), "w2": jnp.ones((4, 1))}
  r = grads(_partly_dead, p, jnp.ones((3, 4)))
  assert [(q.path, q.units, q.fraction, q.op, q.source) for q in r.partly_zero] == [
      ("['b']", "entries", 0.5, "relu", line_of("units die")),
      ("['w']", "columns", 0.5, "relu", line_of("units die")),
      ("['w2']", "rows", 0.5, "relu", line_of("units die"))]
  assert "50% of columns get none (dead at relu, " in str(r) and f"{HERE.name}:" in str(r)


def test_a_block_cut_by_stop_gradient_is_its_zero_leaves_not_also_vanishing():
  def loss(p, x):
    with jax.named_scope("enc"):
      h = jnp.tanh(x @ p["enc"]["w"])
    h = jax.lax.stop_gradient(h)
    with jax.named_scope("dec"):
      return jnp.tanh(h @ p["dec"]["w"]).sum()
  p = {"enc": {"w": jnp.ones((3, 3)) / 3}, "dec": {"w": jnp.ones((3, 3)) / 3}}
  r = grads(loss, p, jnp.ones((2, 3)))
  assert [(z.path, z.reason) for z in r.zero] == [("['enc']['w']", "stopped")]
  assert [layer.name for layer in r.layers] == ["enc", "dec"]
  assert not any(layer.flag for layer in r.layers), r.layers
