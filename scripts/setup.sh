#!/usr/bin/env bash
# Set up a development machine (Debian, as root; needs Python >= 3.12 with venv, found
# by scripts/find-python.sh, and node >= 18): system packages, .venv with the
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
    "$(bash scripts/find-python.sh)" -m venv .venv
  fi
}

node_present() {
  # jlpm (the labextension build, jest, the browser tests) runs on node >= 18.
  if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 18 ? 1 : 0)' 2>/dev/null; then
    echo "setup: node 18 or newer is needed (found: $(node --version 2>/dev/null || echo none)); " \
      "install it, e.g. apt-get install nodejs npm, or from https://nodejs.org" >&2
    exit 1
  fi
}

python_packages() {
  # Skipped when pyproject.toml is what the venv was last installed from and no panel
  # source is newer than the labextension that install built (it is installed as a
  # copy: a newer source needs the install again). A JAX already in the venv is
  # pinned: installing the test extra never changes it.
  local stamp=.venv/.installed-from constraints=.venv/.jax-constraints
  local built=jupyter_vjpviz/labextension/package.json
  if [[ -f $stamp && -f $built ]] && cmp -s pyproject.toml "$stamp" &&
     [[ -z $(find src style schema package.json -newer "$built" -print -quit) ]]; then
    return
  fi
  .venv/bin/python - >"$constraints" <<'PY'
import importlib.metadata as m
for name in ("jax", "jaxlib"):
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        pass
PY
  .venv/bin/pip install --disable-pip-version-check -c "$constraints" -e '.[test,test-libraries]'
  cp pyproject.toml "$stamp"
}

npm_packages() {
  jlpm install
}

# package.json scripts call jlpm and jupyter-builder from the venv.
export PATH="$PWD/.venv/bin:$PATH"

phase "system packages" system_packages
phase "node" node_present
phase "venv" venv
phase "pip install -e .[test,test-libraries] (builds the labextension)" python_packages
phase "npm dev dependencies" npm_packages
test -f jupyter_vjpviz/labextension/package.json
