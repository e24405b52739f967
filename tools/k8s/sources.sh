#!/usr/bin/env bash
# Fills SRC with the Kubernetes v1.26.0 source tree (vendor/ included) from a git clone:
#
#   tools/k8s/sources.sh GITDIRS SRC
#
# GITDIRS holds the clone as GITDIRS/zhengyansheng+kubernetes/repo (a mirror layout) or any
# layout tools/lib/modsrc.sh's find_git knows. The revision is that repository's root commit
# cf38434, an import of the v1.26.0 release tree. The clone lacks a few blobs of cloud-provider
# code that a providerless build never compiles; they are left out and listed.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 GITDIRS SRC" >&2; exit 2; }
gitdirs=$1 src=$2
rev=cf384344a7422b8bc6b7624e08b3bc1196e8787b

# shellcheck source=tools/lib/modsrc.sh
source "$(dirname "$0")/../lib/modsrc.sh"
if ! g=$(find_git zhengyansheng/kubernetes); then
  echo "$0: no clone of github.com/zhengyansheng/kubernetes in $gitdirs" >&2
  exit 1
fi
git --git-dir="$g" rev-parse -q --verify "$rev^{commit}" >/dev/null ||
  { echo "$0: $g has no revision $rev" >&2; exit 1; }
rm -rf "$src"
export_tree "$g" "$rev" "$src"
echo "$rev" >"$src/.k8s-commit"
echo "kubernetes $rev from $g into $src"
