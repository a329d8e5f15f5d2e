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

digest() {
  # One hash of the contents of the files under the given paths, src/__tests__ and the
  # protocol files the build generates (from the schema and codegen, hashed instead) left out.
  find "$@" \( -path src/__tests__ -o -path src/protocolTypes.ts -o -path src/protocolValidators.ts \) \
    -prune -o -type f -print | LC_ALL=C sort | xargs sha256sum | sha256sum
}

current() {
  # Whether the stamp $1 holds the hash $2 (what a step was last done from).
  [[ -f $1 && $(<"$1") == "$2" ]]
}

python_packages() {
  # Skipped when the files the venv was last installed from are unchanged: the package
  # metadata and the panel's sources (the labextension is built from them and installed
  # as a copy; the Python modules are linked, the panel's tests not built in). Contents,
  # not times: a checkout or an edit to a test does not re-run it. A JAX already in the
  # venv is pinned: installing the test extra never changes it.
  local stamp=.venv/.installed-from constraints=.venv/.jax-constraints inputs
  inputs=$(digest pyproject.toml install.json package.json yarn.lock tsconfig.json schema style src \
    jupyter_vjpviz/protocol.schema.json scripts/protocol-codegen.js)
  if [[ -f jupyter_vjpviz/labextension/package.json ]] && current "$stamp" "$inputs"; then
    echo "setup: the editable install is current"
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
  echo "$inputs" >"$stamp"
}

npm_packages() {
  # Skipped when package.json and yarn.lock are what node_modules was installed from.
  local stamp=node_modules/.vjpviz-installed-from inputs
  inputs=$(digest package.json yarn.lock .yarnrc.yml)
  if current "$stamp" "$inputs"; then
    echo "setup: node_modules is current"
    return
  fi
  jlpm install
  echo "$inputs" >"$stamp"
}

# package.json scripts call jlpm and jupyter-builder from the venv.
export PATH="$PWD/.venv/bin:$PATH"

phase "system packages" system_packages
phase "node" node_present
phase "venv" venv
phase "pip install -e .[test,test-libraries] (builds the labextension)" python_packages
phase "npm dev dependencies" npm_packages
test -f jupyter_vjpviz/labextension/package.json
