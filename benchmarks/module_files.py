"""Generated programs as real module files, so every line a diagnosis names is a real line."""
from __future__ import annotations

import importlib.util
import itertools
import os

_loaded = itertools.count()


def load(text: str, directory: str, stem: str, prefix: str = "generated"):
  """``text`` written to ``directory/stem.py`` and imported as a fresh module
  (``prefix_stem_N``: a new name each time, so nothing is cached between imports)."""
  path = os.path.join(directory, f"{stem}.py")
  with open(path, "w") as f:
    f.write(text)
  spec = importlib.util.spec_from_file_location(f"{prefix}_{stem}_{next(_loaded)}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
