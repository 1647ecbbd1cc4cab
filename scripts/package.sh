#!/usr/bin/env bash
# `npm run package`: builds, from this checkout, hostkeeper_<version>_amd64.deb and
# hostkeeper-<version>-1.x86_64.rpm (version from package.json) with the same files, under dist/packages/, and
# prints their paths, one per line (everything else goes to stderr). Self-contained: the agent compiled
# without its tests, production npm packages built against the bundled Node, the pinned Node binary and the
# pinned Caddy (scripts/caddy.env). docs/install.md ("What goes where") says what gets installed where.
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

[ "$(uname -m)" = x86_64 ] || die "builds amd64/x86_64 packages only, on an x86_64 machine (docs/install.md: arm64)"
for tool in dpkg-deb dpkg-shlibdeps rpmbuild strip gzip; do
  command -v "$tool" >/dev/null || die "$tool is missing: run scripts/install.sh --test"
done
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

# The tree both packages install: / is $stage. Units are added per package (their folder differs).
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
# binaries (one per platform; Node-API does not change between Node versions): linux-x64's is kept, and
# checked to load in the bundled Node.
say "installing production npm packages"
mkdir "$work/modules"
cp package.json package-lock.json "$work/modules/"
(cd "$work/modules" && "$root/scripts/npm" ci --omit=dev --no-audit --no-fund --loglevel=error >&2)
rm -f "$work/modules/node_modules/.package-lock.json"
mv "$work/modules/node_modules" "$lib/node_modules"
bs="$lib/node_modules/better-sqlite3"
rm -rf "$bs/deps" "$bs/src" "$bs/binding.gyp" "$bs/build"
find "$bs/prebuilds" -type f ! -name linux-x64.node -delete
strip --strip-unneeded --remove-section=.comment "$bs/prebuilds/linux-x64.node"
(cd "$lib" && "$node" -e 'new (require("better-sqlite3"))(":memory:").prepare("select 1").get()') ||
  die "better-sqlite3 does not load in the bundled Node"
# What the packages' authors ship besides their code (tests, benchmarks, examples, docs, dotfiles) goes;
# the agent never loads it. Nothing is executable: the agent requires these packages, it runs none of them.
find "$lib/node_modules" -name '.*' ! -name . -prune -exec rm -rf {} +
find "$lib/node_modules" -type d \( -name test -o -name tests -o -name __tests__ -o -name benchmarks \
  -o -name example -o -name examples -o -name docs -o -name integration -o -name fixture -o -name fixtures \) \
  -prune -exec rm -rf {} +
find "$lib/node_modules" -type f \( -name '*.md' -o -name '*.markdown' -o -name '*.html' \) -delete
find "$lib/node_modules" -type d -empty -delete
find "$lib/node_modules" -type f -exec chmod 0644 {} +

# The runtime and the proxy, byte for byte as pinned and verified (so not stripped).
mkdir -p "$lib/node/bin" "$lib/caddy"
cp "$node" "$lib/node/bin/node"
cp "$node_dir/LICENSE" "$lib/node/LICENSE"
cp .cache/caddy/usr/bin/caddy "$lib/caddy/caddy"
# The copy packaged is the pinned one (fetch-caddy.sh checked the cache; this checks what was copied).
echo "$(. scripts/caddy.env && echo "$CADDY_BIN_SHA256")  $lib/caddy/caddy" | sha256sum --check --status ||
  { echo "package: the Caddy binary does not match CADDY_BIN_SHA256 (scripts/caddy.env)" >&2; exit 1; }
install -m 0644 packaging/caddy-bootstrap.json "$lib/caddy/bootstrap.json"
install -m 0644 packaging/agent.env "$lib/agent.env"
# The OpenAPI document the agent serves at GET /v1/openapi.json (committed; the generator is not shipped).
install -m 0644 -D docs/openapi.json "$lib/docs/openapi.json"

# The assembled agent loads in the bundled Node: every module of the app, the native addon, the CLI.
"$node" --input-type=module -e "await import('$lib/dist/src/app.js')" ||
  die "the packaged agent does not load"
[ "$("$node" "$lib/dist/src/cli/main.js" --version)" = "hostkeeper $version" ] || die "the packaged CLI does not run"

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
chmod 0755 "$lib/node/bin/node" "$lib/caddy/caddy" "$stage/usr/bin/hostkeeper"

# --- Debian package ---
deb_root="$work/deb"
cp -al "$stage" "$deb_root"
mkdir -p "$deb_root/lib/systemd/system" "$deb_root/DEBIAN" "$deb_root/usr/share/lintian/overrides"
install -m 0644 packaging/hostkeeper.service packaging/hostkeeper-caddy.service "$deb_root/lib/systemd/system/"
install -m 0644 packaging/deb/lintian-overrides "$deb_root/usr/share/lintian/overrides/hostkeeper"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$deb_root/DEBIAN/"
echo /etc/hostkeeper/config.json >"$deb_root/DEBIAN/conffiles"
# Shared-library dependencies of the ELF files, as dpkg-shlibdeps reads them from this machine's packages.
mkdir -p "$work/shlibs/debian"
printf 'Source: hostkeeper\n\nPackage: hostkeeper\nArchitecture: amd64\n' >"$work/shlibs/debian/control"
shlibs=$(cd "$work/shlibs" && dpkg-shlibdeps -O "$deb_root/usr/lib/hostkeeper/node/bin/node" \
  "$deb_root/usr/lib/hostkeeper/caddy/caddy" \
  "$deb_root/usr/lib/hostkeeper/node_modules/better-sqlite3/prebuilds/linux-x64.node" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no dependencies"
installed_size=$(du -sk --exclude=DEBIAN "$deb_root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@DEPENDS@/$shlibs, systemd/" -e "s/@SIZE@/$installed_size/" \
  packaging/deb/control >"$deb_root/DEBIAN/control"
(cd "$deb_root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$deb_root/DEBIAN/md5sums" "$deb_root/DEBIAN/conffiles" "$deb_root/DEBIAN/control"
# Compression: xz -1 on every core, ~52 MB in ~6 s; xz -6 would save 8 MB at a minute and a half.
# (Debian's tools, lintian included, want xz or gzip in a .deb.) The RPM: zstd -9, which rpm >= 4.14
# (RHEL 8, Fedora 31 and later) reads.
deb="$out/hostkeeper_${version}_amd64.deb"
say "building $deb"
dpkg-deb --root-owner-group -Zxz -z1 --threads-max="$(nproc)" -b "$deb_root" "$deb" >&2

# --- RPM ---
rpm_root="$work/rpm-root"
cp -al "$stage" "$rpm_root"
mkdir -p "$rpm_root/usr/lib/systemd/system"
install -m 0644 packaging/hostkeeper.service packaging/hostkeeper-caddy.service "$rpm_root/usr/lib/systemd/system/"
sed -e "s/@VERSION@/$version/" -e "s|@STAGE@|$rpm_root|" packaging/rpm/hostkeeper.spec >"$work/hostkeeper.spec"
say "building the RPM"
rpmbuild -bb --quiet --define "_topdir $work/rpmbuild" --define "_binary_payload w9.zstdio" \
  --define "use_source_date_epoch_as_buildtime 1" --define "clamp_mtime_to_source_date_epoch 1" \
  "$work/hostkeeper.spec" >&2
rpm="$out/hostkeeper-$version-1.x86_64.rpm"
mv "$work/rpmbuild/RPMS/x86_64/hostkeeper-$version-1.x86_64.rpm" "$rpm"

echo "$deb"
echo "$rpm"
