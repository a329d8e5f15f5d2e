"""The render stage: a Diagnosis (plain data) as a view, DOT, SVG, HTML or text.

It never imports capture or deliver and never traces JAX: it only reads the
Graph the analysis stage built, so it can run long after the failing call.
"""

import importlib

from ..analysis import diagnosis


def _renderer(fmt: str):
  """``fmt``'s renderer, looked up at each call: the module imported now (a test may
  have patched it, or a fresh import replaced it) is the one that renders."""
  return lambda d, **view: importlib.import_module(f"{__name__}.{fmt}").render(d, **view)


def _grads_renderer(name: str):
  """A gradient report's renderer in ``grads_view``, looked up at each call as above."""
  return lambda r: getattr(importlib.import_module(f"{__name__}.grads_view"), name)(r)


diagnosis.RENDERINGS.update({fmt: _renderer(fmt) for fmt in ("dot", "html", "svg", "text")})
diagnosis.RENDERINGS.update(grads_text=_grads_renderer("text"),
                            grads_html=_grads_renderer("html_fragment"))
