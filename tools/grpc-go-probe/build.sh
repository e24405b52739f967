#!/usr/bin/env bash
# Builds grpc-go-probe (tools/grpc-go-probe/main.go) against grpc-go v1.64.1 from local
# module sources, without a Go module proxy, for tests/router/test_router_grpc_go.py.
#
#   tools/grpc-go-probe/build.sh SRC [OUT]
#
# SRC holds one directory per module of go.mod's require block, at its module path:
# SRC/google.golang.org/grpc, SRC/golang.org/x/net, ... each at the version go.mod names
# (grpc-go v1.64.1 declares `go 1.19`: the newest grpc-go that builds with Go 1.19; v1.65
# needs 1.21). From git clones of the modules' repositories,
# tools/grpc-go-probe/sources.sh GITDIRS SRC fills SRC (it says which repository and
# revision each module comes from). With a module proxy,
# `GOFLAGS=-mod=mod go build` in tools/grpc-go-probe needs neither script.
#
# OUT defaults to build/grpc-go-probe/grpc-go-probe (build/ is git-ignored), where the test
# looks when KVSPREAD_GRPC_GO_PROBE is not set. Needs Go 1.19 or newer on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 SRC [OUT]  (SRC: module sources by module path)" >&2; exit 2; }
src=$(cd "$1" && pwd)
out=${2:-$root/build/grpc-go-probe/grpc-go-probe}
command -v go >/dev/null || { echo "$0: go is not on PATH (Go 1.19 or newer)" >&2; exit 2; }

# the modules and versions of go.mod's require block
mapfile -t mods < <(awk '/^require \(/{on=1; next} on && /^\)/{on=0} on {print $1, $2}' "$here/go.mod")
missing=()
for mv in "${mods[@]}"; do
  [[ -f "$src/${mv%% *}/go.mod" ]] || missing+=("$mv")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "$0: missing in $src (module version):" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/main.go" "$here/go.mod" "$work/"
for mv in "${mods[@]}"; do
  (cd "$work" && go mod edit -replace "${mv%% *}=$src/${mv%% *}")
done
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
(cd "$work" && GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local \
  go build -trimpath -o "$out" .)
echo "built $out:"
go version -m "$out" | awk '$1 == "dep" {print "  " $2, $3}'
