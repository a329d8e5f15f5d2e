"""The magics in a real kernel (nbclient), as a user would type them."""
import html
import json
import os
import pathlib

import jax
import nbformat
import pytest
from nbclient import NotebookClient

REPO = pathlib.Path(__file__).resolve().parents[1]
MIME = "application/vnd.vjpviz.diagnosis+json"

CELLS = {
    "load": "%load_ext vjpviz",
    "define": """
import jax, jax.numpy as jnp
@jax.custom_vjp
def act(x): return jnp.sin(x)
def act_fwd(x): return act(x), x
def act_bwd(x, g): return ((jnp.cos(x) * g).astype(jnp.bfloat16),)
act.defvjp(act_fwd, act_bwd)
@jax.custom_vjp
def good(x): return 2 * x
good.defvjp(lambda x: (good(x), None), lambda r, g: (2 * g,))
def loss(x): return good(act(x)).sum()
x = jnp.ones(3)
""",
    "silent": "%%vjpviz\ng = jax.grad(loss)(x)\nprint('grad dtype', g.dtype)",
    "forward_only": "%%vjpviz\ny = act(x)",
    "strict": "%%vjpviz --strict\ng = jax.grad(loss)(x)",
    "clean": "%%vjpviz --strict\ny = good(x)",
    "check": "%vjpviz check loss(x)",
    "values_define": """
@jax.custom_vjp
def twice(x): return jnp.sin(x)
twice.defvjp(lambda x: (twice(x), x), lambda x, g: (2 * jnp.cos(x) * g,))
@jax.custom_vjp
def ste(x): return jnp.round(x)
ste.defvjp(lambda x: (ste(x), None), lambda _, g: (g,))
def vloss(x): return jax.jit(lambda x: ste(twice(x)).sum())(x)
""",
    "values_check": "%vjpviz check --values vloss(x)",
    "values_cell": "%%vjpviz --values\ng = jax.grad(vloss)(x)\nprint('grad', g.shape)",
    "values_strict": "%%vjpviz --values --strict\ng = jax.grad(vloss)(x)",
    "no_values": "%%vjpviz\ng = jax.grad(vloss)(x)",
    "failing": """
@jax.custom_vjp
def lin(x): return x
lin.defvjp(lambda x: (lin(x), None), lambda r, g: (g[:2],))
jax.grad(lambda x: lin(x).sum())(x)
""",
    "repr": "import jupyter_vjpviz as vv\nvv.last()",
    "status": "%vjpviz",
    "list": "%vjpviz list",
    "last": "%vjpviz last",
    "export": ("%vjpviz export {tmp}/d.json\n%vjpviz export {tmp}/d.txt --format txt\n"
               "%vjpviz export {tmp}/d.html\n%vjpviz export {tmp}/d.svg"),
    "clear": "%vjpviz clear\n%vjpviz list\nprint('after clear')",
    "off": "%vjpviz off\n%vjpviz",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("magics")
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_code_cell(src.format(tmp=tmp) if name == "export" else src)
              for name, src in CELLS.items()]
  env_path = os.environ.get("PYTHONPATH", "")
  os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env_path) if p)
  client = NotebookClient(nb, kernel_name="python3", timeout=300, allow_errors=True,
                          resources={"metadata": {"path": str(tmp)}})
  client.execute()
  outputs = dict(zip(CELLS, (c.outputs for c in nb.cells)))
  return outputs, tmp


def text(outputs) -> str:
  parts = []
  for o in outputs:
    if o.output_type == "stream":
      parts.append(o.text)
    elif o.output_type in ("display_data", "execute_result"):
      parts.append(o.data.get("text/plain", ""))
    elif o.output_type == "error":
      parts.append(f"{o.ename}: {o.evalue}")
  return "\n".join(parts)


def diagnoses(outputs) -> list:
  return [o.data[MIME] for o in outputs
          if o.output_type == "display_data" and MIME in o.data]


def test_a_diagnosis_typed_in_a_cell_displays_itself(run):
  outputs, _ = run
  (result,) = [o for o in outputs["repr"] if o.output_type == "execute_result"]
  assert result.data[MIME]["kind"] == "bwd_type" and result.data[MIME]["function"] == "lin"
  assert html.escape(result.data[MIME]["headline"]) in result.data["text/html"]
  assert result.data["text/plain"].startswith("vjpviz error: lin's bwd rule")


def test_cell_magic_catches_a_silent_bfloat16_gradient(run):
  outputs, _ = run
  out = text(outputs["silent"])
  assert "grad dtype bfloat16" in out  # JAX itself raised nothing
  assert "2 custom rules checked, 1 problem" in out
  (d,) = diagnoses(outputs["silent"])
  assert d["kind"] == "silent_dtype" and d["expected"] == "float32[3]" and d["got"] == "bfloat16[3]"
  assert d["fixes"] and ".astype(x.dtype)" in d["fixes"][0]["code"]


def test_strict_raises_only_on_problems(run):
  outputs, _ = run
  assert "VjpvizProblems: 2 custom rules checked, 1 problem" in text(outputs["strict"])
  clean = text(outputs["clean"])
  assert "1 custom rule checked, 0 problems" in clean and "Error" not in clean


@pytest.mark.parametrize("cell, said", [
    ("forward_only", "1 custom rule checked, 1 problem"),   # %%vjpviz: rules the cell only ran forward
    ("check", "loss(x): 1 problem")])                        # %vjpviz check loss(x)
def test_a_check_finds_the_one_silent_dtype(run, cell, said):
  outputs, _ = run
  assert said in text(outputs[cell])
  assert [d["kind"] for d in diagnoses(outputs[cell])] == ["silent_dtype"]


def test_status_list_last_export_clear_off(run):
  outputs, tmp = run
  assert "ValueError" in text(outputs["failing"])
  status = text(outputs["status"])
  assert "vjpviz: installed" in status and f"JAX {jax.__version__}" in status
  assert "custom_vjp path: classic" in status and "panel listening: no" in status
  assert "bwd_type" not in text(outputs["list"]) and "lin's bwd rule" in text(outputs["list"])
  assert diagnoses(outputs["last"])[0]["function"] == "lin"
  exported = json.loads((tmp / "d.json").read_text())
  assert exported["function"] == "lin" and exported["kind"] == "bwd_type"
  assert "lin" in (tmp / "d.txt").read_text()
  page = (tmp / "d.html").read_text()
  assert page.startswith("<!DOCTYPE html>") and "vjpviz-node-failed" in page and "<script" not in page
  assert (tmp / "d.svg").read_text().lstrip().startswith(("<svg", "<?xml"))
  assert "wrote" in text(outputs["export"])
  assert text(outputs["clear"]).strip() == "after clear"
  assert "vjpviz: not installed" in text(outputs["off"])


def test_values_line_magic_warns_about_a_wrong_rule_and_says_what_it_cannot_judge(run):
  outputs, _ = run
  out = text(outputs["values_check"])
  assert ("vloss(x): 2 custom rules value-checked: 1 differs from the primal's derivative, "
          "1 not judged") in out
  assert "not judged: ste's bwd rule <lambda>: unverifiable" in out and "round" in out
  (d,) = diagnoses(outputs["values_check"])
  assert d["kind"] == "bwd_value" and d["function"] == "twice" and d["argument"] == "x"
  (leaf,) = d["leaf_errors"]
  assert leaf["name"] == "x" and leaf["max_rel"] > 0.5
  assert any(e.get("value_error") for e in d["graph"]["edges"])


def test_values_cell_magic_checks_the_rules_the_cell_differentiated(run):
  outputs, _ = run
  out = text(outputs["values_cell"])
  assert "grad (3,)" in out and "2 custom rules checked, 0 problems" in out
  assert "2 custom rules value-checked: 1 differs" in out
  assert [d["kind"] for d in diagnoses(outputs["values_cell"])] == ["bwd_value"]
  assert "VjpvizProblems" in text(outputs["values_strict"])
  plain = text(outputs["no_values"])     # opt-in: without --values no value is judged
  assert "value-checked" not in plain and diagnoses(outputs["no_values"]) == []
