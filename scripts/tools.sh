#!/usr/bin/env bash
# Build the real components tidecd's tests and demo run against, from the Go module proxy.
#
# Every binary lands in $TIDECD_CACHE/versions/<name>/<version>/ and is linked from $TIDECD_CACHE/bin,
# so a version bump rebuilds only that tool and later runs (CI on this machine, later sessions) reuse
# the rest. Idempotent: a tool whose pinned version is already built is skipped.
#
# Usage: scripts/tools.sh [--check] [name ...]     (no names: the default set; --check: build nothing,
#                                                   exit 1 if anything is missing)
#
# The peer GitOps engines the bench compares against (and the Argo CD migration tests run) are opt-in,
# never in the default set: `scripts/tools.sh peers` (or any of gitops-agent source-controller
# kustomize-controller argocd redis-server). Recipes and pitfalls: shared/PEERS-BUILD.md of the handbook.
# Each peer is built in a wrapper module whose go.mod is the upstream go.mod copied whole (so its replaces
# apply) minus its local-path replaces; the run-time data they need (CRDs, Argo CD's install ConfigMaps and
# git/gpg wrapper scripts) is copied from the module source next to the binary, under share/.
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
# Dex (the OIDC provider Argo CD bundles) for the single sign-on tests, built on demand (`tools.sh dex`).
# Its module path has no /v2, so its v2 tags are not module versions: the proxy serves its commits as
# pseudo-versions only. This one is the commit of Dex v2.41.1.
DEX_VERSION=v0.0.0-20240807174518-43956db7fd75
DEX_API_VERSION=v2.2.0  # its api/v2 module: the first published one with the RPCs this commit serves
# Peers. Argo CD v3.5.x needs a gitops-engine pseudo-version the proxy refuses (403) and Flux v1.10.x needs
# fluxcd/pkg versions it refuses, so these are the newest that build. The two v3.6.1 builds need go 1.27,
# fetched by the go command for those builds only (GOTOOLCHAIN stays local for everything else).
GITOPS_AGENT_VERSION=v3.6.1   # github.com/argoproj/argo-cd/gitops-engine/v3, the engine inside Argo CD
FLUX_VERSION=v1.9.6           # source-controller and kustomize-controller
FLUX_ARTIFACT_VERSION=v0.18.0 # the proxy refuses fluxcd/pkg/artifact v0.18.3, which v1.9.6 requires
ARGOCD_VERSION=v3.6.1
PEER_GO_TOOLCHAIN=go1.27.3
PEER_TOOLS="gitops-agent source-controller kustomize-controller argocd redis-server"

# gotemplate: tidecd's own helper (tools/gotemplate), Go's text/template with the Sprig Argo CD v3.6.1 pins;
# its version is a hash of its source, so an edit rebuilds it.
GOTEMPLATE_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/gotemplate"

# argocd-catalogue: not a binary but Argo CD's Lua catalogue (resource_customizations/ of the argo-cd module:
# health.lua and actions/ per kind, with Argo CD's test fixtures), a directory tidecd applies by default and
# `make package` ships (its .lua files); nothing of it is committed.
DEFAULT_TOOLS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok helm kustomize kubeseal fake-gcs-server registry gotemplate argocd-catalogue"

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
    dex) echo "$DEX_VERSION" ;;
    gitops-agent) echo "$GITOPS_AGENT_VERSION" ;;
    source-controller|kustomize-controller) echo "$FLUX_VERSION" ;;
    argocd|argocd-catalogue) echo "$ARGOCD_VERSION" ;;
    redis-server) echo "debian" ;;
    gotemplate) echo "src-$(cat "$GOTEMPLATE_SRC"/*.go "$GOTEMPLATE_SRC"/go.mod "$GOTEMPLATE_SRC"/go.sum | sha256sum | cut -c1-16)" ;;
    *) echo "unknown tool: $1" >&2; return 1 ;;
  esac
}

target_of() {
  if [ "$1" = redis-server ]; then echo /usr/bin/redis-server; return; fi
  echo "$CACHE/versions/$1/$(version_of "$1")/$1"
}
# A peer with run-time data counts as built only once its share/ directory is complete (marker file).
has_share() { case "$1" in source-controller|kustomize-controller|argocd) return 0 ;; *) return 1 ;; esac; }
have() {
  [ -x "$(target_of "$1")" ] || return 1
  [ "$1" != argocd-catalogue ] || [ -f "$(target_of "$1")/.complete" ] || return 1
  ! has_share "$1" || [ -f "$(dirname "$(target_of "$1")")/share/.complete" ]
}

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

# -- peers ----------------------------------------------------------------------------------------------

wrap_upstream() {  # DIR MODULE VERSION: a wrapper module whose go.mod is upstream's, renamed, minus local replaces
  local dir=$1 mod=$2 ver=$3 gomod
  rm -rf "$dir" && mkdir -p "$dir"
  gomod=$(go mod download -json "$mod@$ver" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  python3 - "$gomod" "$mod" "$ver" > "$dir/go.mod" <<'PY'
import re, sys
src, mod, ver = sys.argv[1:4]
out = []
for line in open(src):
    if line.startswith("module "):
        out.append("module tidecd.local/wrap\n"); continue
    if "=>" in line and re.search(r"=>\s*\.\.?/", line):
        continue  # a local-path replace (./api, ./gitops-engine): a separate module the proxy serves
    out.append(line)
out.append("\nrequire %s %s\n" % (mod, ver))
sys.stdout.write("".join(out))
PY
}

module_dir() {  # MODULE VERSION: its source in the module cache (downloaded if needed)
  go mod download -json "$1@$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

build_gitops_agent() {
  export GOTOOLCHAIN=$PEER_GO_TOOLCHAIN
  local mod=github.com/argoproj/argo-cd/gitops-engine/v3 w="$CACHE/work/gitops-agent-$GITOPS_AGENT_VERSION"
  wrap_upstream "$w" "$mod" "$GITOPS_AGENT_VERSION"
  mkdir -p "$(dirname "$(target_of gitops-agent)")"
  ( cd "$w" && go build -o "$(target_of gitops-agent)" "$mod/agent" )
}

build_flux() {  # name: source-controller | kustomize-controller
  local name=$1 mod="github.com/fluxcd/$1" w="$CACHE/work/$1-$FLUX_VERSION"
  local dir; dir=$(dirname "$(target_of "$name")")
  wrap_upstream "$w" "$mod" "$FLUX_VERSION"
  if [ "$name" = source-controller ]; then
    echo "replace github.com/fluxcd/pkg/artifact => github.com/fluxcd/pkg/artifact $FLUX_ARTIFACT_VERSION" >> "$w/go.mod"
  fi
  mkdir -p "$dir"
  ( cd "$w" && go build -o "$(target_of "$name")" "$mod" )
  local src; src=$(module_dir "$mod" "$FLUX_VERSION")
  rm -rf "$dir/share" && mkdir -p "$dir/share/crds"
  cp "$src"/config/crd/bases/*.yaml "$dir/share/crds/"
  chmod -R u+w "$dir/share" && touch "$dir/share/.complete"
}

build_argocd() {
  export GOTOOLCHAIN=$PEER_GO_TOOLCHAIN
  local mod=github.com/argoproj/argo-cd/v3 w="$CACHE/work/argocd-$ARGOCD_VERSION"
  local dir; dir=$(dirname "$(target_of argocd)")
  wrap_upstream "$w" "$mod" "$ARGOCD_VERSION"
  mkdir -p "$dir"
  ( cd "$w" && go build -ldflags "-X $mod/common.version=${ARGOCD_VERSION#v}" -o "$(target_of argocd)" "$mod/cmd" )
  # What the controller and repo-server need beside the binary: CRDs, install.yaml (its ConfigMaps and
  # Secrets), and the repo-server's git-verify-wrapper.sh/gpg-wrapper.sh, which it runs from $PATH on every
  # manifest generation (even with GPG off). The module cache is read-only, so copy and chmod.
  local src; src=$(module_dir "$mod" "$ARGOCD_VERSION")
  rm -rf "$dir/share" && mkdir -p "$dir/share/crds" "$dir/share/bin"
  cp "$src"/manifests/crds/application-crd.yaml "$src"/manifests/crds/appproject-crd.yaml \
     "$src"/manifests/crds/applicationset-crd.yaml "$dir/share/crds/"
  cp "$src"/manifests/install.yaml "$dir/share/install.yaml"
  cp "$src"/hack/git-verify-wrapper.sh "$src"/hack/gpg-wrapper.sh "$dir/share/bin/"
  chmod -R u+w "$dir/share" && chmod 755 "$dir/share/bin/"*.sh
  touch "$dir/share/.complete"
}

build_dex() {  # Dex replaces its api/v2 module by ./api/v2; the wrapper takes a published one instead
  local mod=github.com/dexidp/dex w="$CACHE/work/dex-$DEX_VERSION"
  wrap_upstream "$w" "$mod" "$DEX_VERSION"
  echo "replace $mod/api/v2 => $mod/api/v2 $DEX_API_VERSION" >> "$w/go.mod"
  mkdir -p "$(dirname "$(target_of dex)")"
  # cgo: its config code names the SQLite3 storage (mattn/go-sqlite3), which builds only with cgo
  ( cd "$w" && CGO_ENABLED=1 go build -ldflags "-X main.version=v2.41.1" -o "$(target_of dex)" "$mod/cmd/dex" )
}

build_argocd_catalogue() {  # resource_customizations/ out of the argo-cd module zip the go command verified
  local target; target=$(target_of argocd-catalogue)
  # The module's go.mod asks for a newer go than GOTOOLCHAIN=local: the go command downloads and verifies the
  # zip, then reports that mismatch (not an error here); any other error is one.
  local info; info=$(cd "$CACHE/work" && go mod download -json "github.com/argoproj/argo-cd/v3@$ARGOCD_VERSION" || true)
  python3 - "$target" "github.com/argoproj/argo-cd/v3@$ARGOCD_VERSION/resource_customizations/" "$info" <<'PY'
import json, pathlib, shutil, sys, zipfile
target, prefix = pathlib.Path(sys.argv[1]), sys.argv[2]
try:
    info = json.loads(sys.argv[3])
except json.JSONDecodeError:
    sys.exit(f"go mod download printed no module information: {sys.argv[3][-2000:]}")
error, zip_path = str(info.get("Error") or ""), pathlib.Path(str(info.get("Zip") or "/nonexistent"))
if error and "requires go >=" not in error:
    sys.exit(f"go mod download failed: {error}")
if not zip_path.is_file() or not info.get("Sum"):
    sys.exit(f"go mod download left no verified zip: {info}")
partial = target.with_name(target.name + ".partial")
shutil.rmtree(partial, ignore_errors=True)
with zipfile.ZipFile(zip_path) as archive:
    for member in archive.namelist():
        if member.startswith(prefix) and not member.endswith("/") and ".." not in member.split("/"):
            out = partial / member[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(archive.read(member))
if not any(partial.glob("*/*/health.lua")):
    sys.exit(f"{zip_path} holds no {prefix}*/*/health.lua")
(partial / ".complete").write_text(f"{zip_path} {info['Sum']}\n")
shutil.rmtree(target, ignore_errors=True)
partial.rename(target)
PY
}

install_redis() {  # Debian's redis-server (the repo-server and controller cache in it); its service stays off
  command -v apt-get >/dev/null || { echo "redis-server missing and no apt-get to install it" >&2; return 1; }
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
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
    dex) build_dex ;;
    gitops-agent) build_gitops_agent ;;
    source-controller|kustomize-controller) build_flux "$name" ;;
    argocd) build_argocd ;;
    redis-server) install_redis ;;
    argocd-catalogue) mkdir -p "$(dirname "$(target_of argocd-catalogue)")" && build_argocd_catalogue ;;
    gotemplate) mkdir -p "$(dirname "$(target_of gotemplate)")"
                ( cd "$GOTEMPLATE_SRC" && go build -trimpath -o "$(target_of gotemplate)" . ) ;;
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
    dex) out=$("$BIN/dex" version 2>&1 | head -1) ;;
    gitops-agent) out=$("$BIN/gitops-agent" --help 2>&1 | grep -m1 -E '^Usage|^  gitops-agent' || true)
                  [ -n "$out" ] || { log "gitops-agent --help printed no usage"; return 1; } ;;
    source-controller|kustomize-controller)
                  out=$("$BIN/$name" --help 2>&1 | grep -m1 -e '--metrics-addr' | sed 's/^ *//' || true)
                  [ -n "$out" ] || { log "$name --help has no --metrics-addr"; return 1; }
                  out="built ($FLUX_VERSION), $out" ;;
    argocd) out=$("$BIN/argocd" version --client --short 2>&1 | head -1) ;;
    redis-server) out=$("$BIN/redis-server" --version) ;;
    argocd-catalogue) out="$(find -L "$BIN/argocd-catalogue" -name health.lua | wc -l) health checks, $(find -L \
                        "$BIN/argocd-catalogue" -name action.lua | wc -l) actions ($ARGOCD_VERSION)" ;;
    gotemplate) out=$(echo '{"goTemplate":true,"params":[{"a":"ok"}],"items":[{"template":"{{ .a | upper }}"}]}' \
                      | "$BIN/gotemplate") ;;
  esac
  log "ok $name: $out"
}

main() {
  local check=0 tools=() peer_tools=()
  for a in "$@"; do
    case "$a" in
      --check) check=1 ;;
      peers) read -r -a peer_tools <<<"$PEER_TOOLS"; tools+=("${peer_tools[@]}") ;;
      *) version_of "$a" >/dev/null; tools+=("$a") ;;
    esac
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
