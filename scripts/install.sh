#!/usr/bin/env bash
# Installs what Hostkeeper needs on a Debian machine, as root: Node.js >= 20, the npm packages (better-sqlite3
# builds from source when no prebuilt binary can be fetched), and the Caddy pinned in scripts/caddy.env,
# unpacked under .cache/.
# With --test it also installs what the test suite needs (see TEST_PACKAGES). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the test suite uses, added by each area's tests (the packaging tests: a systemd container
# from mmdebstrap booted with systemd-nspawn, lintian; rpm builds the RPM).
TEST_PACKAGES=(dpkg-dev dnf dnf-plugins-core rpm createrepo-c openssl systemd-container mmdebstrap lintian)

want_test=false
[ "${1:-}" = "--test" ] && want_test=true

apt_updated=false
apt_install() {
  if [ "$apt_updated" = false ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=true
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [ "$(node_major)" -lt 20 ]; then
  apt_install nodejs npm ca-certificates
  if [ "$(node_major)" -lt 20 ]; then
    echo "install: Node.js >= 20 is required; this machine's packages give $(node --version 2>/dev/null || echo none)." >&2
    echo "install: install Node.js 20 or later (e.g. from your distribution's backports) and run this again." >&2
    exit 1
  fi
fi
# Tools the install needs: a compiler for better-sqlite3, dpkg-deb and apt-get to unpack Caddy.
missing=()
for tool in make g++ python3 dpkg-deb apt-get; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then apt_install build-essential python3; fi

if $want_test; then
  need=()
  for p in "${TEST_PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p"); done
  if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi
fi

# npm ci only when the lock file changed since the last install (it rebuilds better-sqlite3, ~1 minute).
stamp=node_modules/.hostkeeper-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -f node_modules/better-sqlite3/build/Release/better_sqlite3.node ]; then
  npm ci --no-audit --no-fund
  echo "$want" >"$stamp"
fi

bash scripts/fetch-caddy.sh
