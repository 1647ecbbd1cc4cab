#!/usr/bin/env bash
# Installs what Hostkeeper needs on a Debian machine, as root: the pinned Node.js runtime and npm
# (scripts/runtime.env, under .cache/; the machine's own Node, if any, is never used to run the project),
# the npm packages built against that runtime, the compiled agent (dist/), and the Caddy pinned in
# scripts/caddy.env under .cache/. With --test it also installs what the test suite needs (see
# TEST_PACKAGES). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the test suite uses, added by each area's tests (the packaging tests: a systemd container
# from mmdebstrap booted with systemd-nspawn, lintian; rpm builds the RPM; minisign signs operator fixtures;
# pebble, an ACME server, issues real certificates to Caddy on loopback; the arm64 packages are stripped with
# binutils-aarch64-linux-gnu and their Node and Caddy run under qemu-user-static, on the arm64 C libraries).
TEST_PACKAGES=(dpkg-dev dnf dnf-plugins-core rpm createrepo-c openssl python3 systemd-container mmdebstrap lintian minisign pebble
  qemu-user-static libc6-arm64-cross libstdc++6-arm64-cross binutils-aarch64-linux-gnu)

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

# Any npm, on any Node, can fetch the pinned runtime; the distribution's is installed only when there is
# none. No compiler is needed: better-sqlite3 ships a Node-API binary for linux-x64 in its package.
if ! command -v npm >/dev/null; then apt_install npm ca-certificates; fi

if $want_test; then
  need=()
  for p in "${TEST_PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p"); done
  if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi
fi

bash scripts/fetch-runtime.sh

# npm ci with the pinned npm and Node (scripts/npm; an addon that compiles gets the pinned Node's headers),
# only when the lock file or the runtime changed since the last install, or when better-sqlite3 does not
# load on the pinned Node: one built for another Node would fail only when the agent opens its database.
addon_loads() { scripts/node -e 'new (require("better-sqlite3"))(":memory:").close()' 2>/dev/null; }
stamp=node_modules/.hostkeeper-install
want="$(sha256sum package-lock.json scripts/runtime.env | cut -d' ' -f1 | tr '\n' ' ')"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! addon_loads; then
  scripts/npm ci --no-audit --no-fund
  if ! addon_loads; then
    echo "install: better-sqlite3 does not load on the pinned Node.js $(scripts/node --version):" >&2
    scripts/node -e 'new (require("better-sqlite3"))(":memory:")' >&2 || true
    exit 1
  fi
  echo "$want" >"$stamp"
fi

# The agent is compiled here, once; `npm start` runs dist/ and never compiles.
scripts/node node_modules/.bin/tsc -p tsconfig.json

bash scripts/fetch-caddy.sh
echo "install: Hostkeeper ready on Node.js $(scripts/node --version) ($(pwd)/.cache/node)"
