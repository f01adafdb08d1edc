#!/usr/bin/env bash
# The project is self-contained: a fresh clone alone builds, tests and benchmarks, so nothing in it
# may read files from the folder that sat beside the checkout during development (the parent's
# "shared" folder). Its data (the Alibaba trace, the FGD paper's table) lives under data/.
# Usage: self_contained_test.sh REPO_ROOT
set -euo pipefail
root=${1:?usage: self_contained_test.sh REPO_ROOT}
cd "$root"
# The pattern is written so that this file does not match itself.
pattern='\.\./'"shared"
# Everything but the build trees, git's own files and results already published (which quote the
# commands that made them at the time).
found=$(grep -rIl --exclude-dir=.git --exclude-dir='build*' --exclude-dir=results -e "$pattern" . || true)
if [[ -n $found ]]; then
  echo "these files refer to a folder outside the project (move what they read under data/):" >&2
  for f in $found; do grep -nH -e "$pattern" "$f" >&2; done
  exit 1
fi
for f in data/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv \
         data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv data/reference/fgd-results.md; do
  [[ -s $f ]] || { echo "missing project data: $f" >&2; exit 1; }
done
echo "self-contained: nothing refers outside the project; data/ is present"
