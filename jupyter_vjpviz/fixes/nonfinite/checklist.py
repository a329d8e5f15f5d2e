"""JAX's own list of the primitives that can produce a NaN (checkify's), each answered:
by the families of ``REGISTRY`` that rewrite it (``covered``; the sums and products only
carry a non-finite operand, named where it was made, and are the overflow family's where
finite values overflow), or here, with why no stable rewrite exists for it. A test holds
the two together against the list of the JAX that is installed, so a primitive JAX adds
is a failing test, not a silent gap."""
from __future__ import annotations

_ONLY_NONFINITE = "non-finite only at a non-finite operand: named where that was made"
_POLES = ("infinite at its poles, where the loss itself is infinite: no rewrite keeps a "
          "loss that is not finite")
_SPECIAL = ("a special function whose derivative is not finite only at its own poles or "
            "outside its domain, where the loss is not finite either")

NO_STABLE_REWRITE = {
    "cos": _ONLY_NONFINITE, "sin": _ONLY_NONFINITE, "cospi": _ONLY_NONFINITE,
    "sinpi": _ONLY_NONFINITE, "tanh": _ONLY_NONFINITE, "atan": _ONLY_NONFINITE,
    "atanpi": _ONLY_NONFINITE, "asinh": _ONLY_NONFINITE, "erf": _ONLY_NONFINITE,
    "erfc": _ONLY_NONFINITE, "bessel_i0e": _ONLY_NONFINITE, "bessel_i1e": _ONLY_NONFINITE,
    "tan": _POLES, "tanpi": _POLES, "lgamma": _POLES, "digamma": _POLES,
    "igamma": _SPECIAL, "igammac": _SPECIAL, "igamma_grad_a": _SPECIAL,
    "regularized_incomplete_beta": _SPECIAL,
    "cumlogsumexp": "already computed in log space; NaN only where every term is -inf",
    "rem": ("rem(x, 0) is NaN in the forward and its derivative w.r.t. the divisor is "
            "-round(x/y): no value of the loss to keep"),
    "rng_uniform": "random bits, not differentiated",
}
"""Primitive name -> why no family rewrites it."""

def covered(registry) -> dict[str, list[str]]:
  """Primitive name -> the families that rewrite it."""
  found: dict[str, list[str]] = {}
  for family in registry:
    for name in family.primitives:
      found.setdefault(name, []).append(family.name)
  return found
