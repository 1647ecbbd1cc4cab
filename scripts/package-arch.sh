# Sourced by scripts/package.sh: what differs per architecture. `build_arch <amd64|arm64>` adds that
# architecture's Node, Caddy and better-sqlite3 binary to a copy of the common tree ($stage), checks that the
# agent loads in it (an arm64 one under qemu-user-static), and builds its .deb and RPM into $out, printing
# their paths. Uses package.sh's $root, $work, $stage, $out, $version, say and die.
# shellcheck source=scripts/caddy.env
. "$root/scripts/caddy.env"

# The settings of architecture $1 (Debian's name), as globals for the functions below.
arch_settings() {
  case "$1" in
    amd64)
      rpm_arch=x86_64 node_arch=x64 node_src="$root/.cache/node" caddy_src="$root/.cache/caddy"
      caddy_sum=$CADDY_BIN_SHA256 strip_tool=strip objdump_tool=objdump
      run=()
      ;;
    arm64)
      rpm_arch=aarch64 node_arch=arm64 node_src="$root/.cache/node-arm64" caddy_src="$root/.cache/caddy-arm64"
      caddy_sum=$CADDY_ARM64_BIN_SHA256 strip_tool=aarch64-linux-gnu-strip objdump_tool=aarch64-linux-gnu-objdump
      run=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)
      ;;
  esac
}

# The ELF files of a package tree $1 whose libraries the system provides.
elf_files() {
  echo "$1/usr/lib/hostkeeper/node/bin/node"
  echo "$1/usr/lib/hostkeeper/caddy/caddy"
  ls "$1"/usr/lib/hostkeeper/node_modules/better-sqlite3/prebuilds/*.node
}

# What ELF files need of the system's libraries, as `objdump` ($1) reads them: each library (the dynamic
# loader as `ld-linux`, whatever its architecture's name), then the highest version each symbol-version
# namespace (GLIBC, GLIBCXX, CXXABI, GCC) asks for.
system_needs() {
  local tool=$1
  shift
  local f
  for f; do "$tool" -p "$f"; done >"$work/objdump.txt"
  awk '$1 == "NEEDED" {print "lib", $2}' "$work/objdump.txt" | sed 's/^lib ld-linux.*/lib ld-linux/' | sort -u
  awk '/^Version References:/ {v = 1} v && $4 ~ /^[A-Z]+_[0-9.]+$/ {print $4}' "$work/objdump.txt" |
    sed -E 's/_([0-9])/ \1/' | sort -k1,1 -k2,2V | awk '{m[$1] = $2} END {for (k in m) print k, m[k]}' | sort
}

# The .deb's Depends on the system's libraries. amd64: dpkg-shlibdeps, from this machine's packages. arm64:
# the same line, once the arm64 files are shown to need no library and no symbol version the amd64 files do
# not (Debian's libc6, libgcc-s1 and libstdc++6 carry the same versions on both architectures).
deb_depends() {
  local tree=$1
  if [ -z "${amd64_depends:-}" ]; then
    local amd64_tree="$work/stage-amd64"
    [ -d "$amd64_tree" ] || die "arm64's dependencies are read from the amd64 package: build amd64 too"
    mkdir -p "$work/shlibs/debian"
    printf 'Source: hostkeeper\n\nPackage: hostkeeper\nArchitecture: amd64\n' >"$work/shlibs/debian/control"
    # shellcheck disable=SC2046
    amd64_depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O $(elf_files "$amd64_tree") 2>/dev/null |
      sed -n 's/^shlibs:Depends=//p')
    [ -n "$amd64_depends" ] || die "dpkg-shlibdeps found no dependencies"
    # shellcheck disable=SC2046
    system_needs objdump $(elf_files "$amd64_tree") >"$work/needs-amd64.txt"
  fi
  if [ "$tree" != "$work/stage-amd64" ]; then
    # shellcheck disable=SC2046
    system_needs "$objdump_tool" $(elf_files "$tree") >"$work/needs-$rpm_arch.txt"
    local kind name want have
    while read -r kind want; do
      if [ "$kind" = lib ]; then
        grep -qxF "lib $want" "$work/needs-amd64.txt" || die "$rpm_arch needs $want, which amd64 does not"
        continue
      fi
      have=$(awk -v k="$kind" '$1 == k {print $2}' "$work/needs-amd64.txt")
      name="${kind}_$want"
      [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | tail -1)" = "$have" ] ||
        die "$rpm_arch needs $name, above what amd64 needs (${have:-none}): its Depends cannot be amd64's"
    done <"$work/needs-$rpm_arch.txt"
  fi
  echo "$amd64_depends"
}

build_deb() {
  local arch=$1 tree=$2
  local deb_root="$work/deb-$arch"
  cp -al "$tree" "$deb_root"
  mkdir -p "$deb_root/lib/systemd/system" "$deb_root/DEBIAN" "$deb_root/usr/share/lintian/overrides"
  install -m 0644 packaging/hostkeeper.service packaging/hostkeeper-caddy.service "$deb_root/lib/systemd/system/"
  install -m 0644 packaging/deb/lintian-overrides "$deb_root/usr/share/lintian/overrides/hostkeeper"
  install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$deb_root/DEBIAN/"
  echo /etc/hostkeeper/config.json >"$deb_root/DEBIAN/conffiles"
  local depends installed_size
  depends=$(deb_depends "$tree")
  installed_size=$(du -sk --exclude=DEBIAN "$deb_root" | cut -f1)
  sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@DEPENDS@/$depends, systemd/" \
    -e "s/@SIZE@/$installed_size/" packaging/deb/control >"$deb_root/DEBIAN/control"
  (cd "$deb_root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
    xargs -0 md5sum >DEBIAN/md5sums)
  chmod 0644 "$deb_root/DEBIAN/md5sums" "$deb_root/DEBIAN/conffiles" "$deb_root/DEBIAN/control"
  # Compression: xz -1 on every core, ~52 MB in ~6 s; xz -6 would save 8 MB at a minute and a half.
  # (Debian's tools, lintian included, want xz or gzip in a .deb.)
  local deb="$out/hostkeeper_${version}_$arch.deb"
  say "building $deb"
  dpkg-deb --root-owner-group -Zxz -z1 --threads-max="$(nproc)" -b "$deb_root" "$deb" >&2
  echo "$deb"
}

# The RPM: zstd -9, which rpm >= 4.14 (RHEL 8, Fedora 31 and later) reads.
build_rpm() {
  local tree=$1
  local rpm_root="$work/rpm-root-$rpm_arch"
  cp -al "$tree" "$rpm_root"
  mkdir -p "$rpm_root/usr/lib/systemd/system"
  install -m 0644 packaging/hostkeeper.service packaging/hostkeeper-caddy.service "$rpm_root/usr/lib/systemd/system/"
  sed -e "s/@VERSION@/$version/" -e "s|@STAGE@|$rpm_root|" \
    packaging/rpm/hostkeeper.spec >"$work/hostkeeper-$rpm_arch.spec"
  say "building the $rpm_arch RPM"
  rpmbuild -bb --quiet --target "$rpm_arch" --define "_topdir $work/rpmbuild" \
    --define "_binary_payload w9.zstdio" --define "use_source_date_epoch_as_buildtime 1" \
    --define "clamp_mtime_to_source_date_epoch 1" "$work/hostkeeper-$rpm_arch.spec" >&2
  local rpm="$out/hostkeeper-$version-1.$rpm_arch.rpm"
  mv "$work/rpmbuild/RPMS/$rpm_arch/hostkeeper-$version-1.$rpm_arch.rpm" "$rpm"
  echo "$rpm"
}

build_arch() {
  local arch=$1
  arch_settings "$arch"
  local tree="$work/stage-$arch"
  cp -al "$stage" "$tree"
  local alib="$tree/usr/lib/hostkeeper"
  local pb="$alib/node_modules/better-sqlite3/prebuilds"
  mkdir -p "$pb" "$alib/node/bin"
  cp "$work/prebuilds/linux-$node_arch.node" "$pb/"
  "$strip_tool" --strip-unneeded --remove-section=.comment "$pb/linux-$node_arch.node"
  # The runtime and the proxy, byte for byte as pinned and verified (so not stripped).
  cp "$node_src/bin/node" "$alib/node/bin/node"
  cp "$node_src/LICENSE" "$alib/node/LICENSE"
  cp "$caddy_src/usr/bin/caddy" "$alib/caddy/caddy"
  echo "$caddy_sum  $alib/caddy/caddy" | sha256sum --check --status ||
    die "the $arch Caddy binary does not match its sha256 in scripts/caddy.env"
  chmod -R u=rwX,go=rX "$pb" "$alib/node"
  chmod 0755 "$alib/node/bin/node" "$alib/caddy/caddy"
  # The assembled agent loads in its bundled Node: the native addon, every module of the app, the CLI.
  say "checking the $arch agent${run[0]:+ under ${run[0]}}"
  (cd "$alib" && "${run[@]}" node/bin/node -e 'new (require("better-sqlite3"))(":memory:").prepare("select 1").get()') ||
    die "better-sqlite3 does not load in the bundled $arch Node"
  "${run[@]}" "$alib/node/bin/node" --input-type=module -e "await import('$alib/dist/src/app.js')" ||
    die "the packaged $arch agent does not load"
  [ "$("${run[@]}" "$alib/node/bin/node" "$alib/dist/src/cli/main.js" --version)" = "hostkeeper $version" ] ||
    die "the packaged $arch CLI does not run"
  build_deb "$arch" "$tree"
  build_rpm "$tree"
}
