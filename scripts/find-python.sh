#!/usr/bin/env bash
# Print the path of a Python that can run the supported JAX (3.12 or newer, with
# venv), however it is installed: $VJPVIZ_PYTHON, pyenv, uv, or PATH. Exit 1 with
# what to install when there is none.
set -uo pipefail

usable() {
  "$1" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null
}

candidates() {
  [[ -n ${VJPVIZ_PYTHON:-} ]] && echo "$VJPVIZ_PYTHON"
  local root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  ls -d "$root"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -V
  command -v uv >/dev/null && uv python find '>=3.12' 2>/dev/null
  for name in python3.12 python3.13 python3.14 python3; do
    command -v "$name" 2>/dev/null
  done
}

while read -r python; do
  if [[ -n $python ]] && usable "$python"; then
    echo "$python"
    exit 0
  fi
done < <(candidates)

cat >&2 <<'MSG'
setup: no Python 3.12 or newer with venv was found (tried $VJPVIZ_PYTHON, pyenv, uv, PATH).
  Install one, e.g.:  pyenv install 3.12   or   uv python install 3.12
  or on Debian/Ubuntu: apt-get install python3.12 python3.12-venv
  then re-run, or point VJPVIZ_PYTHON at it.
MSG
exit 1
