"""The flax model whose body is frozen (``stop_gradient``) and whose head is unused,
reported through ``vv.grads``: a notebook's second cell in the kernel test
(test_notebook.py) and in the browser test (ui-tests/make_notebook.py's report.ipynb),
both of which expect the cut at ``Cell In[2], line 7``."""

SOURCE = '''import jax, jax.numpy as jnp, flax.linen as nn
import jupyter_vjpviz as vv

class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = jax.lax.stop_gradient(nn.Dense(4, name="body")(x))
        _ = nn.Dense(2, name="head")(h)
        return nn.Dense(1, name="out")(h).sum()

x = jnp.ones((2, 3))
net = Net()
params = net.init(jax.random.key(0), x)
report = vv.grads(lambda p: net.apply(p, x), params)
report'''
