#!/usr/bin/env bash
# Fills SRC with the module sources tools/grpc-go-probe/build.sh needs, from git clones of
# their repositories (full history, so the tags and revisions below exist):
#
#   tools/grpc-go-probe/sources.sh GITDIRS SRC
#
# GITDIRS holds one clone per repository, found as GITDIRS/OWNER+NAME/repo (a mirror
# layout), GITDIRS/OWNER+NAME, GITDIRS/NAME.git or GITDIRS/NAME, bare or not, e.g.
#   git clone --bare https://github.com/grpc/grpc-go GITDIRS/grpc-go.git
# The revisions are go.mod's versions (a pseudo-version's commit for genproto); golang.org/x/text
# contributes only the packages golang.org/x/net/idna imports.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 GITDIRS SRC" >&2; exit 2; }
gitdirs=$1 src=$2

# module path | repository | revision | subdirectory of the repository | paths (all: .)
table='google.golang.org/grpc|grpc/grpc-go|v1.64.1|.|.
golang.org/x/net|golang/net|v0.26.0|.|.
golang.org/x/sys|golang/sys|v0.21.0|.|.
golang.org/x/text|golang/text|v0.16.0|.|go.mod LICENSE secure/bidirule unicode/bidi unicode/norm transform
google.golang.org/protobuf|protocolbuffers/protobuf-go|v1.33.0|.|.
google.golang.org/genproto/googleapis/rpc|googleapis/go-genproto|94a12d6c2237|googleapis/rpc|.'

find_git() { # $1: owner/name
  local owner=${1%/*} name=${1#*/} d
  for d in "$gitdirs/$owner+$name/repo" "$gitdirs/$owner+$name" "$gitdirs/$name.git" "$gitdirs/$name"; do
    if git --git-dir="$d" rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "$d"; return; fi
    if git --git-dir="$d/.git" rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "$d/.git"; return; fi
  done
  return 1
}

failed=0
while IFS='|' read -r mod repo rev sub paths; do
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
  tree=$rev
  [[ $sub == . ]] || tree=$rev:$sub
  if [[ $paths == . ]]; then
    git --git-dir="$g" archive --format=tar "$tree" | tar -x -C "$dest"
  else # file by file: a partial clone may lack blobs of packages not needed here
    # shellcheck disable=SC2086 # $paths is a list
    git --git-dir="$g" ls-tree -r --name-only "$tree" -- $paths | while read -r f; do
      mkdir -p "$dest/$(dirname "$f")"
      git --git-dir="$g" cat-file blob "$tree:$f" >"$dest/$f"
    done
  fi
  echo "$mod $rev from $g"
done <<<"$table"
exit $failed
