"""The capability matrix: every rule API x transformation x context x defect, judged against plain JAX.

Each cell is a module written by ``capability_programs`` (a rule made wrong for input
``w`` by construction, its plain primal, a context, a transformation). Per cell:

  truth      plain JAX runs the cell (raises or not) and the same program with the rule
             right: where that raises too, JAX refuses the transformation for the rule API
             (``refused``; not a rule error, left out of the counts).
  diagnosed  with the hook on, a diagnosis of the defect's kind (type, structure, raised)
             for the rule's role that names the rule's def and, for a backward rule, ``w``.
  fix right  the first fix of that diagnosis pasted over the rule's def in the module
             (registration untouched: as the user registered it), re-run under plain JAX,
             equal to the same transformation of the plain primal. The benchmark's own
             judge, independent of vjpviz's verifier; a fix vjpviz called verified that
             fails it is ``verified but wrong`` (0 expected).
  invariants the hooked run raises what the plain run raised (type and message: ``error
             altered``, 0 expected) and prints no ``internal error`` line (0 expected).

    PYTHONPATH=$PWD:$PWD/benchmarks .venv/bin/python benchmarks/capability_matrix.py \\
        [--jobs N] [--sample N --seed S] [--api A ...] [--defect D ...] [--markdown]
        [--uncovered] [--json rows.json]

``--markdown`` prints the table for docs/benchmarks.md, ``--uncovered`` the raising cells
not diagnosed, ``--coverage docs/jax-versions.md`` writes the transformation-by-API table
there (``no`` where a raising cell is not diagnosed); ``--from rows.json`` re-renders saved rows.
"""
from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import dataclasses
import io
import itertools
import json
import multiprocessing
import random
import re
import sys
import tempfile
import textwrap
import time

import capability_programs as programs
import module_files

INTERNAL = re.compile(r"internal error")


# ---------------------------------------------------------------- one cell

@dataclasses.dataclass
class Row:
  cell: str
  api: str
  transform: str
  context: str
  defect: str
  refused: bool = False            # JAX raises with the rule right too
  refused_why: str = ""
  raises: bool = False             # plain JAX raises on the cell
  diagnosed: bool = False
  warned: bool = False             # diagnosed where JAX does not raise (a silent defect)
  fix_right: bool = False
  verified_wrong: bool = False
  altered: bool = False
  internal: int = 0
  kind: str = ""
  headline: str = ""
  first_fix: str = ""
  why: str = ""                    # what the judge saw


def load(text: str, directory: str, stem: str):
  """``text`` written to ``directory/stem.py`` and imported as a fresh module."""
  return module_files.load(text, directory, stem, "capmat")


def attempt(thunk):
  """(error as (type, message) or None, the value or None)."""
  import jax
  try:
    return None, jax.block_until_ready(thunk())
  except Exception as e:  # noqa: BLE001 - the failure is the point
    return (type(e).__name__, str(e)), None


def unnamed(error: tuple | None) -> tuple | None:
  """An error without the module name each fresh import of a cell gives it (and addresses)."""
  if error is None:
    return None
  return error[0], re.sub(r"0x[0-9a-f]+", "0x", re.sub(r"capmat_\w+?_\d+\.", "", error[1]))


def first_line(text: str) -> str:
  """An error's first line, as ``unnamed`` writes it."""
  return (unnamed(("", text))[1].strip().splitlines() or [""])[0][:160]


def ran(text: str, scratch: str, stem: str):
  """``attempt`` of the module's ``run`` (plain and hooked runs reach it by one path, so an
  error that quotes the Python stack, an MLIR verifier's locations, quotes the same one)."""
  return attempt(load(text, scratch, stem).run)


def same(got, want) -> tuple[bool, str]:
  """Equal trees of arrays, float32 tolerances."""
  import jax
  import numpy as np
  g, gt = jax.tree_util.tree_flatten(got)
  w, wt = jax.tree_util.tree_flatten(want)
  if gt != wt:
    return False, f"structure {gt} != {wt}"
  for i, (a, b) in enumerate(zip(g, w)):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
      return False, f"leaf {i}: {a.dtype}{list(a.shape)} != {b.dtype}{list(b.shape)}"
    if not np.allclose(a, b, rtol=1e-4, atol=1e-5):
      return False, f"leaf {i}: values differ"
  return True, ""


def matches(d, cell: programs.Cell) -> bool:
  """``d`` is the defect's kind for the rule's role, naming the rule (and ``w`` for a bwd)."""
  from jupyter_vjpviz.base import kinds
  kind = kinds.of(d.kind)
  role = "jvp" if programs.rule_name(cell.api) == "f_jvp" else "bwd"
  wrong = {"shape": kinds.TYPE, "dtype": kinds.TYPE, "structure": kinds.STRUCTURE,
           "raises": None}[cell.defect]
  if kind.role != role or (kind.wrong != wrong if wrong else "raised" not in d.kind):
    return False
  words = f"{d.rule or ''} {d.headline}"
  if not re.search(rf"\b{programs.rule_name(cell.api)}\b", words):
    return False
  return role == "jvp" or d.argument == "w" or bool(re.search(r"\bw\b", d.headline))


def paste(text: str, code: str) -> str:
  """``text`` with each def of ``code`` in place of the def of that name (at its depth)."""
  fix = ast.parse(textwrap.dedent(code))
  defs = {n.name: n for n in fix.body if isinstance(n, ast.FunctionDef)}
  if not defs:
    raise ValueError("the fix defines no function")
  lines = text.splitlines()
  fix_lines = textwrap.dedent(code).splitlines()
  tree, spans = ast.parse(text), []
  for node in ast.walk(tree):
    if isinstance(node, ast.FunctionDef) and node.name in defs:
      new = defs.pop(node.name)
      start = (new.decorator_list[0].lineno if new.decorator_list else new.lineno) - 1
      block = fix_lines[start:new.end_lineno]
      first = (node.decorator_list[0].lineno if node.decorator_list and new.decorator_list
               else node.lineno)
      spans.append((first, node.end_lineno, [" " * node.col_offset + l if l else l for l in block]))
  if not spans:
    raise ValueError("the fix replaces no def of the program")
  first = min(s[0] for s in spans)
  top = max(n.lineno for n in tree.body if n.lineno <= first)   # a helper goes before it
  for new in defs.values():
    spans.append((top, top - 1, fix_lines[new.lineno - 1:new.end_lineno] + [""]))
  for first, last, block in sorted(spans, key=lambda s: (s[0], s[1]), reverse=True):
    lines[first - 1:last] = block
  return "\n".join(lines) + "\n"


def judge_fix(cell: programs.Cell, text: str, code: str, want, scratch: str) -> tuple[bool, str]:
  """The fix pasted, run under plain JAX, against the plain primal's answer; ``want``: that
  answer, and under ``with_logs`` the logs of the program with the rule right (the plain
  primal logs nothing), which the fixed rule's must equal."""
  try:
    module = load(paste(text, code), scratch, cell.stem + "_fixed")
  except Exception as e:  # noqa: BLE001 - a fix that does not paste is wrong
    return False, f"does not paste: {type(e).__name__}: {e}"
  error, got = attempt(module.run)
  if error:
    return False, f"raises: {error[0]}: {first_line(error[1])}"
  want, logs = want
  if "with_logs" in cell.transform:   # (value, (grad, logs)): the rule's logs are its own
    right, why = same(got[1][1], logs)
    if not right:
      return False, f"logs: {why}"
    got, want = (got[0], got[1][0]), (want[0], want[1][0])
  return same(got, want)


BUDGET = 20.
"""Seconds vjpviz may spend judging fixes after each failing call (the default is 2): the
matrix measures what it can diagnose and fix, not how fast on a loaded machine."""


def run_cells(cells: list[programs.Cell]) -> list[dict]:
  """Plain runs, then hooked runs, then the fixes judged with the hook off again."""
  import jax
  jax.config.update("jax_platforms", "cpu")
  import jupyter_vjpviz as vv
  with tempfile.TemporaryDirectory(prefix="capmat_") as scratch:
    rows, texts, wants = truths(cells, scratch)
    errors = {}
    for hooked in (False, True):   # one line calling both: an error quoting the stack quotes one
      errors[hooked] = runs(cells, rows, texts, scratch, hooked, vv)
    found = {}
    for c, row in zip(cells, rows):
      if row.refused:
        continue
      error, err, found[c], every = errors[True][c]
      row.raises = errors[False][c][0] is not None
      row.altered = unnamed(error) != unnamed(errors[False][c][0])
      row.internal = sum(1 for line in err.splitlines() if INTERNAL.search(line))
      row.kind = ",".join(d.kind for d in every)
      head = (found[c] or every or [None])[0]
      row.headline = head.headline if head is not None else ""
    for c, row in zip(cells, rows):
      if found.get(c):
        judge_first_fix(c, row, found[c][0], texts[c], wants[(c.api, c.transform, c.context)], scratch)
  return [dataclasses.asdict(r) for r in rows]


def truths(cells: list[programs.Cell], scratch: str) -> tuple[list[Row], dict, dict]:
  """A row per cell (refused where the right rule raises too), each cell's module text,
  and per program the plain primal's answer and the right rule's logs (``with_logs``)."""
  rows, texts, wants, refused = [], {}, {}, {}
  for c in cells:
    row = Row(c.stem, c.api, c.transform, c.context, c.defect)
    program = (c.api, c.transform, c.context)
    if program not in refused:
      control = load(programs.module_text(c, None), scratch, c.stem + "_right")
      refused[program], right = attempt(control.run)
      logs = right[1][1] if right is not None and "with_logs" in c.transform else None
      wants[program] = attempt(control.run_ref)[1], logs
    why = refused[program]
    row.refused, row.refused_why = why is not None, "" if why is None else f"{why[0]}: {first_line(why[1])}"
    texts[c] = programs.module_text(c)
    rows.append(row)
  return rows, texts, wants


def runs(cells, rows, texts: dict, scratch: str, hooked: bool, vv) -> dict:
  """{cell: (error, stderr, matching diagnoses, every diagnosis)}, plain or with the hook."""
  out = {}
  if hooked:
    vv.install(budget=BUDGET)
  try:
    for c, row in zip(cells, rows):
      if row.refused:
        continue
      vv.clear()
      err = io.StringIO()
      with contextlib.redirect_stderr(err):
        error = ran(texts[c], scratch, c.stem)[0]
      every = vv.diagnoses() if hooked else []
      out[c] = error, err.getvalue(), [d for d in every if matches(d, c)], every
  finally:
    if hooked:
      vv.uninstall()
  return out


def judge_first_fix(c: programs.Cell, row: Row, d, text: str, want, scratch: str) -> None:
  row.diagnosed, row.warned = row.raises, not row.raises
  if d.fixes:
    fix = d.fixes[0]
    row.first_fix = fix.title
    row.fix_right, row.why = judge_fix(c, text, fix.code, want, scratch)
    row.verified_wrong = fix.verdict == "verified" and not row.fix_right


def run_all(cells: list[programs.Cell], jobs: int) -> list[dict]:
  """``cells`` over ``jobs`` processes (each its own JAX and hook), in the cells' order."""
  if jobs <= 1:
    return run_cells(cells)
  chunks = [cells[i::jobs] for i in range(jobs)]
  with multiprocessing.get_context("spawn").Pool(jobs) as pool:
    parts = pool.map(run_cells, chunks)
  order = {c.stem: i for i, c in enumerate(cells)}
  return sorted(itertools.chain(*parts), key=lambda r: order[r["cell"]])


# ----------------------------------------------------------------- tables

COLUMNS = ("cells", "JAX raises", "diagnosed", "first fix right", "warned (JAX silent)",
           "internal errors", "error altered", "verified but wrong", "refused")


def tally(rows: list[dict], key) -> dict:
  table = collections.defaultdict(collections.Counter)
  for r in rows:
    t = table[key(r)]
    if r["refused"]:
      t["refused"] += 1
      continue
    t["cells"] += 1
    t["JAX raises"] += r["raises"]
    t["diagnosed"] += r["diagnosed"]
    t["first fix right"] += r["fix_right"] and r["raises"]
    t["warned (JAX silent)"] += r["warned"]
    t["internal errors"] += r["internal"]
    t["error altered"] += r["altered"]
    t["verified but wrong"] += r["verified_wrong"]
  return table


def table_lines(rows: list[dict], key, title: str, markdown: bool) -> list[str]:
  table = tally(rows, key)
  total = collections.Counter()
  for t in table.values():
    total.update(t)
  keys = sorted(table, key=lambda k: tuple(map(str, k)))
  if markdown:
    out = [f"| {title} | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    out += [f"| {' / '.join(k)} | " + " | ".join(str(table[k][c]) for c in COLUMNS) + " |" for k in keys]
    out.append("| **total** | " + " | ".join(f"**{total[c]}**" for c in COLUMNS) + " |")
    return out
  width = max(len(" / ".join(k)) for k in keys) + 2
  out = [f"{title:{width}s}" + "".join(f"{c[:10]:>11s}" for c in COLUMNS)]
  out += [f"{' / '.join(k):{width}s}" + "".join(f"{table[k][c]:11d}" for c in COLUMNS) for k in keys]
  out.append(f"{'total':{width}s}" + "".join(f"{total[c]:11d}" for c in COLUMNS))
  return out


def uncovered(rows: list[dict]) -> list[str]:
  """Raising cells not diagnosed, by (API, transformation, defect): the contexts."""
  missed = collections.defaultdict(list)
  for r in rows:
    if r["raises"] and not r["refused"] and not r["diagnosed"]:
      missed[(r["api"], r["transform"], r["defect"])].append(r["context"])
  return [f"- {api} under `{t}`, {d}: {', '.join(cs)}" for (api, t, d), cs in sorted(missed.items())]


COVERAGE = ("<!-- capability-matrix: benchmarks/capability_matrix.py --coverage -->",
            "<!-- /capability-matrix -->")


def coverage_cell(rows: list[dict]) -> str:
  """One (transformation, rule API) entry: ``yes`` when every cell where JAX raises on the
  wrong rule is diagnosed, else ``no`` with the defects and contexts missed; ``JAX refuses``
  when JAX raises with the rule right in every context, ``JAX silent`` when it never raises."""
  raising = [r for r in rows if r["raises"] and not r["refused"]]
  if not raising:
    return "JAX refuses" if all(r["refused"] for r in rows) else "JAX silent"
  missed = collections.defaultdict(list)
  for r in raising:
    if not r["diagnosed"]:
      missed[r["defect"]].append(r["context"])
  if not missed:
    return "yes"
  return "no: " + "; ".join(f"{d} ({', '.join(cs)})" for d, cs in sorted(missed.items()))


def coverage_table(rows: list[dict]) -> str:
  """Markdown, transformation by rule API: which raising cells vjpviz diagnoses."""
  apis = list(dict.fromkeys(r["api"] for r in rows))
  transforms = list(dict.fromkeys(r["transform"] for r in rows))
  groups = collections.defaultdict(list)
  for r in rows:
    groups[(r["transform"], r["api"])].append(r)
  lines = ["| transformation | " + " | ".join(f"`{a}`" for a in apis) + " |",
           "|---" * (len(apis) + 1) + "|"]
  for t in transforms:
    cells = [coverage_cell(groups[(t, a)]) if groups[(t, a)] else "not run" for a in apis]
    lines.append(f"| `{t}` | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def write_coverage(rows: list[dict], path: str) -> None:
  """Replace the table between ``COVERAGE``'s markers in ``path``."""
  with open(path) as f:
    text = f.read()
  start, end = text.index(COVERAGE[0]) + len(COVERAGE[0]), text.index(COVERAGE[1])
  with open(path, "w") as f:
    f.write(text[:start] + "\n" + coverage_table(rows) + "\n" + text[end:])


def report(rows: list[dict], markdown: bool, show_uncovered: bool, out=print):
  by = lambda *fields: (lambda r: tuple(r[f] for f in fields))
  for line in table_lines(rows, by("transform", "defect"), "transformation / defect", markdown):
    out(line)
  out("")
  for line in table_lines(rows, by("api", "defect"), "rule API / defect", markdown):
    out(line)
  out("")
  for line in table_lines(rows, by("context",), "context", markdown):
    out(line)
  if show_uncovered:
    out("\nRaising cells not diagnosed (JAX's error reaches the user unchanged):")
    for line in uncovered(rows):
      out(line)


def sample(cells: list, n: int, seed: int) -> list:
  return sorted(random.Random(seed).sample(cells, min(n, len(cells))), key=cells.index)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--jobs", type=int, default=1)
  parser.add_argument("--sample", type=int, default=0, help="a seeded sample of this many cells")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--api", action="append", help="only these rule APIs")
  parser.add_argument("--defect", action="append", choices=programs.DEFECTS, help="only these defects")
  parser.add_argument("--markdown", action="store_true")
  parser.add_argument("--uncovered", action="store_true")
  parser.add_argument("--json", help="write the rows here")
  parser.add_argument("--from", dest="rows", help="re-render rows written by --json")
  parser.add_argument("--coverage", metavar="FILE",
                      help="write the transformation-by-API coverage table into FILE's markers")
  opts = parser.parse_args(argv)
  t0 = time.perf_counter()
  if opts.rows:
    with open(opts.rows) as f:
      rows = json.load(f)
  else:
    import jax
    cells = programs.cells(tuple(opts.api) if opts.api else None,
                           defects=tuple(opts.defect) if opts.defect else programs.DEFECTS)
    if opts.sample:
      cells = sample(cells, opts.sample, opts.seed)
    rows = run_all(cells, opts.jobs)
    if opts.json:
      with open(opts.json, "w") as f:
        json.dump(rows, f, indent=0)
    skipped = [f"{api} ({why})" for api in programs.rule_apis() if (why := programs.available(api))]
    print(f"jax {jax.__version__}: {len(rows)} cells; not written: {', '.join(skipped) or 'none'}; "
          f"differentiation API not in the matrix: {', '.join(programs.missing_transforms()) or 'none'}; "
          f"control flow not in it: {', '.join(programs.missing_contexts()) or 'none'}")
  report(rows, opts.markdown, opts.uncovered)
  if opts.coverage:
    write_coverage(rows, opts.coverage)
  print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
  sys.exit(main())
