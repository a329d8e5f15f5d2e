#!/usr/bin/env bash
# Set up a development machine (Debian, as root): system packages, .venv with the
# package installed editable (which builds the labextension) and the npm dev deps.
# Safe to re-run: every step is skipped or fast when already done.
set -euo pipefail

cd "$(dirname "$0")/.."

phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "setup: $name took $((SECONDS - start)) s"
}

system_packages() {
  local missing=()
  for pkg in chromium graphviz; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
  fi
}

venv() {
  if [[ ! -x .venv/bin/python ]]; then
    PYENV_VERSION=3.12.1 python3.12 -m venv .venv || python3.12 -m venv .venv
  fi
}

python_packages() {
  # Skipped when pyproject.toml is what the venv was last installed from. A JAX
  # already in the venv is pinned: installing the test extra never changes it.
  local stamp=.venv/.installed-from constraints=.venv/.jax-constraints
  if [[ -f $stamp ]] && cmp -s pyproject.toml "$stamp"; then return; fi
  .venv/bin/python - >"$constraints" <<'PY'
import importlib.metadata as m
for name in ("jax", "jaxlib"):
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        pass
PY
  .venv/bin/pip install --disable-pip-version-check -c "$constraints" -e '.[test]'
  cp pyproject.toml "$stamp"
}

npm_packages() {
  jlpm install
}

# package.json scripts call jlpm and jupyter-builder from the venv.
export PATH="$PWD/.venv/bin:$PATH"

phase "system packages" system_packages
phase "venv" venv
phase "pip install -e .[test] (builds the labextension)" python_packages
phase "npm dev dependencies" npm_packages
test -f jupyter_vjpviz/labextension/package.json
