"""The Python package, the npm package and the installed labextension agree."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_JSON = json.loads((ROOT / "package.json").read_text())


def test_python_and_npm_versions_agree():
    assert PYPROJECT["project"]["version"] == PACKAGE_JSON["version"]


def test_wheel_ships_the_built_labextension():
    wheel = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]
    target = f"share/jupyter/labextensions/{PACKAGE_JSON['name']}"
    assert wheel["shared-data"][PACKAGE_JSON["jupyterlab"]["outputDir"]] == target
    assert wheel["shared-data"]["install.json"] == f"{target}/install.json"
    assert wheel["packages"] == ["jupyter_vjpviz", "vjpviz"]


def test_labextension_is_installed_and_enabled():
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter", "labextension", "list"],
        capture_output=True,
        text=True,
        check=True,
    )
    plain = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)
    version = PACKAGE_JSON["version"]
    assert f"jupyter-vjpviz v{version} enabled OK (python, jupyter_vjpviz)" in plain, plain


def test_vjpviz_alias_loads_the_extension():
    import jupyter_vjpviz
    import vjpviz

    assert vjpviz.load_ipython_extension is jupyter_vjpviz.load_ipython_extension
    assert vjpviz.unload_ipython_extension is jupyter_vjpviz.unload_ipython_extension
    # The note on a diagnosed error says "vjpviz.last()": the alias has the whole API.
    for name in jupyter_vjpviz.__all__:
        assert getattr(vjpviz, name) is getattr(jupyter_vjpviz, name), name


def test_panel_keeps_as_many_diagnoses_as_the_kernel():
  from jupyter_vjpviz.api.pipeline import HISTORY_LIMIT
  model = ROOT / "src" / "panels" / "diagnoses" / "model.ts"
  panel = re.search(r"export const MAX_DIAGNOSES = (\d+);", model.read_text())
  assert panel and int(panel.group(1)) == HISTORY_LIMIT
