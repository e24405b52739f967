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

# shellcheck source=tools/lib/modsrc.sh
source "$(dirname "$0")/../lib/modsrc.sh"
fill_sources "$gitdirs" "$src" "$table"
