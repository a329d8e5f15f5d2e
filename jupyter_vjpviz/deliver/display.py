"""A Diagnosis as a rich IPython output: text, HTML and the panel's JSON payload."""
from __future__ import annotations

from ..analysis.diagnosis import Diagnosis
from ..capture.records import safely

MIME_TYPE = "application/vnd.vjpviz.diagnosis+json"


def mimebundle(d: Diagnosis) -> dict:
  """Every representation we can make; a renderer failing drops only its own entry."""
  from ..render import html, text
  bundle = {"text/plain": safely(text.render, d, default=None) or d.headline}
  fragment = safely(html.fragment, d)
  if fragment:
    bundle["text/html"] = fragment
  bundle[MIME_TYPE] = d.to_dict()
  return bundle


class DiagnosisOutput:
  def __init__(self, diagnosis: Diagnosis):
    self.diagnosis = diagnosis

  def _repr_mimebundle_(self, include=None, exclude=None):
    return mimebundle(self.diagnosis)
