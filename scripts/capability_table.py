"""docs/jax-versions.md's per-version capability table, written from test results.

tests/test_jax_versions.py, run with VJPVIZ_CAPABILITIES=DIR on each JAX (scripts/test.sh
does), leaves DIR/jax-VERSION.json with the outcome of each kind's real failure there.

  python scripts/capability_table.py DIR/*.json                  print the table
  python scripts/capability_table.py --write docs/jax-versions.md DIR/*.json  replace its table
  python scripts/capability_table.py --check docs/jax-versions.md DIR/*.json  exit 1 if it differs
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BEGIN, END = "<!-- capability-table: scripts/capability_table.py -->", "<!-- /capability-table -->"
MARKS = {"diagnosed": "yes", "not diagnosed": "no", "not in this JAX": "not in JAX"}


def table(results: list[dict]) -> str:
  """Markdown: one row per kind, one column per JAX (oldest first)."""
  results = sorted(results, key=lambda r: tuple(int(p) for p in r["jax"].split(".")))
  rows = list(dict.fromkeys(k for r in results for k in r["kinds"]))
  head = ["kind", *(f"jax {r['jax']} (Python {r['python']})" for r in results)]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for row in rows:
    cells = [MARKS.get(r["kinds"].get(row, ""), "not run") for r in results]
    lines.append(f"| `{row}` | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def replaced(readme: str, block: str) -> str:
  start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
  return readme[:start] + "\n" + block + "\n" + readme[end:]


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument("--write", metavar="FILE")
  mode.add_argument("--check", metavar="FILE")
  parser.add_argument("results", nargs="+", type=Path)
  args = parser.parse_args(argv)
  block = table([json.loads(p.read_text()) for p in args.results if p.exists()])
  if not (args.write or args.check):
    print(block)
    return 0
  readme = Path(args.write or args.check)
  text = readme.read_text()
  new = replaced(text, block)
  if args.write:
    readme.write_text(new)
    return 0
  if new != text:
    print(f"capability_table: {readme}'s table differs from this run's results:\n{block}",
          file=sys.stderr)
    return 1
  print(f"capability_table: {readme}'s table matches this run's results")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
