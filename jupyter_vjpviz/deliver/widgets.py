"""The inline fallback: the panel's essentials as ipywidgets in the cell output.

For frontends without the JupyterLab panel (VS Code, Colab, classic tools, the
extension disabled): headline, expected-vs-got diff, graph, an editable fix,
Verify, and "Insert fixed code" (into the next cell via ``set_next_input``;
the text area is there to copy from otherwise). Nothing runs without a click.

``fallback(d)`` returns the widget, or None when ipywidgets is missing;
``should_show()`` is False once a panel has talked to this kernel.
"""
from __future__ import annotations

import functools
import html
import json
from importlib import resources

import nh3

from ..base.places import spelled
from ..base.safety import safely


def should_show() -> bool:
  """Show inline widgets only while no panel listens on this kernel."""
  from . import comm
  return not comm.listening()


def fallback(d):
  """An ipywidgets view of a Diagnosis, or None without ipywidgets."""
  try:
    import ipywidgets as w
  except ImportError:
    return None
  return DiagnosisWidget(d, w).box


def sanitize_svg(svg: str) -> str:
  """SVG text with only what the shared policy keeps (svg_policy.json, which the
  panel's DOMPurify reads too): drawing, never anything that embeds or runs."""
  return nh3.clean(svg, **_policy())


@functools.cache
def _policy() -> dict:
  p = json.loads(resources.files(__package__).joinpath("svg_policy.json").read_text())
  return dict(tags=set(p["elements"]), attributes={"*": set(p["attributes"])},
              clean_content_tags=set(p["drop_with_content"]), url_schemes=set(p["url_schemes"]),
              link_rel=None, strip_comments=True)


def diff_rows(d) -> list[tuple[str, str, str]]:
  if d.expected is None and d.got is None:
    return []
  return [(d.path or "(output)", d.expected or "", d.got or "")]


class DiagnosisWidget:
  def __init__(self, d, w):
    self.d = d
    e = html.escape
    rows = "".join(
        f"<tr data-vjpviz-path='{e(p, quote=True)}'><td><code>{e(p)}</code></td>"
        f"<td><code>{e(x)}</code></td><td><code style='color:var(--jp-error-color1,#c00)'>{e(g)}</code></td></tr>"
        for p, x, g in diff_rows(d))
    summary = (f"<div class='vjpviz-inline'><b>{e(d.headline)}</b>"
               + (f"<table><tr><th>path</th><th>expected</th><th>got</th></tr>{rows}</table>" if rows else "")
               + (f"<div><code>{e(spelled(d.rule_source or d.source) or '')}</code></div>") + "</div>")
    self.summary = w.HTML(summary)
    self.graph = w.HTML(layout=w.Layout(max_height="420px", overflow="auto"))
    self.graph_button = w.Button(description="Show graph", icon="project-diagram")
    self.graph_button.on_click(lambda _: self._show_graph())
    fixes = list(d.fixes)
    self.picker = w.Dropdown(options=[(f.title, i) for i, f in enumerate(fixes)],
                             layout=w.Layout(width="100%", display="" if len(fixes) > 1 else "none"))
    self.editor = w.Textarea(value=fixes[0].code if fixes else "",
                             layout=w.Layout(width="100%", height="140px"),
                             placeholder="def rule(res, g): ...")
    self.picker.observe(lambda ch: self._choose(ch["new"]), names="value")
    self.verify = w.Button(description="Verify", button_style="primary")
    self.insert = w.Button(description="Insert fixed code")
    self.result = w.HTML()
    self.verify.on_click(lambda _: self._verify())
    self.insert.on_click(lambda _: self._insert())
    self.box = w.VBox([self.summary, self.graph_button, self.graph, self.picker, self.editor,
                       w.HBox([self.verify, self.insert]), self.result])

  def _choose(self, i) -> None:
    fixes = list(self.d.fixes)
    if i is not None and 0 <= i < len(fixes):
      self.editor.value = fixes[i].code

  def _show_graph(self) -> None:
    try:
      from ..render import svg
      self.graph.value = sanitize_svg(svg.render(self.d))
    except Exception as err:  # noqa: BLE001 - shown to the user, never raised
      self.graph.value = f"<i>graph unavailable: {html.escape(str(err))}</i>"

  def _verify(self) -> None:
    from .ops.diagnoses import verify_result
    self.result.value = "<i>verifying…</i>"
    out = safely(verify_result, self.d, self.editor.value,
                 default={"pass": False, "summary": "verification failed to run"})
    colour = "var(--jp-success-color1,#080)" if out["pass"] else "var(--jp-error-color1,#c00)"
    self.result.value = (f"<span data-vjpviz-verify='{'pass' if out['pass'] else 'fail'}' "
                         f"style='color:{colour}'>{'Pass' if out['pass'] else 'Still failing'}: "
                         f"{html.escape(out.get('summary', ''))}</span>")

  def _insert(self) -> None:
    """``set_next_input`` only rides on an execute reply, and a button click is
    not an execution: queue it for the next cell the user runs."""
    try:
      from IPython import get_ipython
      ip = get_ipython()
    except ImportError:
      ip = None
    if ip is None or not hasattr(ip, "set_next_input"):
      self.result.value = "Copy the code from the box above."
      return
    code = self.editor.value

    def once(result=None):
      ip.events.unregister("post_run_cell", once)
      ip.set_next_input(code, replace=False)

    ip.events.register("post_run_cell", once)
    self.result.value = ("The fixed code goes into a new cell when you next run a cell "
                         "(or copy it from the box above).")
