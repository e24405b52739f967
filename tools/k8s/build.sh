#!/usr/bin/env bash
# Builds kube-apiserver and kube-scheduler (and kube-controller-manager with --all) v1.26.0 from
# the tree tools/k8s/sources.sh wrote, for tests/cluster/:
#
#   tools/k8s/build.sh SRC OUT [--all]
#
# Go 1.19 (the release's own Go; Debian's golang-1.19 at /usr/lib/go-1.19, or GO=...), vendored
# modules, the providerless tag (no cloud-provider code), 2 parallel compiles (-p 2), no
# network. The version stamped in is v1.26.0 so `--version` and /version say what was built.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 SRC OUT [--all]" >&2; exit 2; }
src=$(realpath "$1") out=$2
go=${GO:-/usr/lib/go-1.19/bin/go}
[[ -x $go ]] || { echo "$0: no Go at $go (apt-get install golang-1.19, or set GO)" >&2; exit 1; }
[[ -f $src/go.mod && -d $src/vendor ]] || { echo "$0: $src is no Kubernetes tree" >&2; exit 1; }
cmds=(kube-apiserver kube-scheduler)
[[ ${3:-} == --all ]] && cmds+=(kube-controller-manager)
mkdir -p "$out"
out=$(realpath "$out")
commit=$(cat "$src/.k8s-commit" 2>/dev/null || echo unknown)
ldflags="-s -w"
# both version packages, as hack/lib/version.sh does: --version reads component-base's,
# the API server's /version client-go's
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v1.26.0 -X $pkg.gitMajor=1 -X $pkg.gitMinor=26"
  ldflags+=" -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean"
done
cd "$src"
for c in "${cmds[@]}"; do
  echo "building $c"
  CGO_ENABLED=0 GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local \
    "$go" build -p 2 -tags providerless -trimpath -ldflags "$ldflags" -o "$out/$c" "./cmd/$c"
done
"$out/kube-apiserver" --version
