#!/usr/bin/env bash
# Fetches the Caddy pinned in scripts/caddy.env (Debian's package at an exact version; Debian stable's 2.6
# lacks weighted_round_robin and the admin-API behaviour the agent relies on) and unpacks it into
# .cache/caddy without installing it system-wide. The .deb's sha256 is checked against the pin before
# anything is unpacked: the index is fetched without signature checks, so the pin is what makes the file
# trustworthy. The host's apt state is only read (its mirror list); lists and the .deb live in a temporary
# folder. `.cache/caddy/.sha256` records what was verified, so re-runs are no-ops until the pin moves.
# `fetch-caddy.sh arm64` does the same with the arm64 .deb (CADDY_ARM64_*) into .cache/caddy-arm64, for the
# arm64 packages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/caddy.env
. "$root/scripts/caddy.env"
arch=$(dpkg --print-architecture)
dest="$root/.cache/caddy"
run=()
if [ "${1:-$arch}" != "$arch" ]; then
  [ "$1" = arm64 ] || { echo "fetch-caddy: no pin for $1 (arm64, or nothing for this machine's)" >&2; exit 2; }
  arch=arm64
  dest="$root/.cache/caddy-arm64"
  CADDY_DEB_SHA256=$CADDY_ARM64_DEB_SHA256
  CADDY_BIN_SHA256=$CADDY_ARM64_BIN_SHA256
  # Run on this machine through qemu (qemu-user-static, with the arm64 C library of libc6-arm64-cross).
  run=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)
fi
bin="$dest/usr/bin/caddy"
if [ -x "$bin" ] && [ "$(cat "$dest/.sha256" 2>/dev/null)" = "$CADDY_DEB_SHA256" ]; then
  if echo "$CADDY_BIN_SHA256  $bin" | sha256sum --check --status; then
    echo "caddy: $CADDY_VERSION at $bin"
    exit 0
  fi
  echo "fetch-caddy: $bin does not match CADDY_BIN_SHA256 in scripts/caddy.env; fetching it again" >&2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/parts"

# Reuse the mirror already configured on the machine; only the suite changes.
mirror=""
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
  echo "fetch-caddy: no Debian mirror configured in /etc/apt/sources.list(.d)" >&2
  exit 1
fi
echo "deb [trusted=yes] $mirror $CADDY_SUITE main" >"$work/sources.list"
opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=$work/parts"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::archives=$work/archives"
  -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Update::Error-Mode=any"
  -o "Acquire::Languages=none" -o "APT::Architecture=$arch" -o "APT::Architectures=$arch"
  -o "APT::Sandbox::User=root")
apt-get -qq "${opts[@]}" update
if ! (cd "$work" && apt-get -qq "${opts[@]}" download "caddy:$arch=$CADDY_VERSION"); then
  echo "fetch-caddy: $CADDY_SUITE no longer has caddy $CADDY_VERSION; move the pin in scripts/caddy.env (docs/install.md: Moving the Caddy pin)" >&2
  exit 1
fi
deb=$(ls "$work"/caddy_*_"$arch".deb)
if ! echo "$CADDY_DEB_SHA256  $deb" | sha256sum --check --status; then
  echo "fetch-caddy: $(basename "$deb") does not match the sha256 in scripts/caddy.env" >&2
  echo "fetch-caddy: expected $CADDY_DEB_SHA256, got $(sha256sum "$deb" | cut -d' ' -f1); nothing was unpacked" >&2
  exit 1
fi
# Unpacked beside the destination and renamed into place, so a half-unpacked Caddy never looks whole.
mkdir "$work/unpacked"
dpkg-deb -x "$deb" "$work/unpacked"
if ! echo "$CADDY_BIN_SHA256  $work/unpacked/usr/bin/caddy" | sha256sum --check --status; then
  echo "fetch-caddy: usr/bin/caddy in $(basename "$deb") does not match CADDY_BIN_SHA256 in scripts/caddy.env" >&2
  exit 1
fi
echo "$CADDY_DEB_SHA256" >"$work/unpacked/.sha256"
"${run[@]}" "$work/unpacked/usr/bin/caddy" version
mkdir -p "$root/.cache"
rm -rf "$dest"
mv "$work/unpacked" "$dest"
echo "caddy: $CADDY_VERSION (sha256 verified) unpacked to $bin"
