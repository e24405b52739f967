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

# export_tree GITDIR REV DEST: writes REV's tree into DEST (created), leaving out the blobs the
# clone lacks (a partial or damaged clone) and listing them on stderr. Goes through a scratch
# index, so it needs no work tree and leaves the clone's own index alone. Returns 0 even when
# blobs were missing: the caller's build says whether it needed them. Needs git 2.36+
# (ls-tree --format).
export_tree() {
  local g=$1 rev=$2 dest=$3 idx missing
  idx=$(mktemp)
  missing=$(git --git-dir="$g" ls-tree -r --format='%(objectname) %(path)' "$rev" |
    git --git-dir="$g" cat-file --batch-check='%(objectname) %(rest)' --buffer 2>/dev/null |
    awk '$2 == "missing" {print $1}') || true
  GIT_INDEX_FILE=$idx git --git-dir="$g" read-tree "$rev"
  if [[ -n $missing ]]; then
    # the paths of the missing blobs, out of the scratch index
    GIT_INDEX_FILE=$idx git --git-dir="$g" ls-files -s |
      awk -v m="$missing" 'BEGIN {n = split(m, a, "\n"); for (i = 1; i <= n; i++) s[a[i]] = 1}
        ($2 in s) {sub(/^[^\t]*\t/, ""); print}' >"$idx.missing"
    echo "$0: $g lacks $(wc -l <"$idx.missing") blob(s) of $rev, left out:" >&2
    sed 's/^/  /' "$idx.missing" >&2
    GIT_INDEX_FILE=$idx git --git-dir="$g" update-index --force-remove --stdin <"$idx.missing"
    rm -f "$idx.missing"
  fi
  mkdir -p "$dest"
  GIT_INDEX_FILE=$idx git --git-dir="$g" checkout-index -a -f --prefix="${dest%/}/"
  rm -f "$idx"
}
