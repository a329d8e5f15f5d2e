"""The render stage: a Diagnosis (plain data) as a view, DOT, SVG, HTML or text.

It never imports capture or deliver and never traces JAX: it only reads the
Graph the analysis stage built, so it can run long after the failing call.
"""

from ..analysis import diagnosis
from . import dot, html, svg, text

diagnosis.RENDERINGS.update(text=text.render, dot=dot.render, svg=svg.render, html=html.render)
