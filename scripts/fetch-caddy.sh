#!/usr/bin/env bash
# Fetches a current Caddy (Debian sid's package; Debian stable's 2.6 lacks weighted_round_robin and is
# older than the admin-API behaviour the agent relies on) and unpacks it into .cache/caddy without
# installing it system-wide. The host's apt state is only read (its mirror list); lists and the .deb live
# under the cache folder. Re-runs are no-ops once the binary is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.cache/caddy"
bin="$dest/usr/bin/caddy"
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "caddy: $("$bin" version | cut -d' ' -f1) at $bin"
  exit 0
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
echo "deb [trusted=yes] $mirror sid main" >"$work/sources.list"
opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=$work/parts"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::archives=$work/archives"
  -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Update::Error-Mode=any"
  -o "Acquire::Languages=none" -o "APT::Architecture=$(dpkg --print-architecture)"
  -o "APT::Sandbox::User=root")
apt-get -qq "${opts[@]}" update
(cd "$work" && apt-get -qq "${opts[@]}" download caddy)
rm -rf "$dest"
mkdir -p "$dest"
dpkg-deb -x "$work"/caddy_*.deb "$dest"
"$bin" version
echo "caddy: unpacked to $bin"
