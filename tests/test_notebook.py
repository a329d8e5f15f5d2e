"""``%load_ext vjpviz`` in a real kernel: JAX's own error, then the rich diagnosis."""
import html
import logging
import re

import nbformat
import pytest
from nbclient import NotebookClient

from frozen_net import SOURCE as FROZEN

MIME = "application/vnd.vjpviz.diagnosis+json"

FAILING = """\
import jax, jax.numpy as jnp

@jax.custom_vjp
def softclip(x):
    return jnp.tanh(x)

def softclip_fwd(x):
    return softclip(x), x

def softclip_bwd(x, g):
    return (g.T,)          # wrong: float32[3,4] for a float32[4,3] input

softclip.defvjp(softclip_fwd, softclip_bwd)
jax.grad(lambda x: softclip(x).sum())(jnp.ones((4, 3)))
"""


def run(*cells):
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
  NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                 log=logging.getLogger(__name__)).execute()
  return nb.cells


@pytest.fixture(scope="module")
def outputs():
  plain, _, hooked = run(FAILING, "%load_ext vjpviz", FAILING)
  return plain.outputs, hooked.outputs


def test_error_reaches_user_unchanged(outputs):
  plain, hooked = outputs
  p_err = next(o for o in plain if o.output_type == "error")
  h_err = next(o for o in hooked if o.output_type == "error")
  assert (h_err.ename, h_err.evalue) == (p_err.ename, p_err.evalue)
  assert "softclip" in h_err.evalue


def _normalised_traceback(error) -> list[str]:
  """Without colours, cell numbers and the kernel's temp file names."""
  text = "\n".join(error.traceback)
  text = re.sub(r"\x1b\[[0-9;]*m", "", text)
  text = re.sub(r"Cell In\[\d+\]", "Cell", text)
  return re.sub(r"/tmp/ipykernel_\d+/", "/tmp/ipykernel/", text).splitlines()


def test_traceback_is_jaxs_plus_one_note(outputs):
  plain, hooked = (next(o for o in out if o.output_type == "error") for out in outputs)
  a, b = _normalised_traceback(plain), _normalised_traceback(hooked)
  assert b[:-1] == a and b[-1].startswith("vjpviz: ")


def test_rich_diagnosis_follows_the_traceback(outputs):
  _, hooked = outputs
  kinds = [o.output_type for o in hooked]
  assert kinds.index("error") < kinds.index("display_data")
  shown = next(o for o in hooked if o.output_type == "display_data")
  d = shown.data[MIME]
  assert (d["kind"], d["rule"], d["expected"], d["got"]) == (
      "bwd_type", "softclip_bwd", "float32[4,3]", "float32[3,4]")
  assert "softclip_bwd" in shown.data["text/plain"]
  assert d["node"] and any(n["id"] == d["node"] for n in d["graph"]["nodes"])


def test_a_frontend_without_a_panel_is_sent_no_comm(caplog):
  """nbclient (nbconvert's executor) is a frontend with no panel: it logged "No handler found
  for comm target 'vjpviz'" for the hello and for every diagnosis pushed to no one."""
  with caplog.at_level(logging.WARNING, logger=__name__):
    cells = run("%load_ext vjpviz", FAILING, FAILING)
  for cell in cells[1:]:   # each failure still diagnosed inline
    assert [o for o in cell.outputs if o.output_type == "display_data" and MIME in o.data]
  assert not [r.getMessage() for r in caplog.records if "comm target" in r.getMessage()]


def test_warning_in_kernel_without_error():
  (cell,) = run("%load_ext vjpviz\n" + FAILING.replace("(g.T,)", "(g.astype(jnp.bfloat16),)"))[-1:]
  assert not [o for o in cell.outputs if o.output_type == "error"]
  shown = [o for o in cell.outputs if o.output_type == "display_data"]
  assert shown and shown[0].data[MIME]["kind"] == "silent_dtype"


def test_unload_restores_plain_behaviour():
  cells = run("%load_ext vjpviz", "%unload_ext vjpviz", FAILING, "%vjpviz")
  assert not [o for o in cells[2].outputs if o.output_type == "display_data"]
  (gone,) = cells[3].outputs                     # no magic left behind
  assert "Line magic function `%vjpviz` not found" in gone.text


def test_full_package_name_loads_too():
  (cell,) = run("%load_ext jupyter_vjpviz\n" + FAILING)[-1:]
  shown = [o for o in cell.outputs if o.output_type == "display_data" and MIME in o.data]
  assert shown and shown[0].data[MIME]["rule"] == "softclip_bwd"


@pytest.fixture(scope="module")
def cells_named():
  """A frozen body through ``vv.grads`` (cell 2), the failing rule (cell 3), then the
  report's payload printed (cell 4)."""
  return run("%load_ext vjpviz", FROZEN, FAILING,
             "import json; print(json.dumps(report.to_dict()['places']))")


def test_sources_name_the_cell_as_ipython_does(cells_named):
  """``Cell In[2], line 7`` in the report's text and HTML, the diagnosis's text and the
  headline, never the temp file IPython compiled the cell into."""
  grads, failing = cells_named[1], cells_named[2]
  report = next(o for o in grads.outputs if o.output_type == "execute_result")
  assert "Cell In[2], line 7" in report.data["text/html"]
  shown = next(o for o in failing.outputs if o.output_type == "display_data" and MIME in o.data)
  text = shown.data["text/plain"]
  assert "softclip_bwd (Cell In[3], line 10)" in text and "called at Cell In[3], line 14" in text
  assert "Cell In[3], line 10" in shown.data["text/html"]
  # JAX's own message, quoted as JAX wrote it, is the only place the temp file is named.
  jaxs = shown.data[MIME]["message"]
  assert "ipykernel" not in text + report.data["text/html"] + shown.data["text/html"].replace(
      html.escape(jaxs), "")
  places = shown.data[MIME]["places"]
  rule = places[shown.data[MIME]["rule_source"]]
  assert rule == {"text": "Cell In[3], line 10", "cell": 3, "line": 10}


def test_the_report_names_where_a_click_goes(cells_named):
  """The panel's payload keeps the machine's file:line and says which cell and line it is."""
  import json
  printed = next(o for o in cells_named[3].outputs if o.output_type == "stream")
  places = json.loads(printed.text)
  cut = next(p for where, p in places.items() if where.endswith(":7"))
  assert cut == {"text": "Cell In[2], line 7", "cell": 2, "line": 7}
