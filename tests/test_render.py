"""Renderings of a real diagnosis: text, DOT, SVG, HTML; escaping, layout without dot, deadlines."""
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from test_capture import doubled_with_accums

import jupyter_vjpviz as vv
from jupyter_vjpviz.render import dot, html, layout, svg, text, views

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<img/src=x/onerror=alert(1)>"   # no spaces: JAX's debug_info cuts names at one
SCOPE = 'blk"{<b>}\\N'       # quotes, braces, a tag and a DOT escape


@pytest.fixture(scope="module")
def d():
  """A bwd rule returning g.T, on a custom_vjp whose primal is named with HTML."""
  def primal(x):
    return x * 2.0
  primal.__name__ = EVIL
  evil = jax.custom_vjp(primal)
  evil.defvjp(lambda x: (evil(x), None), lambda _, g: (g.T,))

  def model(w, x):
    for i in range(4):
      with jax.named_scope(f"{SCOPE}{i}"):
        x = jnp.tanh(x @ w)
        x = evil(x) if i == 2 else x * 2.0
    return x.sum()
  vv.install()
  vv.clear()
  try:
    jax.grad(model)(jnp.ones((4, 4)), jnp.ones((2, 4)))
  except ValueError:
    pass
  found = vv.last()
  vv.uninstall()
  vv.clear()
  assert found is not None and found.node is not None and found.function == EVIL
  return found


def test_text_report_has_the_facts_and_the_failing_edge(d):
  report = d.to_text()
  assert report.startswith(f"vjpviz error: {d.headline}")
  assert "expected  float32[2,4]" in report and "got       float32[4,2]" in report
  assert f"node {d.node} {EVIL} (custom_vjp_call)" in report
  assert "P float32[2,4] / CT float32[2,4]  ✖ got float32[4,2]" in report
  assert text.render(d) == report


def test_html_is_standalone_and_escapes_user_names(d):
  page = d.to_html()
  assert page.startswith("<!DOCTYPE html>") and "</html>" in page
  assert EVIL not in page and "<img" not in page and "<script" not in page
  assert "<b>" not in page and "&lt;img/src=x/onerror=alert(1)&gt;" in page
  assert set(re.findall(r"https?://[^\s\"']+", page)) <= {
      "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
  assert "<details><summary>JAX's message</summary><pre>Custom VJP bwd rule" in page
  assert 'class="node vjpviz-node vjpviz-node-failed"' in page and f'id="{d.node}"' in page


def test_fragment_is_the_body_only(d):
  part = html.fragment(d)
  assert "<html" not in part and "<head" not in part and part.startswith('<div class="vjpviz"')
  assert "<svg" in part and "vjpviz-node-failed" in part and EVIL not in part


def test_dot_labels_are_literal(d):
  source = d.to_dot()
  assert "\\\\N" in source and "<<" not in source   # no HTML-like label, \N stays literal
  image = d.to_svg()
  assert "▸ blk&quot;{&lt;b&gt;}\\N0 … blk&quot;{&lt;b&gt;}\\N1" in image   # the x2 group
  assert "scope blk&quot;{&lt;b&gt;}\\N2&#10;" in image                       # a tooltip


def test_legend_lists_only_what_the_view_draws(d, hook):
  bad = jax.custom_vjp(lambda x: x * 2.0)
  bad.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g.T,))
  with pytest.raises(ValueError):
    jax.grad(lambda x: bad(x).sum())(jnp.ones((2, 3)))
  small = vv.last()
  legend = small.to_dot().split("subgraph cluster_legend", 1)[1]
  assert "✖ failing node" in legend and "✖ mismatched cotangent" in legend
  for absent in ("collapsed scope", "identical", "folded run", "custom rule"):
    assert absent not in legend   # this view has none of them
  assert {"▸ identical blocks ×N", "✖ failing node", "✖ mismatched cotangent"} <= set(
      re.findall(r'label="([^"]+)"', d.to_dot()))


def test_inline_html_opens_on_the_failing_node(d):
  """A snap point on the failing box scrolls the graph there on load, without a script."""
  part = html.fragment(d)
  left, top = map(int, re.search(r'<span class="focus" style="left:(\d+)px;top:(\d+)px">',
                                 part).groups())
  image = part[part.index("<svg"):]
  shift = re.search(r'translate\(([-\d.]+) ([-\d.]+)\)', image).groups()
  box = image[image.index(f'id="{d.node}"'):]
  points = re.search(r'<(?:path|polygon)[^>]* (?:d|points)="([^"]+)"', box)[1]
  xs, ys = zip(*((float(a), float(b)) for a, b in re.findall(r"([-\d.]+),([-\d.]+)", points)))
  x, y = left / svg.PX_PER_PT - float(shift[0]), top / svg.PX_PER_PT - float(shift[1])
  assert min(xs) - 1 <= x <= max(xs) + 1 and min(ys) - 1 <= y <= max(ys) + 1
  assert "scroll-snap-align: center" in part and "<script" not in part


def test_layout_falls_back_to_a_simpler_view_when_slow(d, monkeypatch):
  real, calls = layout.svg, []

  def slow_once(source, timeout):
    calls.append(timeout)
    if len(calls) == 1:
      raise layout.LayoutTimeout("layout took longer than 1.3 s")
    return real(source, timeout)
  monkeypatch.setattr(layout, "svg", slow_once)
  image = svg.render(dataclasses.replace(d, graph=dataclasses.replace(d.graph)))   # not drawn yet
  assert "showing a simpler view" in image and "vjpviz-node-failed" in image
  assert calls[0] < svg.TIMEOUT and calls[1] <= svg.TIMEOUT   # the remainder of one budget


def test_layout_past_the_deadline_is_a_message_not_a_hang(d):
  view = views.default_view(d.graph, d.node)
  layout._stop()  # a cold worker can't start in a millisecond
  t = time.monotonic()
  image = svg.of_view(view, timeout=0.001)
  assert time.monotonic() - t < 1.0
  assert image.startswith("<svg") and "could not lay out the graph" in image


def test_layout_needs_no_dot_on_path(tmp_path):
  script = ("import shutil; from jupyter_vjpviz.render import layout; "
            "assert shutil.which('dot') is None; print(layout.svg('digraph { a -> b }', 30))")
  env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
  out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  assert "<svg" in out.stdout and "<title>a&#45;&gt;b</title>" in out.stdout


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="no chromium")
def test_html_export_opens_in_headless_chromium(d, tmp_path):
  page, shot = tmp_path / "diagnosis.html", tmp_path / "shot.png"
  page.write_text(d.to_html(), encoding="utf-8")
  flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1400"]
  subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                 timeout=120, check=True)
  assert shot.exists() and shot.stat().st_size > 10_000
  dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                       timeout=120, check=True).stdout
  assert re.search(r'<g id="[^"]+" class="node vjpviz-node vjpviz-node-failed">', dom)
  assert "✖ &lt;img/src=x/onerror=alert(1)&gt;" in dom


def test_the_exception_comes_first_then_the_diagnosis_with_its_fixes(hook):
  """The exception (with its note) waits neither on listeners (views, SVG) nor on judging
  fixes (up to a second): they follow it, where it has been shown (``pipeline.follow``),
  and each listener hears of the diagnosis once, its fixes and rule text attached."""
  from jupyter_vjpviz.api import pipeline
  seen = []
  listener = lambda found, exc: seen.append((found, exc))   # noqa: E731
  pipeline.add_listener(listener)
  bad = jax.custom_vjp(lambda x: x * 2.0)
  bad.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g.T,))
  try:
    with pytest.raises(ValueError) as raised:
      jax.grad(lambda x: bad(x).sum())(jnp.ones((2, 3)))
    assert seen == []   # raised before any listener ran or any fix was judged
    (headline,) = raised.value.__vjpviz__
    assert not headline.fixes and headline.rule_text is None
    assert f"vjpviz: {headline.headline}" in "".join(raised.value.__notes__)
    pipeline.follow(raised.value)
  finally:
    pipeline.remove_listener(listener)
  ((shown, exc),) = seen
  assert exc is raised.value and shown[0].id == headline.id
  assert shown[0].graph.nodes and svg.of_view(views.default_view(shown[0].graph, shown[0].node))
  assert shown[0].fixes and "g.T" in shown[0].rule_text.text   # a lambda: its statement
  assert vv.last() is shown[0] and raised.value.__vjpviz__ == shown


def test_reading_the_history_finishes_what_followed_a_caught_error(hook):
  """A script that catches the error: ``vjpviz.last()`` judges the fixes then, and the
  listeners that follow get a stand-in, never an exception vjpviz kept."""
  from jupyter_vjpviz.api import pipeline
  seen = []
  listener = lambda found, exc: seen.append(exc)   # noqa: E731
  pipeline.add_listener(listener)
  bad = jax.custom_vjp(lambda x: x * 2.0)
  bad.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g[:1],))
  try:
    try:
      jax.grad(lambda x: bad(x).sum())(jnp.ones(3))
    except ValueError:
      pass
    assert seen == []
    d = vv.last()
  finally:
    pipeline.remove_listener(listener)
  assert seen == [pipeline.RAISED] and d.fixes and vv.diagnoses() == [d]


def test_a_view_is_laid_out_once_for_the_push_the_output_and_the_first_request(d, monkeypatch):
  real, calls = layout.svg, []
  monkeypatch.setattr(layout, "svg", lambda source, timeout: calls.append(1) or real(source, timeout))
  fresh = dataclasses.replace(d, graph=dataclasses.replace(d.graph))
  view = views.default_view(fresh.graph, fresh.node)
  assert views.default_view(fresh.graph, fresh.node) is view
  assert svg.render(fresh) == svg.of_view(view) and len(calls) == 1
  opened = views.expand(view, next(c.id for c in view.clusters))   # another view: laid out anew
  assert svg.of_view(opened) != svg.of_view(view) and len(calls) == 2


def _value_accumulator():
  """``f_vjp.with_refs`` given an accumulator of the wrong type for ``x``."""
  from jax.experimental.hijax import ShapedArray, ValAccum
  _, f_vjp = jax.vjp(lambda x, y: jnp.sin(x) * y, jnp.ones(3), jnp.ones(3))
  f_vjp.with_refs(ValAccum(ShapedArray((4,), jnp.float32)), jax.ad.GradValue())(jnp.ones(3))


def _gradient_ref():
  """``f_vjp.with_refs`` given a gradient Ref of the wrong type for a Ref input."""
  _, f_vjp = jax.vjp(lambda w, x: jnp.sin(w[...] * x), jax.new_ref(jnp.ones(3)), jnp.ones(3))
  f_vjp.with_refs(jax.new_ref(jnp.zeros(4)), jax.ad.GradValue())(jnp.ones(3))


def _rule_with_accumulators():
  """A custom_vjp rule pushing a cotangent of the wrong shape into its input's accumulator."""
  def h_bwd(res, g, x_acc):
    x_acc.accum(g[:2] * 2.)
  h = doubled_with_accums(h_bwd)
  jax.grad(lambda x: h(x).sum())(jnp.ones(3))


def _cotangent_given_to_a_vjp():
  jax.vjp(jnp.sin, jnp.ones((2, 3)))[1](jnp.ones((3, 2)))


@pytest.mark.parametrize("fails, expected, got", [
    pytest.param(_value_accumulator, "float32[3]", "float32[4]",
                 marks=pytest.mark.needs("accumulator_type")),
    pytest.param(_gradient_ref, "Ref{float32[3]}", "Ref{float32[4]}",
                 marks=pytest.mark.needs("grad_ref_type")),
    pytest.param(_rule_with_accumulators, "float32[3]", "float32[2]",
                 marks=pytest.mark.needs("accumulator_type")),
    (_cotangent_given_to_a_vjp, "float32[2,3]", "float32[3,2]"),
], ids=["value-accumulator", "gradient-ref", "rule-accumulator", "vjp-cotangent"])
def test_an_accumulators_wrong_type_is_drawn_on_its_edge(hook, fails, expected, got):
  """The failing node's edge says what was expected and what the accumulator got, as a
  rule's wrong return does: in the graph, the view and the DOT the SVG is drawn from."""
  with pytest.raises(Exception):
    fails()
  d = vv.last()
  (edge,) = [e for e in d.graph.edges if e.mismatch]
  assert d.node in (edge.src, edge.dst) and (edge.cotangent, edge.cotangent_got) == (expected, got)
  v = views.default_view(d.graph, d.node)
  assert [e.shown for e in v.edges if e.mismatch] == [edge]
  assert f"CT {expected}\\ngot {got}" in dot.source(v)
