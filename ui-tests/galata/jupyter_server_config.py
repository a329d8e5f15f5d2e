"""The server Galata drives (ui-tests/run.sh starts it; its command line sets the port,
root and dirs): JupyterLab's own test settings, which load Galata's in-page helpers."""
from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821 - `c` is the config object Jupyter passes
c.ServerApp.allow_root = True
