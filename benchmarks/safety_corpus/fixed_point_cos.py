"""A damped fixed point x = cos(w x) by while_loop with a tolerance, custom_vjp by implicit
differentiation; the bwd returns w's cotangent in float16 (JAX lets it through)."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def solve(w):
  def cond(c):
    i, x, x_new = c
    return jnp.max(jnp.abs(x - x_new)) > 1e-5

  def body(c):
    i, _, x = c
    return i + 1, x, jnp.cos(w * x)

  return jax.lax.while_loop(cond, body, (0, jnp.zeros_like(w), jnp.cos(w * 0)))[2]


def solve_fwd(w):
  x = solve(w)
  return x, (w, x)


def solve_bwd(res, g):
  w, x = res
  s = -jnp.sin(w * x)
  return ((g * s * x / (1 - s * w)).astype(jnp.float16),)   # the bug: float16


solve.defvjp(solve_fwd, solve_bwd)
w = jnp.linspace(0.1, 0.5, 4)
print("x* =", solve(w))
print(jax.grad(lambda w: solve(w).sum())(w))
