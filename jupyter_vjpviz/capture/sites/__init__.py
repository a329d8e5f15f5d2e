"""JAX's check sites and the rules' wrappers: where a cotangent of the wrong type is seen.

The VJP entry points open a ``Session``; custom_vjp/custom_jvp rules, hijax primitives,
linear maps and the solves each record what JAX checks them against, as avals.
"""
