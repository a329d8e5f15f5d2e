"""The design as README states it: one registry of kinds, imports that flow one way."""
import ast
import json
import pathlib
import re
import subprocess
import traceback

import jax
import jax.numpy as jnp
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis.diagnosis import Diagnosis
from jupyter_vjpviz.base import kinds
from jupyter_vjpviz.capture.records import Record

PACKAGE = pathlib.Path(vv.__file__).parent


# ------------------------------------------------------------ the kind registry

def _recorded_kinds() -> set[str]:
  """Every ``kind="..."`` literal the package writes (capture sites, fallbacks, value checks)."""
  found = set()
  for path in PACKAGE.rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.keyword) and node.arg == "kind":
        found |= {c.value for c in ast.walk(node.value)
                  if isinstance(c, ast.Constant) and isinstance(c.value, str)}
  return found


def test_every_kind_a_capture_site_records_has_its_entry():
  recorded = _recorded_kinds() - {"eqn", "input", "output", "static"}   # graph node kinds
  assert recorded and recorded <= set(kinds.KINDS), recorded - set(kinds.KINDS)


def test_a_record_of_an_unregistered_kind_is_refused():
  with pytest.raises(KeyError):
    Record(kind="bwd_typo", severity="error", function="f", source=None, path=None,
           expected=None, got=None)


def test_every_entry_says_what_each_stage_needs():
  for kind in kinds.KINDS.values():
    assert kind.role in ("fwd", "bwd", "jvp", "solve", None), kind
    assert kind.subject in (kinds.RULE, kinds.INPUT, kinds.OUTPUT), kind
    assert kind.channel in (kinds.RETURNED, kinds.ACCUMULATED, kinds.PASSED), kind


# -------------------------------------- a kind added as one entry: custom_jvp tangents

@jax.custom_jvp
def scaled_sin(x):
  return jnp.sin(x) * 2.0


@scaled_sin.defjvp
def scaled_sin_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return scaled_sin(x), (2.0 * jnp.cos(x) * t).astype(jnp.float16)


def _loss(x):
  return scaled_sin(x * 3.0).sum()


def _failure(thunk):
  try:
    thunk()
  except Exception as e:  # noqa: BLE001
    return e
  raise AssertionError("JAX accepted it")


def test_a_custom_jvp_tangent_of_the_wrong_type_is_diagnosed_and_jax_error_kept(hook):
  grad = lambda: jax.grad(_loss)(jnp.ones(3))
  hook.uninstall()
  plain = _failure(grad)
  hook.install()
  hooked = _failure(grad)
  assert type(hooked) is type(plain) and str(hooked) == str(plain)
  frames = lambda e: [(f.name, f.lineno) for f in traceback.extract_tb(e.__traceback__)]
  assert frames(hooked) == frames(plain)
  d = hook.last()
  assert d is not None and d.kind == "jvp_tangent_type" and d.severity == "error"
  assert (d.function, d.rule, d.expected, d.got) == ("scaled_sin", "scaled_sin_jvp",
                                                    "float32[3]", "float16[3]")
  assert d.headline.startswith("scaled_sin's jvp rule scaled_sin_jvp returned tangent float16[3]")
  node = d.graph.node(d.node)
  assert node is not None and node.primitive == "custom_jvp_call"
  assert "jvp rule  scaled_sin_jvp" in d.to_text()
  # the primal's and the rule's definitions, not the loss's
  assert d.source.startswith(__file__ + ":") and d.rule_source.startswith(__file__ + ":")
  assert d.source != d.rule_source and f"({d.rule_source})" in d.to_text()


def test_a_custom_jvp_whose_tangents_are_right_records_nothing(hook):
  @jax.custom_jvp
  def cube(x):
    return x ** 3

  @cube.defjvp
  def cube_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return cube(x), 3 * x ** 2 * t

  g = jax.grad(lambda x: cube(x).sum())(jnp.full(2, 2.0))
  assert g.tolist() == [12.0, 12.0] and hook.diagnoses() == []


def _allowed_kind_literals(tree: ast.AST) -> set[int]:
  """The constants where a site names the kind it records: a ``kind=`` argument, or the
  local ``kind`` it passes on as one."""
  allowed = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.keyword) and node.arg == "kind":
      allowed |= {id(c) for c in ast.walk(node.value)}
    elif isinstance(node, ast.Assign):
      for target in node.targets:
        pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                 and isinstance(node.value, ast.Tuple) else [(target, node.value)])
        allowed |= {id(c) for t, v in pairs if isinstance(t, ast.Name) and t.id == "kind"
                    for c in ast.walk(v)}
  return allowed


def test_no_stage_spells_a_kind_name():
  """Outside the registry a kind is named only where it is recorded; every other stage
  reads the entry's fields (``kinds.of(d.kind).structural``), so a new kind needs no edit there."""
  spelled = []
  for path in PACKAGE.rglob("*.py"):
    if path == PACKAGE / "base" / "kinds.py":
      continue
    tree = ast.parse(path.read_text())
    allowed = _allowed_kind_literals(tree)
    spelled += [f"{path.relative_to(PACKAGE)}:{c.lineno}: {c.value}" for c in ast.walk(tree)
                if isinstance(c, ast.Constant) and c.value in kinds.KINDS and id(c) not in allowed]
  assert spelled == []


def _panel_sources() -> list[pathlib.Path]:
  """src/**/*.ts as git sees them, committed or new (the types generated from the schema
  are ignored), less the ones deleted since the last commit."""
  listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "src/*.ts"],
                          cwd=PACKAGE.parent, capture_output=True, text=True).stdout.split()
  return [PACKAGE.parent / p for p in listed
          if "__tests__" not in p and (PACKAGE.parent / p).exists()]


def test_the_panel_never_compares_kind_names():
  """The panel branches on a diagnosis's ``traits`` (the registry's entry, in the protocol)."""
  literal = re.compile("['\"`](" + "|".join(kinds.KINDS) + ")['\"`]")
  found = [f"{p.name}:{n}: {line.strip()}" for p in _panel_sources()
           for n, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
  assert found == []


def test_a_diagnosis_carries_its_kind_traits_in_the_protocol():
  d = {k: None for k in ("function", "rule", "source", "path", "expected", "got", "message")}
  for kind in kinds.KINDS.values():
    sent = Diagnosis(kind=kind.name, severity="error", **d).to_dict()
    assert sent["traits"] == kind.traits()
    assert sent["traits"]["structural"] == (kind.wrong == kinds.STRUCTURE)
  schema = json.loads((PACKAGE / "protocol.schema.json").read_text())
  traits = schema["definitions"]["Diagnosis"]["properties"]["traits"]
  assert set(traits["required"]) == set(kinds.of("bwd_type").traits())


def test_every_fixer_family_a_kind_names_resolves():
  """A kind's entry names its fix families by string; a typo there would surface only as
  a KeyError the first time that kind is diagnosed, inside the error path."""
  from jupyter_vjpviz.fixes import calls, suggest
  named = {(k.name, "rule", f) for k in kinds.KINDS.values() for f in k.rule_fixers}
  named |= {(k.name, "call", f) for k in kinds.KINDS.values() for f in k.call_fixers}
  families = {"rule": suggest.RULE_FIXERS, "call": calls.CALL_FIXERS}
  assert named and [n for n in sorted(named) if n[2] not in families[n[1]]] == []
  used = {(where, f) for _, where, f in named}
  assert [(w, f) for w, fs in families.items() for f in fs if (w, f) not in used] == []


def test_the_protocol_schema_names_exactly_the_registered_kinds():
  schema = json.loads((PACKAGE / "protocol.schema.json").read_text())
  assert schema["definitions"]["diagnosisKind"]["enum"] == list(kinds.KINDS)


# ------------------------------------------------------------ imports flow one way

LAYERS = ("base", "capture", "analysis", "fixes", "render", "api", "deliver")
"""Lowest first. The public entry points (``api/``: ``pipeline``, ``check``, ``gradcheck``,
``nans``, ``grads``, ``watch``) are the api layer, which deliver's surfaces (magics, the
comm, the console) call; the package root (``__init__``, ``__main__``) sits above them all."""

ROOT_MODULES = (PACKAGE.name, f"{PACKAGE.name}.__main__")


def _module(path: pathlib.Path) -> str:
  parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
  file = PACKAGE.parent / name.replace(".", "/")
  return file.with_suffix(".py").exists() or file.is_dir()


def _imports() -> dict[str, set[str]]:
  """Each module of ours -> ours it imports anywhere in it (deferred imports count)."""
  found = {}
  for path in PACKAGE.rglob("*.py"):
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ImportFrom) and node.level:
        parts = package.split(".")
        stem = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
        targets |= {f"{stem}.{a.name}" if _is_module(f"{stem}.{a.name}") else stem
                    for a in node.names}
      elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE.name):
        targets.add(node.module)
      elif isinstance(node, ast.Import):
        targets |= {a.name for a in node.names if a.name.startswith(PACKAGE.name)}
    found[mod] = targets - {mod}
  return found


def _layer(mod: str) -> int:
  parts = mod.split(".")
  if len(parts) > 1 and parts[1] in LAYERS:
    return LAYERS.index(parts[1])
  return len(LAYERS)


def test_every_module_belongs_to_a_stage():
  loose = [m for m in _imports() if _layer(m) == len(LAYERS) and m not in ROOT_MODULES]
  assert loose == []


def test_the_api_is_a_layer_of_its_own():
  """An entry point importing a surface of deliver's is an upward edge the test sees."""
  assert _layer(f"{PACKAGE.name}.api.grads") == LAYERS.index("api")
  assert _layer(f"{PACKAGE.name}.deliver.magics") > _layer(f"{PACKAGE.name}.api.nans")
  assert _layer(f"{PACKAGE.name}.render.text") < _layer(f"{PACKAGE.name}.api.pipeline")


def test_imports_only_run_down_the_pipeline():
  upward = [(m, t) for m, ts in _imports().items() for t in ts if _layer(t) > _layer(m)]
  assert upward == []


def test_no_import_cycles():
  graph = _imports()
  done, cycles = set(), []

  def visit(mod, path):
    if mod in path:
      cycles.append(path[path.index(mod):] + [mod])
      return
    if mod in done or mod not in graph:
      return
    for target in sorted(graph[mod]):
      visit(target, path + [mod])
    done.add(mod)

  for mod in sorted(graph):
    visit(mod, [])
  assert cycles == []


# ------------------------------------- the hook's re-entry flag has one writer

def _writes_of(attr: str, tree: ast.AST) -> list[int]:
  """Lines that assign, augment, annotate or delete an attribute named ``attr``, or
  ``setattr`` it by a literal name."""
  lines = []
  for node in ast.walk(tree):
    targets = ([node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else
               node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [])
    lines += [t.lineno for target in targets for t in ast.walk(target)
              if isinstance(t, ast.Attribute) and t.attr == attr]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in ("setattr", "delattr") and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant) and node.args[1].value == attr):
      lines.append(node.lineno)
  return lines


def test_only_records_writes_the_suspended_flag():
  """``records.suspended()`` is the one way vjpviz's own tracing sets the hook aside: a
  hand-written ``state.suspended += 1`` elsewhere is a flag left raised when it raises."""
  owner = PACKAGE / "capture" / "records.py"
  assert _writes_of("suspended", ast.parse(owner.read_text()))   # the scan sees its writes
  writers = {f"{path.relative_to(PACKAGE)}:{line}"
             for path in PACKAGE.rglob("*.py") if path != owner
             for line in _writes_of("suspended", ast.parse(path.read_text()))}
  assert writers == set()


# -------------------------------------- modules meet at public names

def _private_uses() -> list[str]:
  """``module._name`` and ``from module import _name`` across our modules: a neighbour's
  private name used from outside (dunders aside)."""
  ours = {p.stem for p in PACKAGE.rglob("*.py")}
  found = []
  for path in PACKAGE.rglob("*.py"):
    tree = ast.parse(path.read_text())
    held = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE.name)):
        for alias in node.names:
          if alias.name.startswith("_") and not alias.name.startswith("__"):
            found.append(f"{path.name}: from {node.module} import {alias.name}")
          if alias.name in ours:
            held.add(alias.asname or alias.name)
    found += [f"{path.name}: {node.value.id}.{node.attr}" for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in held and node.attr.startswith("_")
              and not node.attr.startswith("__")]
  return found


def test_at_most_three_private_names_are_used_across_modules():
  assert len(_private_uses()) <= 3, _private_uses()


def test_the_graph_side_of_analysis_never_runs_the_users_code():
  """``analysis`` builds the graph from types; ``analysis.values`` runs the user's code
  (through replay). The first never imports the second, so a diagnosis made without a
  run of the user's code cannot start one by accident."""
  values = f"{PACKAGE.name}.analysis.values"
  graph_side = {m: ts for m, ts in _imports().items()
                if m.startswith(f"{PACKAGE.name}.analysis") and not m.startswith(values)}
  assert graph_side and {m: sorted(t for t in ts if t.startswith(values))
                         for m, ts in graph_side.items() if any(t.startswith(values) for t in ts)} == {}


def test_the_api_type_checkers_see_is_the_api_imported_at_run_time():
  """``__init__``'s ``TYPE_CHECKING`` imports (what IDEs and type checkers read) and its
  lazy table (what ``vv.name`` imports on first use) name the same object for each name."""
  tree = ast.parse((PACKAGE / "__init__.py").read_text())
  block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
  seen = {a.name: "." + node.module for node in block.body for a in node.names}
  assert seen == vv._LAZY
  for name, module in seen.items():
    real = getattr(__import__(PACKAGE.name + module, fromlist=[name]), name)
    assert getattr(vv, name) is real and name in vv.__all__, name


def test_importing_an_entry_module_leaves_the_function_of_its_name():
  """``vv.check`` is the function even after ``jupyter_vjpviz.api.check``, its module,
  is imported: the entry modules live in ``api/``, so the import binds nothing at the top."""
  import importlib
  for name in ("check", "gradcheck", "nans", "grads", "watch"):
    module = importlib.import_module(f"{PACKAGE.name}.api.{name}")
    assert getattr(vv, name) is getattr(module, name) and callable(getattr(vv, name)), name
