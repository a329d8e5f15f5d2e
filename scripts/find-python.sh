#!/usr/bin/env bash
# Print the path of a Python with venv that runs the JAX under test, however it is
# installed: $VJPVIZ_PYTHON, pyenv, uv, the py launcher, or PATH. With no argument,
# 3.12 or newer (the newest JAX); with one, e.g. 3.11, that version first (older JAX
# releases are tested on the oldest Python they run on), else any newer one. Exit 1
# with what to install when there is none.
set -uo pipefail
want=${1:-3.12}

usable() {
  "$1" -c "import sys, venv; sys.exit(sys.version_info < tuple(map(int, '$want'.split('.'))))" \
    2>/dev/null
}

candidates() {
  [[ -n ${VJPVIZ_PYTHON:-} ]] && echo "$VJPVIZ_PYTHON"
  local root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  ls -d "$root"/versions/3.1[1-9]*/bin/python3 2>/dev/null | sort -V
  command -v uv >/dev/null && uv python find ">=$want" 2>/dev/null
  if command -v py >/dev/null; then   # the Python launcher: that version, else its newest
    py "-$want" -c 'import sys; print(sys.executable)' 2>/dev/null
    py -c 'import sys; print(sys.executable)' 2>/dev/null
  fi
  for name in "python$want" python3.12 python3.13 python3.14 python3; do
    command -v "$name" 2>/dev/null
  done
}

while read -r python; do
  if [[ -n $python ]] && usable "$python"; then
    echo "$python"
    exit 0
  fi
done < <(candidates)

cat >&2 <<MSG
setup: no Python $want or newer with venv was found (tried \$VJPVIZ_PYTHON, pyenv, uv, py, PATH).
  Install one, e.g.:  pyenv install $want   or   uv python install $want
  or on Debian/Ubuntu: apt-get install python$want python$want-venv
  then re-run, or point VJPVIZ_PYTHON at it.
MSG
exit 1
