# Sourced by tools/*/sources.sh: fills a folder with Go module sources from git clones.
#
#   fill_sources GITDIRS SRC TABLE
#
# TABLE: one line a module, "module path|owner/name|revision|subdirectory|paths" (subdirectory
# and paths: . for all). GITDIRS holds one clone per repository, found as
# GITDIRS/OWNER+NAME/repo (a mirror layout), GITDIRS/OWNER+NAME, GITDIRS/NAME.git or
# GITDIRS/NAME, bare or not. Returns 1 when a clone or revision is missing.

find_git() { # $1: owner/name
  local owner=${1%/*} name=${1#*/} d
  for d in "$gitdirs/$owner+$name/repo" "$gitdirs/$owner+$name" "$gitdirs/$name.git" "$gitdirs/$name"; do
    if git --git-dir="$d" rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "$d"; return; fi
    if git --git-dir="$d/.git" rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "$d/.git"; return; fi
  done
  return 1
}

fill_sources() {
  local gitdirs=$1 src=$2 table=$3
  local failed=0 mod repo rev sub paths g dest tree
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
return $failed
}
