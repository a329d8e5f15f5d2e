"""Write the notebooks the browser tests drive (cell order matters to galata/vjpviz.ts's CELL)."""
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import frozen_net  # noqa: E402 - the frozen model the kernel test reports on too
import softclip  # noqa: E402 - the broken rule the kernel tests use too

DEFINE = softclip.SOURCE + """x = jnp.arange(20.0).reshape(4, 5) / 20
w = jnp.arange(15.0).reshape(5, 3) / 15"""

GRAD = f"g = {softclip.GRAD}\nprint('GRAD OK')"

COMPARE = '''ref = jax.grad(lambda x, w: jnp.tanh(x @ w).sum(), argnums=(0, 1))(x, w)
print("MATCH", all(bool(jnp.allclose(a, b)) for a, b in zip(g, ref)))'''

EVIL = '''def _evil(x):
    return x * 2
_evil.__name__ = _evil.__qualname__ = '<img src=x onerror="window.__vjpvizXss=1">'
evil = jax.custom_vjp(_evil)
evil.defvjp(lambda x: (x * 2, None), lambda res, g: (jnp.ones((2,)),))
jax.grad(lambda x: evil(x).sum())(jnp.ones(3))'''

BIG = '''@jax.custom_vjp
def big_rule(x):
    return jnp.sin(x)

def big_rule_bwd(x, g):
    return ((g * jnp.cos(x))[:, :-1],)

big_rule.defvjp(lambda x: (jnp.sin(x), x), big_rule_bwd)

def model(x):
    for i in range(700):          # 2,100 equations before the failing rule
        x = jnp.tanh(x) * 1.01 + 0.1
    return big_rule(x).sum()

jax.grad(model)(jnp.ones((4, 4)))'''

SMALL = '''import jax, jax.numpy as jnp

@jax.custom_vjp
def {name}(x, w):
    return jnp.tanh(x @ w)

def {name}_fwd(x, w):
    y = jnp.tanh(x @ w)
    return y, (x, w, y)

def {name}_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, (x.T @ gy).T

{name}.defvjp({name}_fwd, {name}_bwd)
x = jnp.arange(20.0).reshape(4, 5) / 20
w = jnp.arange(15.0).reshape(5, 3) / 15
jax.grad(lambda x, w: {name}(x, w).sum(), argnums=(0, 1))(x, w)'''

# One small notebook per independent test (each gets its own kernel):
# cell 0 loads vjpviz, cell 1 defines the rule and fails.
SMALL_NOTEBOOKS = {"nb_a": "rule_a", "nb_b": "rule_b", "restart": "rule_r",
                   "autooff": "rule_q", "copy": "rule_c", "dark": "rule_d"}

root = Path(sys.argv[1])
nb = new_notebook(cells=[new_code_cell(c) for c in
                         ("%load_ext vjpviz", DEFINE, GRAD, COMPARE, EVIL, BIG)])
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbformat.write(nb, root / "panel.ipynb")
# The Apply test changes its notebook and kernel: its own copy of the first cells.
apply_nb = new_notebook(cells=[new_code_cell(c) for c in ("%load_ext vjpviz", DEFINE, GRAD, COMPARE)])
apply_nb.metadata["kernelspec"] = nb.metadata["kernelspec"]
nbformat.write(apply_nb, root / "apply.ipynb")
# A notebook whose kernel never loads vjpviz: the panel's empty state.
empty = new_notebook(cells=[new_code_cell("1 + 1")])
empty.metadata["kernelspec"] = nb.metadata["kernelspec"]
nbformat.write(empty, root / "empty.ipynb")
# Notebook 7 (ui-tests/galata/notebook7.spec.ts): load, define softclip, the failing grad.
nb7 = new_notebook(cells=[new_code_cell(c) for c in ("%load_ext vjpviz", DEFINE, GRAD)])
nb7.metadata["kernelspec"] = nb.metadata["kernelspec"]
nbformat.write(nb7, root / "nb7.ipynb")
# vv.grads in the panel: a loss whose frozen leaf gets no gradient.
GRADS = '''import jax, jax.numpy as jnp
p = {"used": jnp.ones(3), "frozen": jnp.ones(3)}
loss = lambda p: (jnp.tanh(p["used"]) + jax.lax.stop_gradient(p["frozen"])).sum()
%vjpviz grads loss(p)'''
grads_nb = new_notebook(cells=[new_code_cell("%load_ext vjpviz"), new_code_cell(GRADS)])
grads_nb.metadata["kernelspec"] = nb.metadata["kernelspec"]
nbformat.write(grads_nb, root / "grads.ipynb")
for stem, name in SMALL_NOTEBOOKS.items():
  small = new_notebook(cells=[new_code_cell("%load_ext vjpviz"), new_code_cell(SMALL.format(name=name))])
  small.metadata["kernelspec"] = nb.metadata["kernelspec"]
  nbformat.write(small, root / f"{stem}.ipynb")
# Issue 41 (ui-tests/galata/report.spec.ts): a flax model whose body is frozen and whose
# head is unused through vv.grads, a watched optax loop that goes non-finite, a failing rule,
# a rule with logs.
FROZEN = frozen_net.SOURCE
WATCHED = '''import optax

opt = optax.sgd(1.0)   # too large: the loss grows tenfold a step

@jax.jit
def train_step(p, s):
    g = jax.grad(lambda p: net.apply(p, x) ** 2)(p)
    u, s = opt.update(g, s)
    return optax.apply_updates(p, u), s

step = vv.watch(train_step)
p, s = params, opt.init(params)
for _ in range(16):
    p, s = step(p, s)
print(step)'''
# A rule with logs (defvjp_with_logs) asked for with jax.grad(..., with_logs=True): its
# bfloat16 cotangent is a warning whose diagnosis lists the logs; the cell prints what JAX
# returned ("LOG name = values", as vjpviz formats numbers) for the test to compare.
LOGGED = '''import jax, jax.numpy as jnp, numpy as np

@jax.custom_vjp
def logged_sin(x):
    return jnp.sin(x)

def logged_sin_fwd(x):
    return jnp.sin(x), x

def logged_sin_bwd(x, g):   # logs its cotangent's norm and the cosines; returns bfloat16
    logs = {"gnorm": jnp.abs(g).sum(), "stats": {"cos": jnp.cos(x)}}
    return ((g * jnp.cos(x)).astype(jnp.bfloat16),), logs

logged_sin.defvjp_with_logs(logged_sin_fwd, logged_sin_bwd)
g, logs = jax.grad(lambda x: logged_sin(x).sum(), with_logs=True)(jnp.arange(3.0))
for path, leaf in jax.tree_util.tree_leaves_with_path(logs):
    name = path[0].key + jax.tree_util.keystr(path[1:])
    print(f"LOG {name} =", ", ".join(f"{float(v):.4g}" for v in np.ravel(leaf)))'''
report_nb = new_notebook(cells=[new_code_cell(c) for c in (
    "%load_ext vjpviz", FROZEN, WATCHED, SMALL.format(name="rule_41"), LOGGED)])
report_nb.metadata["kernelspec"] = nb.metadata["kernelspec"]
nbformat.write(report_nb, root / "report.ipynb")
# Issue 49 (ui-tests/galata/flow.spec.ts): a plain-JAX stack of four tanh layers watched
# with flow=True; at step 5 the third layer's backward turns 0 * inf into NaN (its forward
# is finite): the first non-finite cotangent is the second block's output's, made in the
# third.
FLOW = '''import jax, jax.numpy as jnp
import jupyter_vjpviz as vv

k = jax.random.split(jax.random.key(0), 5)
params = {"layers": [{"w": jax.random.normal(k[i], (8, 8)) / 3, "b": jnp.zeros(8)}
                     for i in range(4)]}
x = jax.random.normal(k[4], (32, 8))

def forward(params, h, t):
    for i, p in enumerate(params["layers"]):
        h = jnp.tanh(h @ p["w"] + p["b"])
        if i == 2:   # at step 5: sqrt at 0, its pullback 0 * inf
            s = jnp.where(t == 5, 0.0, 1.0)
            h = h + jnp.sqrt(s + 0.0 * h) - jnp.sqrt(s)
    return h

@jax.jit
def train_step(params, t):
    g = jax.grad(lambda p: (forward(p, x, t) ** 2).mean())(params)
    return jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g)

step = vv.watch(train_step, flow=True)
for t in range(8):
    params = step(params, t)
print(step)'''
flow_nb = new_notebook(cells=[new_code_cell(c) for c in ("%load_ext vjpviz", FLOW)])
flow_nb.metadata["kernelspec"] = nb.metadata["kernelspec"]
nbformat.write(flow_nb, root / "flow.ipynb")
