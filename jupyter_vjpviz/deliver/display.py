"""A Diagnosis as a rich IPython output: text, HTML and the panel's JSON payload."""
from __future__ import annotations

from ..analysis.diagnosis import Diagnosis
from ..base.safety import safely
from ..base.unchecked import Unchecked

MIME_TYPE = "application/vnd.vjpviz.diagnosis+json"


def show(d: Diagnosis | Unchecked) -> None:
  """Display ``d`` as an output of its own (an ``Unchecked``: its line).

  The bundle is made here, not lazily by IPython's formatter, so a renderer
  failing costs vjpviz's one line instead of a formatter traceback.
  """
  if isinstance(d, Unchecked):
    print(d)
    return
  from IPython.display import display
  display(mimebundle(d), raw=True)


def mimebundle(d: Diagnosis) -> dict:
  """Every representation we can make; a renderer failing drops only its own entry."""
  bundle = {"text/plain": safely(d.to_text, default=None) or f"vjpviz: {d.headline}"}
  fragment = safely(_html_fragment, d)
  if fragment:
    bundle["text/html"] = fragment
  payload = safely(d.to_dict)
  if payload is not None:
    bundle[MIME_TYPE] = payload
  return bundle


def _html_fragment(d: Diagnosis) -> str:
  from ..render import html
  return html.fragment(d)
