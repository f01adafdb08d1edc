#!/usr/bin/env bash
# The agent's inner rules in cmake/layering.cmake (which part of src/agent may include which)
# hold for the tree, and catch a part reaching one it may not: each include below is planted in a
# copy of the agent's sources, and the check must fail naming that file and line.
# Usage: layering_test.sh REPO_ROOT
set -euo pipefail
root=${1:?usage: layering_test.sh REPO_ROOT}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/check.cmake" <<'EOF'
cmake_minimum_required(VERSION 3.25)
set(PROJECT_SOURCE_DIR ${TREE})
include(${RULES})
_tessera_check_agent_parts()
EOF
check() { cmake -DTREE="$1" -DRULES="$root/cmake/layering.cmake" -P "$work/check.cmake" 2>&1; }

if ! out=$(check "$root"); then
  echo "the tree breaks the agent's rules:" >&2
  echo "$out" >&2
  exit 1
fi
plants=(
  "dra/claim_edits.h:agent/nri/delivery.h"        # the DRA driver never includes the NRI plugin
  "dra/driver.cc:agent/pods/grant.h"              # ... nor classic mode's pods
  "edits/container_edits.cc:agent/pods/grant.h"   # the decision knows no mode
  "pods/grant.cc:agent/nri/delivery.h"            # pods never reach a delivery mechanism
  "discovery/discovery.cc:agent/edits/container_edits.h"
  "procs/host_processes.cc:agent/pods/grant.h"  # the process views use no other part
  "nri/delivery.cc:k8s/client/http.h"             # the NRI plugin does not talk to the API server
)
for plant in "${plants[@]}"; do
  file=${plant%%:*}
  include=${plant#*:}
  rm -rf "$work/tree"
  mkdir -p "$work/tree/src"
  cp -r "$root/src/agent" "$work/tree/src/"
  printf '#include "%s"\n' "$include" >> "$work/tree/src/agent/$file"
  if out=$(check "$work/tree"); then
    echo "#include \"$include\" planted in src/agent/$file was not caught" >&2
    exit 1
  fi
  flat=$(tr '\n' ' ' <<< "$out" | tr -s ' ')  # cmake wraps its messages
  if ! grep -qF "layering: src/agent/$file: #include \"$include\"" <<< "$flat"; then
    echo "#include \"$include\" planted in src/agent/$file: the check failed otherwise:" >&2
    echo "$out" >&2
    exit 1
  fi
done
echo "the agent's parts keep their rules; ${#plants[@]} planted includes were each caught"
