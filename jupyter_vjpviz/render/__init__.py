"""The render stage: a Diagnosis (plain data) as a view, DOT, SVG, HTML or text.

It never imports capture or deliver and never traces JAX: it only reads the
Graph the analysis stage built, so it can run long after the failing call.
"""

from ..analysis import diagnosis
from . import dot, html, svg, text

# Looked up at each call, so the renderer called is the module's current one.
diagnosis.RENDERINGS.update({m.__name__.rsplit(".", 1)[1]: lambda d, m=m, **view: m.render(d, **view)
                             for m in (dot, html, svg, text)})
