"""The capability matrix's programs: every rule API x transformation x context x defect,
each written as a module of its own (so every line the diagnosis names is a real line).

A cell's module holds the user's rule ``f(x, w) = sin(x) * w`` (x: f32[3,4], w: f32[4]),
written through one rule API with one defect in the cotangent (or tangent) it makes for
``w``, by construction; its primal ``reference`` written plainly; ``model``/``model_ref``
calling each in one context (eager, jit, scan, while_loop, cond, checkpoint); and
``run``/``run_ref`` applying one transformation. The truth: plain JAX on ``run`` (raises or
not), the same with the rule left correct (a transformation JAX refuses for the rule API
whatever the rule: not a rule error), and ``run_ref`` as the answer a fixed rule must give.

The transformations are JAX's public differentiation API, read from ``jax`` itself
(``TRANSFORMS`` keyed by the name; ``missing_transforms`` says which public ones the
matrix does not write), each also under ``vmap``.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap

import jax

DEFECTS = ("shape", "dtype", "structure", "raises")
CONTEXTS = ("eager", "jit", "scan", "while_loop", "cond", "checkpoint")

# ------------------------------------------------------------------ the rule APIs
# Each rule computes the cotangents (tangent) of f(x, w) = sin(x) * w in locals and
# returns them; ``{dw}`` / ``{ret}`` are where a defect goes.

_VJP_BODY = """\
  x, w = res
  dx = jnp.cos(x) * w * g
  dw = {dw}
"""

_CUSTOM_VJP = """\
@jax.custom_vjp
def f(x, w):
  return jnp.sin(x) * w


def f_fwd(x, w):
  return f(x, w), (x, w)


def f_bwd(res, g):
{body}  return {ret}


f.defvjp(f_fwd, f_bwd)
"""

_WITH_LOGS = lambda text: text.replace(   # the bwd returns (cotangents, logs)
    "  return {ret}\n", '  return ({ret}), {{"g_norm": jnp.abs(g).sum()}}\n')
_DEFREMAT = _CUSTOM_VJP.replace(   # a rem rule recomputes the fwd's residuals for the bwd
    "\n\ndef f_bwd", "\n\ndef f_rem(res, x, w):\n  return f(x, w), (x, w)\n\n\ndef f_bwd").replace(
    "f.defvjp(f_fwd, f_bwd)", "f.defremat(f_fwd, f_rem, f_bwd)")

RULES = {
    "custom_vjp": _CUSTOM_VJP,
    "defvjp_with_logs": _WITH_LOGS(_CUSTOM_VJP).replace("f.defvjp(", "f.defvjp_with_logs("),
    "custom_vjp.defremat": _DEFREMAT,
    "custom_vjp.defremat_with_logs": _WITH_LOGS(_DEFREMAT).replace("f.defremat(", "f.defremat_with_logs("),
    "custom_gradient": """\
@jax.custom_gradient
def f(x, w):
  y = jnp.sin(x) * w

  def f_bwd(g):
    dx = jnp.cos(x) * w * g
    dw = {dw}
    return {ret}
  return y, f_bwd
""",
    "custom_jvp": """\
@jax.custom_jvp
def f(x, w):
  return jnp.sin(x) * w


def f_jvp(primals, tangents):
  x, w = primals
  tx, tw = tangents
  y = f(x, w)
  ty = {ty}
  return {ret}


f.defjvp(f_jvp)
""",
    "hijax": """\
class SinTimes(HiPrim):
  def __init__(self, x_aval, w_aval):
    self.in_avals, self.out_aval, self.params = (x_aval, w_aval), x_aval, {{}}
    super().__init__()

  def expand(self, x, w):
    return jnp.sin(x) * w

  def vjp_fwd(self, nzs_in, x, w):
    return self(x, w), (x, w)

  def vjp_bwd_retval(self, res, g):
{body}    return {ret}


def f(x, w):
  return SinTimes(jax.typeof(x), jax.typeof(w))(x, w)
""",
}
"""Where the JAX has the API (``available``)."""

RULE_NAMES = {"custom_vjp": "f_bwd", "defvjp_with_logs": "f_bwd", "custom_gradient": "f_bwd",
              "custom_jvp": "f_jvp", "hijax": "vjp_bwd_retval", "custom_vjp.defremat": "f_bwd",
              "custom_vjp.defremat_with_logs": "f_bwd"}
"""The def a diagnosis must name, and the def a fix replaces."""

_RIGHT_DW = "(jnp.sin(x) * g).sum(0)"
_RIGHT_TY = "jnp.cos(x) * w * tx + jnp.sin(x) * tw"
_COTANGENT_DEFECTS = {   # (dw, returned)
    None: (_RIGHT_DW, "dx, dw"),
    "shape": ("jnp.sin(x) * g", "dx, dw"),                       # forgot to sum the batch
    "dtype": (_RIGHT_DW + ".astype(jnp.float16)", "dx, dw"),
    "structure": (_RIGHT_DW, "(dx,)"),                            # dw made, not returned
    "raises": ("jnp.sin(x) @ g", "dx, dw"),                      # forgot a transpose
}
_TANGENT_DEFECTS = {     # (ty, returned)
    None: (_RIGHT_TY, "y, ty"),
    "shape": (f"({_RIGHT_TY}).sum(0)", "y, ty"),
    "dtype": (f"({_RIGHT_TY}).astype(jnp.float16)", "y, ty"),
    "structure": (_RIGHT_TY, "y, (ty,)"),
    "raises": ("jnp.cos(x) * w * tx + jnp.sin(x) @ tx", "y, ty"),
}


def options(api: str) -> list[str]:
  """The boolean options (default False) of the registration JAX has for ``api``, read
  from its signature: each switched on is a rule API of its own (``defvjp(symbolic_zeros=True)``)."""
  fn = {"custom_vjp": jax.custom_vjp.defvjp, "custom_gradient": jax.custom_gradient}[api]
  return [n for n, p in inspect.signature(fn).parameters.items()
          if p.default is False and n not in ("self",)]


OPTION_NEEDS = ("jax_custom_vjp3", "jax_remat3")
"""The upgrade flags the remat options and registrations run under. They would change every
later cell of a process, so those APIs are written only in a process started with them on
(``JAX_CUSTOM_VJP3=true JAX_REMAT3=true``), and listed as not written otherwise."""
REGISTRATIONS = ("defremat", "defremat_with_logs", "defvjp_with_accums")
"""custom_vjp's other registrations (where the JAX has them), each a rule API."""


def _needs_flags(api: str) -> str | None:
  """Why ``api`` is not written in this process: a remat API with the flags off."""
  remat = _base_api(api)[1] == "remat" or api.startswith("custom_vjp.defremat")
  if not remat or all(getattr(jax.config, f, False) for f in OPTION_NEEDS):
    return None
  return f"runs only under {' and '.join(OPTION_NEEDS)} (JAX_CUSTOM_VJP3=true JAX_REMAT3=true)"


def rule_apis() -> list[str]:
  """The plain APIs, then each registration option JAX has (``options``)."""
  return [*(api for api in RULES if "." not in api),
          *(f"{'defvjp' if api == 'custom_vjp' else api}({o}=True)"
                    for api in ("custom_vjp", "custom_gradient") for o in options(api)),
          *(f"custom_vjp.{r}" for r in REGISTRATIONS if hasattr(jax.custom_vjp, r))]


def _base_api(api: str) -> tuple[str, str | None]:
  """(the plain API, the option switched on) of a rule API's name."""
  name, _, option = api.partition("(")
  return ("custom_vjp" if name == "defvjp" else name), (option[:-len("=True)")] or None)


def rule_text(api: str, defect: str | None) -> str:
  """The rule block of ``api`` with ``defect`` (None: the right rule)."""
  base, option = _base_api(api)
  text = _plain_rule_text(base, defect)
  if option is None:
    return text
  if base == "custom_gradient":
    if option == "with_logs":   # the VJP returns (cotangents, logs)
      text = re.sub(r"return (.*)\n  return y", r'return (\1), {"g_norm": jnp.abs(g).sum()}\n  return y', text)
    if option == "remat":   # f returns a rem function, which returns the VJP function
      head, _, body = text.partition("\n\n")
      body = textwrap.indent(body.replace("return y, f_bwd", "return jnp.sin(x) * w, f_bwd"), "  ")
      text = f"{head}\n\n  def f_rem(x, w):\n{body}  return y, f_rem\n"
    return text.replace("@jax.custom_gradient", f"@jax.custom_gradient({option}=True)")
  if option == "symbolic_zeros":   # the fwd is handed CustomVJPPrimal(value, perturbed)
    text = text.replace("def f_fwd(x, w):\n", "def f_fwd(x, w):\n  x, w = x.value, w.value\n")
  return text.replace("f.defvjp(f_fwd, f_bwd)", f"f.defvjp(f_fwd, f_bwd, {option}=True)")


def _plain_rule_text(api: str, defect: str | None) -> str:
  if api == "custom_jvp":
    ty, ret = _TANGENT_DEFECTS[defect]
    return RULES[api].format(ty=ty, ret=ret)
  dw, ret = _COTANGENT_DEFECTS[defect]
  body = _VJP_BODY.format(dw=dw)
  if api == "hijax":
    body = textwrap.indent(body, "  ")
  return RULES[api].format(dw=dw, ret=ret, body=body)


def available(api: str) -> str | None:
  """Why this JAX lacks ``api``, or the matrix does not write it (None: written)."""
  if _needs_flags(api):
    return _needs_flags(api)
  if api.startswith("custom_vjp.") and api not in RULES:
    return "not written yet: a rule pushing into accumulators"
  base, option = _base_api(api)
  if option is not None and option not in options(base):
    return f"jax {jax.__version__} has no {api}"
  if api == "defvjp_with_logs" and not hasattr(jax.custom_vjp, "defvjp_with_logs"):
    return f"jax {jax.__version__} has no custom_vjp.defvjp_with_logs"
  if api == "hijax":
    try:
      import jax.experimental.hijax as hijax
    except ImportError:
      return f"jax {jax.__version__} has no jax.experimental.hijax"
    base = getattr(hijax, "HiPrim", None) or getattr(hijax, "VJPHiPrimitive", None)
    if base is None or "nzs_in" not in inspect.signature(base.vjp_fwd).parameters:
      return f"jax {jax.__version__}'s hijax primitives are not the HiPrim API"
  return None


_HIJAX_IMPORT = """\
import jax.experimental.hijax as hijax
HiPrim = getattr(hijax, "HiPrim", None) or hijax.VJPHiPrimitive
"""

# --------------------------------------------------------------- the contexts

CONTEXT_TEXT = {
    "eager": """\
def {model}(x, w):
  return {f}(x, w)
""",
    "jit": """\
@jax.jit
def {model}(x, w):
  return {f}(x, w)
""",
    "scan": """\
def {model}(x, w):
  def body(h, _):
    return {f}(h, w), None
  h, _ = jax.lax.scan(body, x, None, length=2)
  return h
""",
    "while_loop": """\
def {model}(x, w):
  def body(carry):
    i, h = carry
    return i + 1, {f}(h, w)
  _, h = jax.lax.while_loop(lambda carry: carry[0] < 2, body, (0, x))
  return h
""",
    "cond": """\
def {model}(x, w):
  return jax.lax.cond(x.sum() > -1e9, {f}, lambda x, w: x * w, x, w)
""",
    "checkpoint": """\
def {model}(x, w):
  return jax.checkpoint({f})(x, w)
""",
}

CONTROL_FLOW = ("scan", "while_loop", "cond", "fori_loop", "switch", "map", "associative_scan")
"""``jax.lax``'s control flow a rule can be called inside, which ``missing_contexts`` checks."""


def missing_contexts() -> list[str]:
  """``jax.lax`` control flow this JAX has that no context writes (``fori_loop`` lowers to
  ``scan`` or ``while_loop``, ``switch`` to ``cond``, ``map`` to ``scan``: covered by those)."""
  return [f"lax.{n}" for n in CONTROL_FLOW if hasattr(jax.lax, n) and n not in CONTEXTS]


# ------------------------------------------------------------ the transformations

TRANSFORMS = {
    "grad": "jax.grad({loss}, argnums=1)(x, w)",
    "value_and_grad(has_aux)": "jax.value_and_grad({loss}_aux, argnums=1, has_aux=True)(x, w)",
    "value_and_grad(argnums=(0, 1))": "jax.value_and_grad({loss}, argnums=(0, 1))(x, w)",
    "value_and_grad(with_logs)": "jax.value_and_grad({loss}, argnums=1, with_logs=True)(x, w)",
    "vjp": "(lambda y, pull: pull(jnp.ones_like(y)))(*jax.vjp({model}, x, w))",
    "fwd_and_bwd": "(lambda fwd, bwd: (lambda y, r: bwd(r, jnp.ones_like(y)))(*fwd(x, w)))"
                   "(*jax.fwd_and_bwd({model}, argnums=(0, 1)))",
    "jvp": "jax.jvp({model}, (x, w), (jnp.ones_like(x), jnp.ones_like(w)))",
    "jacfwd": "jax.jacfwd({model}, argnums=1)(x, w)",
    "jacrev": "jax.jacrev({model}, argnums=1)(x, w)",
    "hessian": "jax.hessian({loss}, argnums=1)(x, w)",
    "linearize": "(lambda y, lin: (y, lin(jnp.ones_like(x), jnp.ones_like(w))))(*jax.linearize({model}, x, w))",
}
"""Keyed by the JAX public function each calls (``value_and_grad(...)``: its options)."""

DIFFERENTIATION_API = ("grad", "value_and_grad", "vjp", "fwd_and_bwd", "jvp", "jacfwd", "jacrev",
                       "jacobian", "hessian", "linearize", "linear_transpose")
"""JAX's public differentiation entry points (``jax.<name>``) the matrix accounts for."""
ALIASES = {"jacobian": "jacrev"}


def transforms() -> list[str]:
  """Every transformation this JAX has, and each under ``vmap`` (over a batch of x)."""
  have = [t for t in TRANSFORMS if hasattr(jax, t.partition("(")[0]) and
          (t != "value_and_grad(with_logs)"
           or "with_logs" in inspect.signature(jax.value_and_grad).parameters)]
  return have + [f"vmap({t})" for t in have]


def missing_transforms() -> list[str]:
  """JAX's public differentiation functions no cell calls (none but ``linear_transpose``,
  which takes a linear function, not a rule's)."""
  written = {t.partition("(")[0] for t in TRANSFORMS}
  return [n for n in DIFFERENTIATION_API
          if hasattr(jax, n) and n not in written and ALIASES.get(n) not in written]


# ------------------------------------------------------------------ a cell's module

@dataclasses.dataclass(frozen=True)
class Cell:
  api: str
  transform: str
  context: str
  defect: str

  @property
  def stem(self) -> str:
    safe = "".join(c if c.isalnum() else "_" for c in self.transform)
    return f"{self.api}_{safe}_{self.context}_{self.defect}"

  @property
  def vmapped(self) -> bool:
    return self.transform.startswith("vmap(")

  @property
  def base_transform(self) -> str:
    return self.transform[5:-1] if self.vmapped else self.transform


def module_text(cell: Cell, defect: str | None = "cell") -> str:
  """The cell's module; ``defect=None``: the same program with the rule right."""
  defect = cell.defect if defect == "cell" else defect
  call = TRANSFORMS[cell.base_transform]
  run = lambda suffix: call.format(model=f"model{suffix}", loss=f"loss{suffix}")
  body = ((lambda suffix: f"w = W\n  return jax.vmap(lambda x: {run(suffix)})(XS)") if cell.vmapped
          else (lambda suffix: f"x, w = X, W\n  return {run(suffix)}"))
  parts = ["import jax", "import jax.numpy as jnp",
           *([_HIJAX_IMPORT] if cell.api == "hijax" else []), "", "",
           rule_text(cell.api, defect), "",
           "def reference(x, w):\n  return jnp.sin(x) * w\n", ""]
  for suffix, f in (("", "f"), ("_ref", "reference")):
    parts += [CONTEXT_TEXT[cell.context].format(model=f"model{suffix}", f=f), "",
              f"def loss{suffix}(x, w):\n  return jnp.sum(model{suffix}(x, w) ** 2)\n", "",
              f"def loss{suffix}_aux(x, w):\n  y = model{suffix}(x, w)\n"
              f"  return jnp.sum(y ** 2), {{'mean': y.mean()}}\n", ""]
  parts += ["X = jnp.linspace(-1., 1., 12, dtype=jnp.float32).reshape(3, 4)",
            "W = jnp.linspace(.5, 2., 4, dtype=jnp.float32)",
            "XS = jnp.stack([X, 2. * X])", "", "",
            f"def run():\n  {body('')}\n", "",
            f"def run_ref():\n  {body('_ref')}\n"]
  return "\n".join(parts)


def rule_name(api: str) -> str:
  """The def a diagnosis of ``api``'s rule must name, and a fix replaces."""
  return RULE_NAMES[_base_api(api)[0]]


def cells(apis=None, contexts=CONTEXTS, defects=DEFECTS) -> list[Cell]:
  """Every cell of the matrix this JAX can write."""
  apis = rule_apis() if apis is None else apis
  return [Cell(api, t, c, d) for api in apis if available(api) is None
          for t in transforms() for c in contexts for d in defects]
