#!/usr/bin/env bash
# Static security scan of infra/ with checkov, run from a virtualenv of its own.
#
# checkov pins dozens of heavy dependencies that would fight the project's .venv, so it lives in
# $TIDECD_CACHE/checkov-venv: built once (about a minute), reused by later runs and by CI on this
# machine. The scan itself is offline (--skip-download: no platform metadata, no guideline links).
#
# Usage: scripts/checkov.sh [--install-only | --json] [--directory DIR] [extra checkov args ...]
#   --json   every check (passed, failed, skipped with its reason) as JSON, for tests/e2e/test_infra_scan.py
set -euo pipefail

CHECKOV_VERSION=3.3.30
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tidecd"
VENV="$CACHE/checkov-venv"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf '[checkov %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

installed_version() { "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("checkov"))' 2>/dev/null || true; }

ensure_venv() {
  if [ "$(installed_version)" = "$CHECKOV_VERSION" ]; then
    return
  fi
  local t0=$SECONDS
  log "installing checkov $CHECKOV_VERSION into $VENV"
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION"
  log "installed checkov in $((SECONDS - t0))s"
}

main() {
  local install_only=0 args=() style=(--quiet --compact) target=(--directory "$ROOT/infra")
  for a in "$@"; do
    case "$a" in
      --install-only) install_only=1 ;;
      --json) style=(--output json) ;;
      -d|--directory|-f|--file) target=(); args+=("$a") ;;  # scan what is named instead of infra/
      *) args+=("$a") ;;
    esac
  done
  ensure_venv
  [ $install_only = 1 ] && exit 0
  # Skips are inline `#checkov:skip=ID:reason` comments beside the resource they concern.
  exec "$VENV/bin/checkov" "${target[@]+"${target[@]}"}" --framework terraform --skip-download \
    "${style[@]}" "${args[@]+"${args[@]}"}"
}

main "$@"
