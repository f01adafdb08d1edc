#!/usr/bin/env bash
# The user documentation holds together: README.md stays a short entry page (under 250 lines) and
# every relative link in README.md and docs/ resolves, as GitHub resolves it: the file or folder
# exists inside the project, and an anchor (`page.md#section`, `#section`) names a heading of that
# page (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens, -1, -2... for repeats).
# Links in code (fenced blocks, `inline`) are not links. Before checking the project, it checks a
# planted set of pages and fails unless exactly the planted broken links are found.
# Usage: docs_links_test.sh REPO_ROOT
set -euo pipefail
root=$(cd "${1:?usage: docs_links_test.sh REPO_ROOT}" && pwd)
max_readme_lines=250

# "LINE<TAB>TARGET" for each inline link of a markdown file, outside code.
links_of() {
  awk '
    /^[ \t]*```/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^) \t]*\)/)) {
        printf "%d\t%s\n", NR, substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

# The anchors of a markdown file's headings, one a line.
anchors_of() {
  awk '
    /^[ \t]*```/ { fence = !fence; next }
    fence { next }
    /^#+ / {
      s = $0
      sub(/^#+ +/, "", s)
      sub(/ +#* *$/, "", s)
      s = tolower(s)
      gsub(/[^a-z0-9 _-]/, "", s)
      gsub(/ /, "-", s)
      n = seen[s]++
      print (n ? s "-" n : s)
    }' "$1"
}

# Prints "FILE:LINE: TARGET: why" for every broken link of the given files; fails if any.
check_links() {
  local top=$1 bad=0 file line target path anchor dest real
  shift
  for file in "$@"; do
    while IFS=$'\t' read -r line target; do
      [[ -z $target || $target =~ ^[a-zA-Z][a-zA-Z0-9+.-]*: ]] && continue  # http:, mailto:
      path=${target%%#*}
      anchor=""
      [[ $target == *"#"* ]] && anchor=${target#*#}
      if [[ -z $path ]]; then
        dest=$file
      else
        dest=$(dirname "$file")/$path
      fi
      if [[ ! -e $dest ]]; then
        echo "$file:$line: $target: no such file or folder"; bad=1; continue
      fi
      real=$(realpath "$dest")
      if [[ $real != "$top" && $real != "$top"/* ]]; then
        echo "$file:$line: $target: outside the project"; bad=1; continue
      fi
      [[ -z $anchor ]] && continue
      if [[ $dest != *.md ]]; then
        [[ $anchor =~ ^L[0-9]+(-L[0-9]+)?$ ]] && continue  # a line of a source file
        echo "$file:$line: $target: an anchor on a file that is not markdown"; bad=1; continue
      fi
      if ! anchors_of "$dest" | grep -qxF -- "$anchor"; then
        echo "$file:$line: $target: no heading with that anchor in $path"; bad=1
      fi
    done < <(links_of "$file")
  done
  return $bad
}

# The checker itself, on planted pages: three broken links, nothing else reported.
plant=$(mktemp -d)
trap 'rm -rf "$plant"' EXIT
mkdir -p "$plant/top/docs" "$plant/top/src"
touch "$plant/top/src/code.h" "$plant/outside.md"
cat >"$plant/top/docs/a.md" <<'EOF'
# Page A
## Using `tessera simulate`: the flags
## Notes
## Notes
```sh
# not a heading
```
[back](../README.md#top-page) [self](#notes-1) [code](../src/code.h#L3) [dir](../src)
[web](https://example.com/x.md#y) `[in code](nowhere.md)`
```
[in a fence](nowhere.md)
```
EOF
cat >"$plant/top/README.md" <<'EOF'
# Top page
[a](docs/a.md#using-tessera-simulate-the-flags) [b](docs/b.md) [c](docs/a.md#nope)
[out](../outside.md) [notes](docs/a.md#notes)
EOF
found=$(cd "$plant/top" && check_links "$plant/top" README.md docs/a.md || true)
expected="README.md:2: docs/b.md: no such file or folder
README.md:2: docs/a.md#nope: no heading with that anchor in docs/a.md
README.md:3: ../outside.md: outside the project"
if [[ $found != "$expected" ]]; then
  printf 'the link checker is wrong on its planted pages:\nfound:\n%s\nexpected:\n%s\n' \
    "$found" "$expected" >&2
  exit 1
fi

# The project.
cd "$root"
status=0
lines=$(wc -l <README.md)
if ((lines >= max_readme_lines)); then
  echo "README.md has $lines lines; keep it under $max_readme_lines (the rest goes to docs/)" >&2
  status=1
fi
mapfile -t pages < <(find docs -name '*.md' | sort)
((${#pages[@]} > 0)) || { echo "no pages under docs/" >&2; exit 1; }
if ! check_links "$root" README.md "${pages[@]}" >&2; then
  echo "broken links above (README.md and docs/)" >&2
  status=1
fi
((status == 0)) && echo "README.md: $lines lines; README.md and ${#pages[@]} pages of docs/: every relative link resolves"
exit $status
