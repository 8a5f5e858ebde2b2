#!/usr/bin/env bash
# Build the real components tidecd's tests and demo run against, from the Go module proxy.
#
# Every binary lands in $TIDECD_CACHE/versions/<name>/<version>/ and is linked from $TIDECD_CACHE/bin,
# so a version bump rebuilds only that tool and later runs (CI on this machine, later sessions) reuse
# the rest. Idempotent: a tool whose pinned version is already built is skipped.
#
# Usage: scripts/tools.sh [--check] [name ...]     (no names: the default set; --check: build nothing,
#                                                   exit 1 if anything is missing)
set -euo pipefail

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tidecd"
BIN="$CACHE/bin"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
export GOPATH="$CACHE/go" GOMODCACHE="$CACHE/go/pkg/mod" GOCACHE="$CACHE/go-build"
mkdir -p "$BIN" "$CACHE/versions" "$CACHE/work"
# One build at a time: concurrent runs (parallel test sessions, CI beside a demo) would delete each other's
# work directories. A second run waits here, then finds the tools built and skips them.
if [ -z "${TIDECD_TOOLS_LOCKED:-}" ]; then
  exec 9>"$CACHE/tools.lock"
  flock 9
  export TIDECD_TOOLS_LOCKED=1
fi

ETCD_VERSION=v3.6.5
KUBE_VERSION=v1.34.4
KWOK_VERSION=v0.7.0
HELM_VERSION=v3.19.5
KUSTOMIZE_VERSION=v5.8.1
KUBESEAL_VERSION=v0.36.0
FAKE_GCS_VERSION=v1.55.1
REGISTRY_VERSION=v3.1.1
CRANE_VERSION=v0.21.9
KAPP_VERSION=v0.66.0
TERRAFORM_VERSION=v1.5.7  # the newest release whose go.mod builds from the module proxy

DEFAULT_TOOLS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok helm kustomize kubeseal fake-gcs-server registry"

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

version_of() {
  case "$1" in
    etcd) echo "$ETCD_VERSION" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler) echo "$KUBE_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    kustomize) echo "$KUSTOMIZE_VERSION" ;;
    kubeseal) echo "$KUBESEAL_VERSION" ;;
    fake-gcs-server) echo "$FAKE_GCS_VERSION" ;;
    registry) echo "$REGISTRY_VERSION" ;;
    crane) echo "$CRANE_VERSION" ;;
    kapp) echo "$KAPP_VERSION" ;;
    terraform) echo "$TERRAFORM_VERSION" ;;
    *) echo "unknown tool: $1" >&2; return 1 ;;
  esac
}

target_of() { echo "$CACHE/versions/$1/$(version_of "$1")/$1"; }
have() { [ -x "$(target_of "$1")" ]; }

link() {  # link a built binary into $BIN
  ln -sfn "$(target_of "$1")" "$BIN/$1"
}

go_install() {  # name module@version [ldflags]
  local name=$1 pkg=$2 ldflags=${3:-}
  local dir; dir=$(dirname "$(target_of "$name")")
  mkdir -p "$dir"
  GOBIN="$dir" go install -ldflags "$ldflags" "$pkg"
}

build_etcd() {
  local w="$CACHE/work/etcd-$ETCD_VERSION"
  rm -rf "$w" && mkdir -p "$w" && cd "$w"
  go mod init tidecd.local/etcd >/dev/null 2>&1
  # etcd's own go.mod has relative replaces, so `go install` of it fails; a wrapper module needs none.
  go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  mkdir -p "$(dirname "$(target_of etcd)")"
  go build -o "$(target_of etcd)" go.etcd.io/etcd/server/v3
}

build_wrapped() {  # name module@version package: for modules the proxy will not list (`go install` needs it)
  local name=$1 module=$2 pkg=$3
  local w="$CACHE/work/$name-${module##*@}"
  rm -rf "$w" && mkdir -p "$w" && cd "$w"
  go mod init "tidecd.local/$name" >/dev/null 2>&1
  go get -tool "$module"
  mkdir -p "$(dirname "$(target_of "$name")")"
  go build -o "$(target_of "$name")" "$pkg"
}

build_kube() {  # builds all three control-plane binaries in one go build (shared compilation)
  local w="$CACHE/work/kube-$KUBE_VERSION"
  local minor; minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  local staging="v0.${KUBE_VERSION#v1.}"
  rm -rf "$w" && mkdir -p "$w" && cd "$w"
  go mod init tidecd.local/kube >/dev/null 2>&1
  local gomod; gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # k8s.io/kubernetes points its staging modules at ./staging/...; pin each to its published version.
  go mod edit -json "$gomod" | python3 -c '
import json, sys
staging = sys.argv[1]
for r in json.load(sys.stdin).get("Replace") or []:
    if r["New"]["Path"].startswith("./staging"):
        old = r["Old"]["Path"]
        print("-replace=" + old + "=" + old + "@" + staging)
' "$staging" | xargs go mod edit
  go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
  go mod tidy -e >/dev/null 2>&1 || true
  local ld=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  for name in kube-apiserver kube-controller-manager kube-scheduler; do
    have "$name" && continue
    log "building $name $KUBE_VERSION (cold: several minutes)"
    mkdir -p "$(dirname "$(target_of "$name")")"
    go build -ldflags "$ld" -o "$(target_of "$name")" "k8s.io/kubernetes/cmd/$name"
    link "$name"
  done
}

build() {
  local name=$1
  case "$name" in
    etcd) build_etcd ;;
    kube-apiserver|kube-controller-manager|kube-scheduler) build_kube ;;
    kwok) go_install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" ;;
    helm) go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
            "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34" ;;
    kustomize) go_install kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" \
            "-X sigs.k8s.io/kustomize/api/provenance.version=$KUSTOMIZE_VERSION" ;;
    kubeseal) go_install kubeseal "github.com/bitnami-labs/sealed-secrets/cmd/kubeseal@$KUBESEAL_VERSION" "-X main.VERSION=$KUBESEAL_VERSION" ;;
    fake-gcs-server) go_install fake-gcs-server "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION" ;;
    registry) go_install registry "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION" ;;
    crane) go_install crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" ;;
    kapp) build_wrapped kapp "carvel.dev/kapp@$KAPP_VERSION" carvel.dev/kapp/cmd/kapp ;;
    terraform) go_install terraform "github.com/hashicorp/terraform@$TERRAFORM_VERSION" ;;
  esac
  link "$name"
}

version_check() {  # print the tool's own version line, proving the binary runs
  local name=$1 out
  case "$name" in
    etcd) out=$("$BIN/etcd" --version | head -1) ;;
    kube-*) out=$("$BIN/$name" --version) ;;
    kwok) out=$("$BIN/kwok" --version 2>&1 | head -1) ;;
    helm) out=$("$BIN/helm" version --short) ;;
    kustomize) out=$("$BIN/kustomize" version) ;;
    kubeseal) out=$("$BIN/kubeseal" --version) ;;
    fake-gcs-server) out="$("$BIN/fake-gcs-server" -help 2>&1 | head -1 || true)"; out="built ($FAKE_GCS_VERSION)" ;;
    registry) out=$("$BIN/registry" --version) ;;
    crane) out=$("$BIN/crane" version) ;;
    kapp) out=$("$BIN/kapp" version | head -1) ;;
    terraform) out=$("$BIN/terraform" version | head -1) ;;
  esac
  log "ok $name: $out"
}

main() {
  local check=0 tools=()
  for a in "$@"; do
    case "$a" in --check) check=1 ;; *) tools+=("$a") ;; esac
  done
  [ ${#tools[@]} -gt 0 ] || read -r -a tools <<<"$DEFAULT_TOOLS"
  local missing=0
  for name in "${tools[@]}"; do
    if have "$name"; then
      link "$name"
      continue
    fi
    if [ $check = 1 ]; then
      log "missing $name $(version_of "$name")"; missing=1; continue
    fi
    local t0=$SECONDS
    log "building $name $(version_of "$name")"
    ( build "$name" )
    log "built $name in $((SECONDS - t0))s"
  done
  [ $check = 1 ] && exit $missing
  for name in "${tools[@]}"; do version_check "$name"; done
  log "all tools in $BIN"
}

main "$@"
