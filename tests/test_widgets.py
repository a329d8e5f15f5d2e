"""The ipywidgets fallback (deliver/widgets.py) on a real diagnosis, built in-process.

A custom_vjp whose bwd returns the transposed cotangent fails under jax.grad; the
hook records the diagnosis, the fallback is built from it and its buttons are
clicked programmatically (``Button.click()`` runs the on_click handlers).
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import pytest
import softclip

ipywidgets = pytest.importorskip("ipywidgets")

from jupyter_vjpviz.deliver import widgets  # noqa: E402

X = jnp.arange(20.0).reshape(4, 5) / 20
W = jnp.arange(15.0).reshape(5, 3) / 15

GOOD_BWD = '''def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, x.T @ gy
'''

BAD_BWD = '''def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, (x.T @ gy)[:, :2]
'''

EVIL = '<img src=x onerror="alert(1)">'

# The diagnosis holds its custom_vjp by weakref (verify needs the live rule):
# keep the rules of these tests alive, as a notebook's globals would.
_ALIVE: list = []


def _fail(name: str = "softclip"):
  """Run a failing jax.grad of a custom_vjp named ``name``; return the diagnosis."""
  rule = softclip.define()["softclip"]
  rule.fun.__name__ = rule.fun.__qualname__ = name
  _ALIVE.append(rule)
  with pytest.raises(Exception):
    jax.grad(lambda x, w: rule(x, w).sum(), argnums=(0, 1))(X, W)
  import jupyter_vjpviz as vv
  d = vv.last()
  assert d is not None, "the hook recorded no diagnosis"
  return d


def test_fallback_shows_the_diagnosis(hook):
  d = _fail()
  view = widgets.DiagnosisWidget(d, ipywidgets)
  assert isinstance(widgets.fallback(d), ipywidgets.VBox)
  html = view.summary.value
  assert "softclip" in html
  # the diff row: path, expected, got
  assert "data-vjpviz-path='[1]'" in html
  assert "float32[5,3]" in html and "float32[3,5]" in html
  # the editor is prefilled with the best fix, and nothing ran yet
  assert d.fixes, "expected a fix suggestion for a transposed cotangent"
  assert view.editor.value == d.fixes[0].code
  assert view.result.value == ""


def _verified(code: str | None = None) -> str:
  """Verify's result in a fresh diagnosis's widget, its editor holding ``code`` (else the
  first fix, as prefilled)."""
  view = widgets.DiagnosisWidget(_fail(), ipywidgets)
  if code is not None:
    view.editor.value = code
  view.verify.click()
  return view.result.value


def test_verify_with_the_first_fix_passes(hook):
  result = _verified()
  assert "data-vjpviz-verify='pass'" in result and "Pass" in result, result


def test_verify_with_an_edited_good_rule_passes(hook):
  result = _verified(GOOD_BWD)
  assert "data-vjpviz-verify='pass'" in result, result


def test_verify_with_bad_code_fails(hook):
  result = _verified(BAD_BWD)
  assert "data-vjpviz-verify='fail'" in result and "Still failing" in result, result
  # failing because the rule is still wrong, not because verification broke
  assert "failed to run" not in result and "float32" in result, result


def test_verify_with_code_that_does_not_parse_fails_and_does_not_raise(hook):
  d = _fail()
  view = widgets.DiagnosisWidget(d, ipywidgets)
  view.editor.value = "def softclip_bwd(res, g:\n    return"
  view.verify.click()
  assert "data-vjpviz-verify='fail'" in view.result.value, view.result.value
  assert "does not parse" in view.result.value and "line 1" in view.result.value, view.result.value


def test_picker_switches_the_editor(hook):
  d = _fail()
  view = widgets.DiagnosisWidget(d, ipywidgets)
  view.editor.value = "edited"
  fixes = list(d.fixes)
  if len(fixes) > 1:
    view.picker.value = 1
    assert view.editor.value == fixes[1].code
  view.picker.value = None
  view.picker.value = 0
  assert view.editor.value == fixes[0].code


def _live(markup: str) -> list[str]:
  """The elements that could run and the on* attributes in ``markup``, as a browser
  would parse it (escaped text inside an attribute value is not markup)."""
  from html.parser import HTMLParser
  found = []

  class Parser(HTMLParser):
    def handle_starttag(self, tag, attrs):
      if tag in ("img", "script", "iframe", "foreignobject"):
        found.append(tag)
      found.extend(name for name, _ in attrs if name.startswith("on"))

  Parser().feed(markup)
  return found


def test_names_with_html_are_escaped(hook):
  d = _fail(EVIL)
  assert d.function == EVIL
  view = widgets.DiagnosisWidget(d, ipywidgets)
  html = view.summary.value
  assert "&lt;img src=x onerror=" in html, html
  assert not _live(html), html
  # Verify's summary is escaped too (it may quote the name).
  view.editor.value = BAD_BWD
  view.verify.click()
  assert not _live(view.result.value), view.result.value
  # The graph: names drawn as text, no live element or handler.
  view.graph_button.click()
  svg = view.graph.value
  assert svg, "no graph"
  assert not _live(svg), svg[:2000]
  assert "&lt;img src=x" in svg, "the name is drawn as text"


def test_sanitize_svg_strips_what_could_run():
  dirty = ('<svg><script>alert(1)</script><g onclick="alert(2)"><a xlink:href="javascript:alert(3)">'
           '<text>ok</text></a></g><foreignObject><div/></foreignObject></svg>')
  clean = widgets.sanitize_svg(dirty)
  assert "<script" not in clean and "onclick" not in clean
  assert "javascript:" not in clean and "foreignObject" not in clean
  assert "<text>ok</text>" in clean


def test_sanitize_svg_drops_references_and_animation():
  """What the old regex sanitizer kept: <use>, <image>, <animate>, <set>, style."""
  dirty = ('<svg><use href="#x"/><image href="x.png"/><g style="background:url(x)">'
           '<animate attributeName="href" to="javascript:alert(1)"/><set attributeName="onclick" to="x"/>'
           '<style>*{}</style><text data-x="1">ok</text></g></svg>')
  clean = widgets.sanitize_svg(dirty)
  for bad in ("<use", "<image", "<animate", "<set", "<style", "style=", "data-x", "javascript"):
    assert bad not in clean, (bad, clean)
  assert "<text>ok</text>" in clean


def test_sanitize_svg_keeps_a_real_graph(hook):
  from jupyter_vjpviz.render import svg
  drawn = svg.render(_fail())
  clean = widgets.sanitize_svg(drawn)
  assert 'viewBox="' in clean and "<title>" in clean and "xlink:title=" in clean
  assert clean.count("<g ") == drawn.count("<g ") and clean.count("<path") == drawn.count("<path")


def test_the_panel_reads_the_same_policy():
  """src/svgPolicy.json (DOMPurify's config in src/sanitize.ts) is this very file."""
  from pathlib import Path
  panel = Path(__file__).resolve().parents[1] / "src" / "svgPolicy.json"
  assert panel.resolve() == Path(widgets.__file__).with_name("svg_policy.json").resolve()


def test_insert_queues_the_code_for_the_next_cell(hook, monkeypatch):
  d = _fail()
  view = widgets.DiagnosisWidget(d, ipywidgets)
  calls = []

  class Events:
    def __init__(self):
      self.handlers = []

    def register(self, name, fn):
      self.handlers.append((name, fn))

    def unregister(self, name, fn):
      self.handlers.remove((name, fn))

  class Shell:
    events = Events()

    def set_next_input(self, text, replace=False):
      calls.append((text, replace))

  shell = Shell()
  import IPython
  monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
  view.insert.click()
  assert not calls and len(shell.events.handlers) == 1
  name, fn = shell.events.handlers[0]
  assert name == "post_run_cell"
  fn()
  assert calls == [(d.fixes[0].code, False)]
  assert shell.events.handlers == []


def test_should_show_only_without_a_listening_panel(monkeypatch):
  from jupyter_vjpviz.deliver import comm
  monkeypatch.setitem(comm._state, "listening", False)
  assert widgets.should_show()
  monkeypatch.setitem(comm._state, "listening", True)
  assert not widgets.should_show()
