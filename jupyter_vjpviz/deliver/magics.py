"""``%vjpviz`` and ``%%vjpviz``: the notebook's controls for the debugger.

``%vjpviz?`` shows the usage below (magic_arguments). ``check`` and the cell
magic are the proactive side: they check custom rules abstractly, so a wrong
gradient dtype is caught even when JAX raises nothing.
"""
from __future__ import annotations

import ast
import contextlib
import json

import jax
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..api import pipeline
from ..analysis.values import replay
from ..analysis.assemble import key
from ..base import safety, unchecked
from ..analysis.diagnosis import Diagnosis
from ..capture.compat import capabilities, jax_flags
from ..capture.naming import function_names
from ..capture.sites.check_sites import rule_applied
from ..api.check import as_shape_struct, check
from ..api.gradcheck import GradCheck, floating, gradcheck, judge
from ..api.grads import grads as grad_report
from ..api.gradcheck import applications as rule_applications
from ..api.nans import GradientScreen, gradients, nans
from . import call_values, comm
from .display import show


class VjpvizProblems(RuntimeError):
  """Raised by ``%%vjpviz --strict`` when a checked rule has a problem."""


def status() -> str:
  path = "hijax (jax_custom_vjp3)" if jax_flags.on("jax_custom_vjp3") else "classic"
  points, skipped = pipeline.hook_points()
  lines = [
      f"vjpviz: {'installed' if pipeline.installed() else 'not installed'}",
      f"JAX {jax.__version__}, custom_vjp path: {path}",
      *([capabilities.of(points).line()] if points else []),
      f"hook points: {len(points)} wrapped, {len(skipped)} skipped",
      *(f"  skipped {point}: {why}" for point, why in skipped),
      f"diagnoses so far: {len(pipeline.history())}",
      f"panel listening: {'yes' if comm.listening() else 'no'}"]
  return "\n".join(lines)


_EXPORTS = {"html": lambda d: d.to_html(), "svg": lambda d: d.to_svg(),
            "json": lambda d: json.dumps(d.to_dict(), indent=1, default=str),
            "txt": lambda d: d.to_text()}


def export(d, path: str, fmt: str | None = None) -> str:
  fmt = fmt or path.rsplit(".", 1)[-1].lower()
  if fmt not in _EXPORTS:
    raise ValueError(f"unknown export format {fmt!r}; use one of {sorted(_EXPORTS)}")
  with open(path, "w", encoding="utf-8") as f:
    f.write(_EXPORTS[fmt](d))
  return path


@contextlib.contextmanager
def applications():
  """Every custom_vjp applied meanwhile, as (object, abstract arguments): types only, no arrays."""
  seen: dict = {}

  def observe(cvjp, args, kwargs):
    abstract_args = jax.tree_util.tree_map(as_shape_struct, (args, kwargs))
    seen.setdefault((id(cvjp), _type_key(abstract_args)), (cvjp, abstract_args))
  with rule_applied.listening(observe):
    yield seen


def _type_key(abstract_args):
  leaves, tree = jax.tree_util.tree_flatten(abstract_args)
  return tree, tuple((l.shape, str(l.dtype)) if isinstance(l, jax.ShapeDtypeStruct) else id(l)
                     for l in leaves)


def check_application(cvjp, abstract_args) -> list:
  """vjpviz.check on one custom_vjp application, w.r.t. its float array arguments."""
  args, kwargs = abstract_args
  nums = tuple(i for i, a in enumerate(args) if i not in cvjp.nondiff_argnums and floating(a))
  if not nums:
    return []
  return check(lambda *a, **k: cvjp(*a, **k), *args, argnums=nums, **kwargs)


def unique(found: list) -> list:
  seen, out = set(), []
  for d in found:
    k = key(d) if isinstance(d, Diagnosis) else d.headline   # an Unchecked: by its words
    if k not in seen:
      seen.add(k)
      out.append(d)
  return out


def summary(n_rules: int, problems: list) -> str:
  return (f"{n_rules} custom rule{'s' * (n_rules != 1)} checked, "
          f"{len(problems)} problem{'s' * (len(problems) != 1)}")


@magics_class
class VjpvizMagics(Magics):

  @magic_arguments()
  @argument("action", nargs="?", default="status",
            help="status (default) | on | off | clear | last | list | export PATH | "
                 "check [--values] EXPR | nans EXPR | grads EXPR | values on|off (each later VJP "
                 "diagnosis's graph carries its cotangents' norms and NaN/Inf counts) | "
                 "budget [SECONDS] (time vjpviz may spend running your code again after "
                 "each failing call)")
  @argument("target", nargs="*", help="export: the file to write; check: a call such as "
                                      "loss(params, batch)")
  @argument("--format", choices=sorted(_EXPORTS), default=None,
            help="export format (default: from the file extension)")
  @argument("--strict", action="store_true",
            help="cell magic: raise if any custom rule the cell ran has a problem")
  @argument("--values", action="store_true",
            help="also judge each custom rule's cotangent values by its primal's own "
                 "derivative at random inputs (bwd_value warnings; opt-in: surrogate "
                 "gradients differ on purpose, mark them with vjpviz.surrogate)")
  @argument("--nans", action="store_true",
            help="cell magic: check every gradient the cell computes for NaN/Inf and "
                 "localise the first one that has them (vjpviz.nans)")
  @line_cell_magic
  def vjpviz(self, line: str, cell: str | None = None):
    """Gradient debugger controls; as a cell magic, check every custom rule the cell runs.

    %%vjpviz [--strict] runs the cell with the hook on, re-checks each custom_vjp
    it applied abstractly (silent dtypes included), prints "N custom rules
    checked, M problems" and shows each problem. With --values (also
    %vjpviz check --values EXPR) each rule whose fwd ran is judged by its
    primal's own derivative at random inputs of the types it was applied to
    (vjpviz.gradcheck); JAX's caches are cleared first, so jitted code re-traces.
    With --nans every gradient the cell computes is checked for NaN/Inf as it is made
    (one taken inside a jitted step by the step's outputs), and the first one that has
    them is localised (vjpviz.nans; a jitted step is re-run with jit disabled for it).
    """
    if cell is not None:
      return self._cell(parse_argstring(self.vjpviz, line), cell)
    action, _, rest = line.strip().partition(" ")
    if action == "check":  # the expression is Python, not shell-style arguments
      flag, _, expr = rest.strip().partition(" ")
      return self._values(expr.strip()) if flag == "--values" else self._check(rest.strip())
    if action == "nans":
      return self._nans(rest.strip())
    if action == "grads":
      fun, args, kwargs = self._call(rest.strip())
      return grad_report(fun, *args, **kwargs)   # shown by its rich repr
    args = parse_argstring(self.vjpviz, line)
    handler = {"status": lambda: print(status()), "on": pipeline.install,
               "off": pipeline.uninstall, "clear": pipeline.clear, "last": self._last,
               "list": self._list, "export": lambda: self._export(args),
               "values": lambda: self._values_overlay(args),
               "budget": lambda: self._budget(args)}.get(args.action)
    if handler is None:
      print(f"vjpviz: unknown action {args.action!r}; see %vjpviz?")
      return None
    return handler()

  def _budget(self, args):
    """``%vjpviz budget [SECONDS]``: set or show vjpviz's time per failing call."""
    try:
      if args.target:
        replay.set_budget(float(args.target[0]))
    except ValueError:
      print("vjpviz: usage: %vjpviz budget [SECONDS]")
      return
    print(f"vjpviz: up to {replay.BUDGET:g} s of its own work per failing call, before the "
          "error and again after it to judge fixes")

  def _values_overlay(self, args):
    """``%vjpviz values on|off``: later VJP diagnoses carry their backward pass's values."""
    switch = {"on": call_values.on, "off": call_values.off}.get(args.target[0] if args.target else "")
    if switch is not None:
      switch()
    print(f"vjpviz: cotangent values on the graph {'on' if call_values.enabled() else 'off'}"
          + ("" if switch else " (usage: %vjpviz values on|off)"))

  def _last(self):
    found = pipeline.history()
    if not found:
      print("vjpviz: no diagnoses yet")
      return
    show(found[-1])

  def _list(self):
    for d in pipeline.history():
      print(f"{d.id} [{d.severity}] {d.headline}")

  def _export(self, args):
    found = pipeline.history()
    if not args.target or not found:
      print("vjpviz: nothing to export" if not found else "usage: %vjpviz export PATH")
      return
    print(f"vjpviz: wrote {export(found[-1], args.target[0], args.format)}")

  def _check(self, expr: str) -> list:
    fun, args, kwargs = self._call(expr)
    found = check(fun, *args, **kwargs)
    missed = unchecked.unchecked(found)
    print(f"{expr}: {len(found)} problem{'s' * (len(found) != 1)}" if missed is None else
          f"{expr}: not checked")
    for d in found:
      show(d)
    return found

  def _nans(self, expr: str):
    """``%vjpviz nans f(args...)``: vjpviz.nans of ``f`` w.r.t. its first argument."""
    fun, args, kwargs = self._call(expr)
    d = nans(fun, *args, **kwargs)
    if d is None:
      print(f"{expr}: the gradient is finite")
    else:
      show(d)
    return d

  def _values(self, expr: str) -> GradCheck:
    fun, args, kwargs = self._call(expr)
    result = gradcheck(fun, *args, **kwargs)
    report_values(f"{expr}: ", result)
    return result

  def _call(self, expr: str):
    """The function, arguments and keywords of ``f(args...)``, evaluated in the user's namespace."""
    call = ast.parse(expr, mode="eval").body
    if not isinstance(call, ast.Call):
      raise ValueError("usage: %vjpviz check [--values] f(args...), e.g. loss(params, batch)")
    ns = self.shell.user_ns
    value = lambda node: eval(compile(ast.Expression(node), "<vjpviz check>", "eval"), ns)  # noqa: S307
    return (value(call.func), [value(a) for a in call.args],
            {k.arg: value(k.value) for k in call.keywords})

  def _cell(self, args, cell: str):
    was_installed = pipeline.installed()
    pipeline.install()
    if args.values or args.nans:
      jax.clear_caches()   # a jitted function traced before would run neither its rules'
                           # fwd nor the jax.vjp that tells --nans it is a train step
    try:
      with (pipeline.collecting() as found, applications() as applied,
            rule_applications() if args.values else contextlib.nullcontext({}) as sites,
            gradients() if args.nans else contextlib.nullcontext() as grads):
        self.shell.run_cell(cell)
      for cvjp, abstract_args in applied.values():
        found.extend(check_application(cvjp, abstract_args))
    finally:
      if not was_installed:
        pipeline.uninstall()
    problems = unique(found)
    print(summary(len(applied), problems))
    for d in problems:
      show(d)
    with unchecked.attempt("the cell's custom rules' values") as trial:
      values = safety.safely(judge, sites) if args.values else None
    values = values if values is not None or not args.values else trial.unchecked()
    if values is not None:
      report_values("", values)
    nonfinite = report_nans(grads) if grads is not None else None
    if args.strict and (problems or values or nonfinite):
      shown = [*problems, *(values if isinstance(values, GradCheck) else ()),
               *filter(None, [unchecked.unchecked(values), nonfinite])]
      raise VjpvizProblems(summary(len(applied), shown) + ": "
                           + "; ".join(d.headline for d in shown))


def report_values(prefix: str, result) -> None:
  """A gradcheck's summary line, each rule not judged (why, in one line), each warning;
  or the line saying it could not check."""
  if isinstance(result, unchecked.Unchecked):
    print(prefix + str(result))
    return
  print(prefix + result.summary())
  if result.failed:
    print(f"  {result.failed}")
  for r in result.not_judged:
    print(f"  not judged: {r.line()}")
  for d in result:
    show(d)


def report_nans(grads: GradientScreen):
  """How many gradients the cell computed and how many had NaN/Inf; the first localised."""
  n, bad = grads.checked, len(grads.bad)
  print(f"{n} gradient{'s' * (n != 1)} checked for NaN/Inf, {bad} not finite")
  if grads.steps_checked:
    k, steps = grads.steps_checked, grads.bad_steps
    print(f"{k} call{'s' * (k != 1)} of jitted functions that take gradients checked"
          + (f"; NaN/Inf in the outputs of {function_names.function_name(steps[0][0])}"
             + ("" if bad else ": re-run with jit disabled to localise it") if steps else
             ", all outputs finite"))
  with unchecked.attempt("the cell's gradients") as trial:
    d = safety.safely(grads.diagnose)
  d = d if d is not None else trial.clear_or(None)
  if d is not None:
    show(d)
  return d


def register(ipython) -> None:
  ipython.register_magics(VjpvizMagics)


def unregister(ipython) -> None:
  """After ``%unload_ext`` no ``%vjpviz`` is left behind."""
  for kind in ("line", "cell"):
    ipython.magics_manager.magics[kind].pop("vjpviz", None)
  ipython.magics_manager.registry.pop("VjpvizMagics", None)
