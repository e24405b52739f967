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

# module path | repository | revision | subdirectory of the repository | paths (all: .)
table='github.com/summerwind/h2spec|summerwind/h2spec|af83a65f0b6273ef38bf778d400d98892e7653d8|.|.
github.com/fatih/color|fatih/color|bf82308e8c85|.|.
github.com/spf13/cobra|spf13/cobra|dc208f4211e7|.|.
golang.org/x/net|golang/net|55a3084c9119|.|.
github.com/inconshreveable/mousetrap|inconshreveable/mousetrap|v1.0.0|.|.
github.com/mattn/go-colorable|mattn/go-colorable|v0.1.0|.|.
github.com/mattn/go-isatty|mattn/go-isatty|v0.0.4|.|.
github.com/spf13/pflag|spf13/pflag|v1.0.3|.|.
golang.org/x/sys|golang/sys|3b5209105503|.|.'

# shellcheck source=tools/lib/modsrc.sh
source "$(dirname "$0")/../lib/modsrc.sh"
fill_sources "$gitdirs" "$src" "$table"
