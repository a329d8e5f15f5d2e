"""A Diagnosis as HTML: a standalone file (``render``) and an output-cell fragment.

The file must open anywhere, offline and forever, so everything is inline (SVG,
CSS) and nothing is fetched or scripted. The graph opens scrolled to the failing
node without a script: a snap point sits on it, and the snapping that scrolls
there on load is animated away (a discrete property flips half-way) so the user
scrolls freely after. Every string that came from the user's
program (function, scope, argument names, JAX's message quoting them) is
escaped here; the SVG's own text was escaped by graphviz.
"""
from __future__ import annotations

import html

from . import svg, text

STYLE = """
.vjpviz { font: 13px/1.4 -apple-system, Helvetica, Arial, sans-serif; color: #222; }
.vjpviz h2 { font-size: 15px; margin: 0 0 8px; }
.vjpviz .badge { display: inline-block; padding: 0 6px; border-radius: 3px; color: #fff;
  background: #D55E00; font-size: 11px; margin-right: 6px; }
.vjpviz .badge.warning { background: #0072B2; }
.vjpviz table { border-collapse: collapse; margin: 6px 0; }
.vjpviz td { padding: 1px 10px 1px 0; vertical-align: top; }
.vjpviz td:first-child { color: #666; }
.vjpviz .got { color: #D55E00; font-weight: bold; }
.vjpviz code, .vjpviz pre { font: 12px Menlo, Consolas, monospace; }
.vjpviz pre { white-space: pre-wrap; background: #f6f6f6; padding: 6px; margin: 4px 0; }
.vjpviz .graph { overflow: auto; max-height: 720px; border: 1px solid #ddd; margin-top: 8px;
  position: relative; scroll-snap-type: both mandatory; animation: vjpviz-unsnap 1s forwards; }
.vjpviz .focus { position: absolute; width: 1px; height: 1px; scroll-snap-align: center; }
@keyframes vjpviz-unsnap { to { scroll-snap-type: none; } }
.vjpviz .vjpviz-node-failed path, .vjpviz .vjpviz-node-failed polygon { stroke-width: 4; }
"""


def render(d) -> str:
  """One standalone HTML file."""
  return page([d], f"vjpviz: {d.headline}")


def page(found, title: str) -> str:
  """One standalone HTML file holding several diagnoses (the CLI's report)."""
  return _standalone("\n<hr>\n".join(fragment(d) for d in found), title)


def merged(parts: list[tuple[str, str]], title: str) -> str:
  """One standalone page of fragments each process rendered (``report DIR``), each under
  a heading saying which processes recorded it."""
  return _standalone("\n<hr>\n".join(f"<h3>{html.escape(where)}</h3>{part}"
                                       for where, part in parts), title)


def _standalone(body: str, title: str) -> str:
  return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
          f"<title>{html.escape(title)}</title></head>\n<body>{body}</body></html>\n")


def fragment(d) -> str:
  """The same report without <html>/<head>, for IPython's text/html output."""
  rows = "".join(
      f'<tr><td>{html.escape(k)}</td><td{" class=got" if k == "got" else ""}>'
      f"<code>{html.escape(str(v))}</code></td></tr>"
      for k, v in text.facts(d) if v)
  message = (f"<details><summary>JAX's message</summary><pre>{html.escape(d.message)}</pre>"
             "</details>") if d.message else ""
  fixes = "".join(f"<details><summary>fix: {html.escape(text.fix_label(f))}"
                  f"{html.escape(f.title)}</summary>"
                  f"<pre>{html.escape(f.code)}</pre>{html.escape(f.reason)}</details>"
                  for f in d.fixes)
  return (f'<div class="vjpviz" id="vjpviz-{html.escape(d.id)}"><style>{STYLE}</style>'
          f'<h2><span class="badge {html.escape(d.severity)}">{html.escape(d.severity)}</span>'
          f"{html.escape(d.headline)}</h2><table>{rows}</table>{message}{fixes}"
          f'<div class="graph">{_focused(svg.render(d), d.node)}</div></div>')


def _focused(image: str, node: str | None) -> str:
  """The graph, with a snap point on the failing node so it opens centred there."""
  at = svg.focus(image, node)
  return image if at is None else (
      f'<span class="focus" style="left:{at[0]:.0f}px;top:{at[1]:.0f}px"></span>{image}')
