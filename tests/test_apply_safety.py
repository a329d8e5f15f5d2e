"""Fix code runs only on an explicit verify or apply, and apply never writes a file.

A rule defined in a ``.py`` file gets a patch (a unified diff) back from ``apply_fix``: the file's
bytes and mtime stay as they were (read-only or not), and the rule stays bound.
A fix text carrying a side effect (a default argument, evaluated only when the
``def`` runs) shows that diagnosing, suggesting, displaying, pushing to the
panel and answering its history and graph requests never run fix code: only
verify and apply do.
"""
from __future__ import annotations

import difflib
import importlib.util
import json
import os
import stat

import jax
import jax.numpy as jnp
import pytest
import softclip

import jupyter_vjpviz as vv
from jupyter_vjpviz.deliver import comm, widgets
from jupyter_vjpviz.deliver.display import mimebundle

BAD = '''def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, (x.T @ gy).T
'''
FIXED = '''def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, x.T @ gy
'''
X, W = jnp.ones((4, 5)), jnp.ones((5, 3))
assert BAD in softclip.SOURCE


def grad(rule):
  return jax.grad(lambda x, w: rule(x, w).sum(), argnums=(0, 1))(X, W)


def diagnose(rule):
  with pytest.raises(ValueError):
    grad(rule)
  return vv.last()


def request(op: str, **args) -> dict:
  return comm.handle({"v": 1, "type": "request", "request_id": op, "op": op, "args": args})


# ----------------------------------------------------------------------------- a rule in a file

@pytest.fixture
def rule_file(tmp_path):
  """softclip in a module imported from tmp_path/rules.py: (path, module)."""
  path = tmp_path / "rules.py"
  path.write_text(softclip.SOURCE, encoding="utf-8")
  spec = importlib.util.spec_from_file_location(f"vjpviz_rules_{tmp_path.name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return path, module


def fix_patch(path) -> str:
  """The unified diff replacing the bad rule in the file with FIXED: what apply hands back."""
  old = softclip.SOURCE.splitlines(keepends=True)
  new = softclip.SOURCE.replace(BAD, FIXED).splitlines(keepends=True)
  return "".join(difflib.unified_diff(old, new, fromfile=str(path), tofile=str(path)))


def snapshot(path) -> tuple:
  """What writing the file would change: its bytes, mtime, and its directory's listing."""
  return path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


def test_apply_on_a_file_rule_returns_a_patch_and_writes_nothing(hook, rule_file):
  path, module = rule_file
  d = diagnose(module.softclip)
  before = snapshot(path)
  expected = fix_patch(path)

  result = vv.apply_fix(d, FIXED)
  assert (result.applied, result.problems, result.path) == (False, (), str(path))
  assert result.patch == expected
  assert snapshot(path) == before
  # Nothing was rebound either: the kernel still runs the rule as the file has it.
  assert module.softclip.bwd is module.softclip_bwd
  with pytest.raises(ValueError):
    grad(module.softclip)

  # The panel's apply gets the same patch, and the file still is as it was.
  reply = request("apply", report_id=vv.last().id, code=FIXED)
  assert reply["ok"] and reply["result"] == {"applied": False, "problems": [],
                                             "patch": expected, "path": str(path)}, reply
  assert snapshot(path) == before


def test_apply_on_a_read_only_file_rule_still_only_gets_a_patch(hook, rule_file):
  path, module = rule_file
  d = diagnose(module.softclip)
  modes = path.stat().st_mode, path.parent.stat().st_mode
  path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
  path.parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
  try:
    before = snapshot(path)
    result = vv.apply_fix(d, FIXED)
    after = snapshot(path)
  finally:
    path.chmod(modes[0])
    path.parent.chmod(modes[1])
  assert not result.applied and result.patch == fix_patch(path)
  assert after == before


# ----------------------------------------------------------------------------- nothing runs unasked

# The rule's def evaluates its default once, when the def statement runs: the
# live rule never does, a fix derived from its text does when it is run.
MARKED = "RAN = []\n" + softclip.SOURCE.replace(
    "def softclip_bwd(res, g):", "def softclip_bwd(res, g, _ran=RAN.append('fix ran')):")


class PushComm:
  """What ``comm.push`` needs of the comm it opens."""

  def on_msg(self, callback):
    pass

  def close(self):
    pass


def test_diagnosis_display_push_and_requests_never_run_fix_code(hook, monkeypatch):
  ns = softclip.define(MARKED)
  ran = ns["RAN"]
  ran.clear()   # defining the rule ran its def once; from here on, only a fix would
  d = diagnose(ns["softclip"])
  assert d.fixes and "RAN.append('fix ran')" in d.fixes[0].code

  pushed = []
  with monkeypatch.context() as m:
    m.setattr("comm.create_comm", lambda **kw: pushed.append(kw) or PushComm())
    m.setitem(comm._state, "push_comm", None)
    m.setitem(comm._state, "listening", True)   # a panel announced itself: push opens a comm
    comm.push(d)
  json.dumps(pushed[0]["data"])
  mimebundle(d)
  for render in (d.to_html, d.to_svg, d.to_text):
    render()
  assert widgets.fallback(d) is not None   # the inline editor, prefilled with the fix
  assert request("history")["ok"]
  node = d.node
  for op, args in (("view", {}), ("expand", {"node": node}), ("collapse", {"node": node}),
                   ("search", {"query": "softclip"})):
    assert request(op, report_id=d.id, **args)["ok"], op
  assert ran == [], "fix code ran without a verify or apply"

  assert request("verify", report_id=d.id, code=d.fixes[0].code)["result"]["pass"]
  assert ran == ["fix ran"]
  assert request("apply", report_id=d.id, code=d.fixes[0].code)["result"]["applied"]
  assert ran == ["fix ran"] * 3   # apply verifies, then defines the rule it binds


def test_a_rule_with_two_returns_is_not_re_executed_either(hook):
  two_returns = MARKED.replace(
      "    return gy @ w.T, (x.T @ gy).T\n",
      "    if x.ndim == 3:\n        return gy @ w.T, x.T @ gy\n    return gy @ w.T, (x.T @ gy).T\n")
  ns = softclip.define(two_returns)
  ns["RAN"].clear()
  diagnose(ns["softclip"])
  assert ns["RAN"] == []


def test_a_rule_file_edited_since_import_is_not_run_to_find_the_failing_return(hook, tmp_path):
  """The text on disk is no longer what runs: nothing of it may execute."""
  two_returns = softclip.SOURCE.replace(
      "    return gy @ w.T, (x.T @ gy).T\n",
      "    if x.ndim == 3:\n        return gy @ w.T, x.T @ gy\n    return gy @ w.T, (x.T @ gy).T\n")
  path = tmp_path / "edited_rules.py"
  path.write_text(two_returns, encoding="utf-8")
  spec = importlib.util.spec_from_file_location(f"vjpviz_edited_{tmp_path.name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  marker = tmp_path / "ran"
  path.write_text(two_returns.replace("    gy = g * (1 - y**2)\n",
                                      f"    gy = g * (1 - y**2)\n    open({str(marker)!r}, 'w')\n"))
  d = diagnose(module.softclip)
  assert d.kind == "bwd_type" and not marker.exists()
