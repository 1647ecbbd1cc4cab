#!/usr/bin/env bash
# `npm run package`: builds, from this checkout, hostkeeper_<version>_amd64.deb and
# hostkeeper-<version>-1.x86_64.rpm, then hostkeeper_<version>_arm64.deb and hostkeeper-<version>-1.aarch64.rpm
# (version from package.json; PACKAGE_ARCHES="amd64" builds the first two only), each .deb and
# RPM with the same files, under dist/packages/, and prints their paths, one per line, in that order
# (everything else goes to stderr). Self-contained: the agent compiled without its tests, production npm
# packages built against the bundled Node, the pinned Node binary and the pinned Caddy of each architecture
# (scripts/runtime.env, scripts/caddy.env). The arm64 build is checked on this machine under qemu.
# docs/install.md ("What goes where") says what gets installed where.
#
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=$(date +%s)
say() { echo "package: [$(($(date +%s) - started)) s] $*" >&2; }
die() {
  echo "package: $*" >&2
  exit 1
}

[ "$(uname -m)" = x86_64 ] || die "builds on an x86_64 machine only (docs/install.md: arm64)"
arches=${PACKAGE_ARCHES:-amd64 arm64}
# amd64 first, always: the arm64 .deb's dependencies are checked against the amd64 build's (package-arch.sh).
[ "${arches%% *}" = amd64 ] || die "PACKAGE_ARCHES must start with amd64 (\"amd64\" or \"amd64 arm64\")"
for tool in dpkg-deb dpkg-shlibdeps rpmbuild strip gzip objdump; do
  command -v "$tool" >/dev/null || die "$tool is missing: run scripts/install.sh --test"
done
if [[ " $arches " == *" arm64 "* ]]; then
  for tool in aarch64-linux-gnu-strip aarch64-linux-gnu-objdump qemu-aarch64-static; do
    command -v "$tool" >/dev/null || die "$tool is missing (arm64 packages): run scripts/install.sh --test"
  done
fi
# The runtime the project runs on (scripts/runtime.env) is the one the package bundles.
bash scripts/fetch-runtime.sh >&2
node_dir="$root/.cache/node"
node="$node_dir/bin/node"

version=$("$node" -p 'require("./package.json").version')
# Dates inside the packages come from the last commit, so two builds of one commit are the same.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH
out="$root/dist/packages"
mkdir -p "$out" "$root/.cache"
work=$(mktemp -d "$root/.cache/package.XXXXXX")
trap 'rm -rf "$work"' EXIT

bash scripts/fetch-caddy.sh >&2
if [[ " $arches " == *" arm64 "* ]]; then
  bash scripts/fetch-runtime.sh arm64 >&2
  bash scripts/fetch-caddy.sh arm64 >&2
fi

# The tree every package installs, whatever its architecture: / is $stage. What differs per architecture (Node,
# Caddy, better-sqlite3's binary) and the units (their folder differs per package format) are added per package.
stage="$work/stage"
lib="$stage/usr/lib/hostkeeper"
mkdir -p "$lib" "$stage/usr/bin" "$stage/usr/lib/sysusers.d" "$stage/usr/lib/sysctl.d" "$stage/etc/hostkeeper" "$stage/usr/share/doc/hostkeeper"

say "compiling the agent"
"$node" node_modules/typescript/bin/tsc -p tsconfig.package.json --outDir "$lib/dist"
# The wrapper runs the CLI with the bundled Node; a `#!/usr/bin/env node` line would name whatever node is on PATH.
sed -i '1{/^#!/d}' "$lib/dist/src/cli/main.js"
"$node" -e '
  const pkg = require("./package.json");
  const keep = { name: pkg.name, version: pkg.version, description: pkg.description, private: true,
    type: pkg.type, bin: pkg.bin, dependencies: pkg.dependencies };
  require("fs").writeFileSync(process.argv[1], JSON.stringify(keep, null, 2) + "\n");
' "$lib/package.json"

# Production packages, installed by the pinned npm on the pinned Node. better-sqlite3 ships Node-API
# binaries (one per platform; Node-API does not change between Node versions): each package keeps its
# architecture's, checked to load in its bundled Node.
say "installing production npm packages"
mkdir "$work/modules"
cp package.json package-lock.json "$work/modules/"
(cd "$work/modules" && "$root/scripts/npm" ci --omit=dev --no-audit --no-fund --loglevel=error >&2)
rm -f "$work/modules/node_modules/.package-lock.json"
mv "$work/modules/node_modules" "$lib/node_modules"
bs="$lib/node_modules/better-sqlite3"
rm -rf "$bs/deps" "$bs/src" "$bs/binding.gyp" "$bs/build"
mkdir "$work/prebuilds"
mv "$bs/prebuilds/linux-x64.node" "$bs/prebuilds/linux-arm64.node" "$work/prebuilds/"
rm -rf "$bs/prebuilds"
# What the packages' authors ship besides their code (tests, benchmarks, examples, docs, dotfiles) goes;
# the agent never loads it. Nothing is executable: the agent requires these packages, it runs none of them.
find "$lib/node_modules" -name '.*' ! -name . -prune -exec rm -rf {} +
find "$lib/node_modules" -type d \( -name test -o -name tests -o -name __tests__ -o -name benchmarks \
  -o -name example -o -name examples -o -name docs -o -name integration -o -name fixture -o -name fixtures \) \
  -prune -exec rm -rf {} +
find "$lib/node_modules" -type f \( -name '*.md' -o -name '*.markdown' -o -name '*.html' \) -delete
find "$lib/node_modules" -type d -empty -delete
find "$lib/node_modules" -type f -exec chmod 0644 {} +

install -m 0644 packaging/caddy-bootstrap.json -D "$lib/caddy/bootstrap.json"
install -m 0644 packaging/agent.env "$lib/agent.env"
# The OpenAPI document the agent serves at GET /v1/openapi.json (committed; the generator is not shipped).
install -m 0644 -D docs/openapi.json "$lib/docs/openapi.json"
install -m 0755 packaging/hostkeeper.sh "$stage/usr/bin/hostkeeper"
install -m 0644 packaging/sysusers.conf "$stage/usr/lib/sysusers.d/hostkeeper.conf"
install -m 0644 packaging/sysctl.conf "$stage/usr/lib/sysctl.d/60-hostkeeper.conf"
install -m 0644 packaging/config.json "$stage/etc/hostkeeper/config.json"
mkdir -p "$stage/usr/share/man/man1"
gzip -9n <packaging/hostkeeper.1 >"$stage/usr/share/man/man1/hostkeeper.1.gz"
doc="$stage/usr/share/doc/hostkeeper"
{
  cat packaging/copyright
  echo
  echo "Caddy: Debian's copyright file of caddy $(. scripts/caddy.env && echo "$CADDY_VERSION"):"
  echo
  cat .cache/caddy/usr/share/doc/caddy/copyright
} >"$doc/copyright"
changelog_date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
maintainer=$(sed -n 's/^Maintainer: //p' packaging/deb/control)
printf '%s\n' "hostkeeper ($version) unstable; urgency=medium" "" \
  "  * Hostkeeper $version (its repository's git history is the changelog)." "" \
  " -- $maintainer  $changelog_date" | gzip -9n >"$doc/changelog.gz"
chmod -R u=rwX,go=rX "$stage"
chmod 0755 "$stage/usr/bin/hostkeeper"

# shellcheck source=scripts/package-arch.sh
. scripts/package-arch.sh
for arch in $arches; do
  case "$arch" in
    amd64 | arm64) build_arch "$arch" ;;
    *) die "no packages for $arch (amd64, arm64)" ;;
  esac
done
