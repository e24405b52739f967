#!/usr/bin/env bash
# Fills SRC with what tools/blis/build.sh needs to build BLIS (the inference-sim simulator,
# github.com/inference-sim/inference-sim, Apache-2.0) without a Go module proxy: BLIS itself
# at REV and the modules of its go.mod at the versions its go.sum names, exported from git
# clones of their repositories (full history, so the tags and revisions below exist):
#
#   tools/blis/sources.sh GITDIRS SRC [REV]
#
# GITDIRS holds one clone per repository, found as GITDIRS/OWNER+NAME/repo (a mirror
# layout), GITDIRS/OWNER+NAME, GITDIRS/NAME.git or GITDIRS/NAME, bare or not, e.g.
#   git clone --bare https://github.com/inference-sim/inference-sim GITDIRS/inference-sim.git
# REV defaults to f90a1e3a (BLIS HEAD when this was written; the versions below are its
# go.sum's). gonum.org/v1/gonum is required by that go.mod but imported by no package, so
# build.sh drops the requirement instead of fetching it. SRC/blis is BLIS's tree; every
# module lands at SRC/mod/MODULE_PATH.
set -euo pipefail
[[ $# -ge 2 && $# -le 3 ]] || { echo "usage: $0 GITDIRS SRC [REV]" >&2; exit 2; }
gitdirs=$1 src=$2 blis_rev=${3:-f90a1e3a}

# BLIS's tree at SRC/blis, its go.sum's modules at SRC/mod/MODULE_PATH (tools/lib/modsrc.sh's
# table: module path | owner/name | revision | subdirectory | paths)
modules="github.com/davecgh/go-spew|davecgh/go-spew|v1.1.1|.|.
github.com/google/uuid|google/uuid|v1.6.0|.|.
github.com/inconshreveable/mousetrap|inconshreveable/mousetrap|v1.1.0|.|.
github.com/pmezard/go-difflib|pmezard/go-difflib|v1.0.0|.|.
github.com/sirupsen/logrus|sirupsen/logrus|v1.9.3|.|.
github.com/spf13/cobra|spf13/cobra|v1.9.1|.|.
github.com/spf13/pflag|spf13/pflag|v1.0.6|.|.
github.com/stretchr/testify|stretchr/testify|v1.7.0|.|.
golang.org/x/sys|golang/sys|c0bba94af5f8|.|.
gopkg.in/yaml.v3|go-yaml/yaml|v3.0.1|.|."

source "$(dirname "$0")/../lib/modsrc.sh"
failed=0
fill_sources "$gitdirs" "$src" "blis|inference-sim/inference-sim|$blis_rev|.|." || failed=1
fill_sources "$gitdirs" "$src/mod" "$modules" || failed=1
if [[ -d $src/blis ]] && g=$(find_git inference-sim/inference-sim); then
  # the commit REV names, for build.sh's "built ... (BLIS COMMIT)"
  git --git-dir="$g" rev-parse "$blis_rev^{commit}" >"$src/blis/.blis-commit"
fi
exit $failed
