#!/usr/bin/env bash
# Fills SRC with h2spec's source and the module sources tools/h2spec/build.sh needs, from git
# clones of their repositories:
#
#   tools/h2spec/sources.sh GITDIRS SRC
#
# GITDIRS holds one clone per repository, found as GITDIRS/OWNER+NAME/repo (a mirror layout),
# GITDIRS/OWNER+NAME, GITDIRS/NAME.git or GITDIRS/NAME, bare or not, e.g.
#   git clone --bare https://github.com/summerwind/h2spec GITDIRS/h2spec.git
# The revisions are h2spec's go.mod versions (a pseudo-version's commit where go.mod names one);
# h2spec itself is af83a65 (v2.6.0 and 5 commits: the last commit of its default branch).
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 GITDIRS SRC" >&2; exit 2; }
gitdirs=$1 src=$2

# module path | repository | revision
table='github.com/summerwind/h2spec|summerwind/h2spec|af83a65f0b6273ef38bf778d400d98892e7653d8
github.com/fatih/color|fatih/color|bf82308e8c85
github.com/spf13/cobra|spf13/cobra|dc208f4211e7
golang.org/x/net|golang/net|55a3084c9119
github.com/inconshreveable/mousetrap|inconshreveable/mousetrap|v1.0.0
github.com/mattn/go-colorable|mattn/go-colorable|v0.1.0
github.com/mattn/go-isatty|mattn/go-isatty|v0.0.4
github.com/spf13/pflag|spf13/pflag|v1.0.3
golang.org/x/sys|golang/sys|3b5209105503'

find_git() { # $1: owner/name
  local owner=${1%/*} name=${1#*/} d
  for d in "$gitdirs/$owner+$name/repo" "$gitdirs/$owner+$name" "$gitdirs/$name.git" "$gitdirs/$name"; do
    if git --git-dir="$d" rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "$d"; return; fi
    if git --git-dir="$d/.git" rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "$d/.git"; return; fi
  done
  return 1
}

failed=0
while IFS='|' read -r mod repo rev; do
  if ! g=$(find_git "$repo"); then
    echo "$0: no clone of github.com/$repo in $gitdirs (needed: $mod at $rev)" >&2
    failed=1
    continue
  fi
  if ! git --git-dir="$g" rev-parse -q --verify "$rev^{commit}" >/dev/null; then
    echo "$0: $g has no revision $rev (needed: $mod)" >&2
    failed=1
    continue
  fi
  dest=$src/$mod
  rm -rf "$dest"
  mkdir -p "$dest"
  git --git-dir="$g" archive --format=tar "$rev" | tar -x -C "$dest"
  echo "$mod $rev from $g"
done <<<"$table"
exit $failed
