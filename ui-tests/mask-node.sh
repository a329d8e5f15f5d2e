# Sourced by run.sh and wheel.sh: mask_node DIR puts fake node/npm/jlpm/yarn
# commands in DIR that log each call to DIR.calls and exit 127, as a shell does
# for a missing command. Put DIR first on PATH to run something "without node".
mask_node() {
  local dir=$1 tool
  mkdir -p "$dir"
  : > "$dir.calls"
  for tool in node nodejs npm npx jlpm yarn; do
    printf '#!/bin/sh\necho "$(basename "$0") $*" >> "%s"\necho "vjpviz: node is masked" >&2\nexit 127\n' \
      "$dir.calls" > "$dir/$tool"
    chmod +x "$dir/$tool"
  done
}
