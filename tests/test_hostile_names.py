"""Hostile names: a function, a bwd rule and named scopes holding HTML/JS stay inert text.

The primal's ``__name__``, the bwd rule's ``__name__`` and two named scopes carry
script payloads, one of them written with HTML entities (which must be shown as
typed, never decoded into a tag). Checked: the displayed bundle's text/html,
Diagnosis.to_html() and to_svg() in-process, then the text/html a real kernel
displays and its ``%vjpviz export`` page. Each is parsed with html.parser (only
our own elements, no event handler or URL attribute) and the pages are loaded
in headless Chromium, where ``window.__pwned`` must stay undefined.
"""
from __future__ import annotations

import html.parser
import os
import re
import shutil
import subprocess

import pytest
import softclip

import jupyter_vjpviz as vv
from jupyter_vjpviz.deliver import comm
from jupyter_vjpviz.deliver.display import MIME_TYPE, mimebundle
from jupyter_vjpviz.render import svg, views

IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=1</script>"
ENTITY = "&lt;img src=x onerror=window.__pwned=2&gt;"
DECODED = "<img src=x onerror=window.__pwned=2>"   # what a decoded ENTITY would read
HOSTILE = f'''import jax, jax.numpy as jnp

def primal(x):
    return x * 2.0
primal.__name__ = primal.__qualname__ = {IMG!r}
hostile = jax.custom_vjp(primal)

def bwd(res, g):
    return (g.T,)
bwd.__name__ = bwd.__qualname__ = {SCRIPT!r}
hostile.defvjp(lambda x: (hostile(x), None), bwd)

def model(x):
    with jax.named_scope({SCRIPT!r}), jax.named_scope({IMG + ENTITY!r}):
        return hostile(jnp.tanh(x)).sum()
'''
GRAD = "jax.grad(model)(jnp.ones((2, 3)))"

OURS = {"html", "head", "meta", "title", "body", "div", "style", "h2", "span", "table", "tr",
        "td", "code", "details", "summary", "pre", "hr", "svg", "g", "a", "text", "path",
        "polygon", "polyline", "ellipse"}
"""Every element our renderers write (graphviz's SVG included)."""
URLS = {"href", "xlink:href", "src", "action", "formaction"}


@pytest.fixture(scope="module")
def d():
  ns = softclip.define(HOSTILE)
  vv.install()
  vv.clear()
  try:
    with pytest.raises(ValueError):
      eval(GRAD, ns)  # noqa: S307 - our own test cell
    found = vv.last()
  finally:
    vv.uninstall()
  assert (found.function, found.rule) == (IMG, SCRIPT)
  assert found.name_stack == f"{SCRIPT}/{IMG}{ENTITY}"
  yield found
  vv.clear()


class Parsed(html.parser.HTMLParser):
  """Elements, attributes and text of a document, entities decoded as a browser would."""

  def __init__(self, doc: str):
    super().__init__(convert_charrefs=True)
    self.tags: list[str] = []
    self.attrs: list[tuple[str, str, str | None]] = []
    self.text: list[str] = []
    self.feed(doc)
    self.close()

  def handle_starttag(self, tag, attrs):
    self.tags.append(tag)
    self.attrs += [(tag, name, value) for name, value in attrs]

  handle_startendtag = handle_starttag

  def handle_data(self, data):
    self.text.append(data)


def assert_inert(doc: str, styles: int = 1) -> Parsed:
  """Only our elements, no handler or URL attribute; the payloads are there as text."""
  parsed = Parsed(doc)
  assert set(parsed.tags) <= OURS, set(parsed.tags) - OURS
  assert parsed.tags.count("style") == styles
  active = [a for a in parsed.attrs if a[1].startswith("on") or a[1] in URLS]
  assert not active, active
  shown = "\n".join(parsed.text + [v or "" for _, _, v in parsed.attrs])
  missing = [name for name in (IMG, SCRIPT, ENTITY) if name not in shown]
  assert not missing, f"not shown as text: {missing}"
  assert DECODED not in shown, f"{ENTITY!r} was decoded into {DECODED!r}"
  return parsed


def test_ipython_html_output_is_inert(d):
  bundle = mimebundle(d)
  assert_inert(bundle["text/html"])
  assert bundle[MIME_TYPE]["function"] == IMG   # the panel's JSON: data, shown as text


def test_html_page_is_inert(d):
  page = d.to_html()
  assert page.startswith("<!DOCTYPE html>")
  assert_inert(page)


def test_svg_is_inert_and_draws_names_as_typed(d):
  parsed = assert_inert(d.to_svg(), styles=0)
  labels = [v for tag, name, v in parsed.attrs if name == "xlink:title"]
  assert any(f"scope {SCRIPT}/{IMG}{ENTITY}" in v for v in labels), labels


def test_a_hostile_scope_box_carries_its_own_id(d):
  """The panel finds a box by its id and sends that id back: it must be the scope's id."""
  scope = f"scope:{d.name_stack}"
  view = views.default_view(d.graph, d.node, collapsed=[scope])
  assert scope in [c.id for c in view.clusters]
  ids = {v for _, name, v in Parsed(svg.of_view(view)).attrs if name == "id"}
  assert scope in ids
  reply = comm.handle({"v": 1, "type": "request", "request_id": "x", "op": "expand",
                       "args": {"report_id": d.id, "node": scope, "collapsed": [scope]}})
  assert reply["ok"], reply   # (d is in the history: the fixture keeps it)
  assert_inert(reply["result"]["svg"], styles=0)


@pytest.fixture(scope="module")
def kernel_pages(panel, tmp_path_factory) -> dict:
  """The text/html a real kernel displays for the hostile diagnosis, and its export."""
  assert panel.execute("%load_ext vjpviz\n" + HOSTILE)["status"] == "ok"
  assert panel.execute(GRAD)["status"] == "error"
  shown = [o["data"]["text/html"] for o in panel.outputs("display_data")
           if MIME_TYPE in o["data"]]
  page = tmp_path_factory.mktemp("export") / "hostile.html"
  assert panel.execute(f"%vjpviz export {page} --format html")["status"] == "ok"
  assert len(shown) == 1
  return {"output": shown[0], "export": page.read_text(encoding="utf-8")}


def test_real_kernel_output_and_export_are_inert(kernel_pages):
  assert_inert(kernel_pages["output"])
  assert kernel_pages["export"].startswith("<!DOCTYPE html>")
  assert_inert(kernel_pages["export"])


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PROBE = ("<script>setTimeout(function () { document.title = 'pwned:' + String(window.__pwned); },"
         " 500);</script>")


def as_page(fragment: str) -> str:
  """An output-cell fragment as the page a notebook would put it in."""
  return f"<!DOCTYPE html><html><head><title>t</title></head><body>{fragment}</body></html>"


def pwned(page: str, tmp_path, name: str) -> str:
  """window.__pwned after loading ``page`` (plus a probe) in headless Chromium."""
  path = tmp_path / f"{name}.html"
  path.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
  dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--virtual-time-budget=5000", "--dump-dom", path.as_uri()],
                       capture_output=True, text=True, timeout=120, check=True).stdout
  return re.search(r"<title>pwned:(\w+)</title>", dom).group(1)


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="no chromium")
def test_pages_run_no_payload_in_chromium(d, kernel_pages, tmp_path):
  # The probe does see a payload that runs: the same names, unescaped.
  assert pwned(as_page(f"<h2>{IMG}{SCRIPT}</h2>"), tmp_path, "control") == "1"
  pages = {"to_html": d.to_html(), "export": kernel_pages["export"],
           "fragment": as_page(mimebundle(d)["text/html"]),
           "output": as_page(kernel_pages["output"])}
  for name, page in pages.items():
    assert pwned(page, tmp_path, name) == "undefined", name
