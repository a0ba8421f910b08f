#!/usr/bin/env bash
# Installs the C library as a system's package would: `install-c.sh PREFIX [DESTDIR]`
#   PREFIX/lib/libvelvet_rope.so.<version>  (soname libvelvet_rope.so.0.<minor>: a link of
#                                            that name, and libvelvet_rope.so to link with)
#   PREFIX/lib/libvelvet_rope.a
#   PREFIX/include/velvet_rope.h
#   PREFIX/lib/pkgconfig/velvet-rope.pc     (prefix=PREFIX; with PREFIX `@relocatable@`, the
#                                            prefix is worked out from the .pc file's place)
# from the release build (cargo build --release -p velvet-rope-c, in CARGO_TARGET_DIR or
# target/), without debug information. Installed into the system (no DESTDIR) as root, it runs
# ldconfig so that programs find the library by its soname.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:?usage: install-c.sh PREFIX [DESTDIR]}"
dest="${2:-}"
if [[ "$prefix" != /* && "$prefix" != @relocatable@ ]]; then
    echo "install-c: PREFIX must be an absolute path (got $prefix)" >&2
    exit 1
fi
version="$(python3 "$repo/packaging/versions.py")"
built="${CARGO_TARGET_DIR:-$repo/target}/release"
if [[ "$built" != /* ]]; then built="$repo/$built"; fi
soname="$(readelf -d "$built/libvelvet_rope.so" 2>/dev/null | sed -n 's/.*soname: \[\(.*\)\]/\1/p')"
if [[ -z "$soname" ]]; then
    echo "install-c: $built/libvelvet_rope.so is missing or has no soname: build it first" \
        "(cargo build --release -p velvet-rope-c)" >&2
    exit 1
fi
if [[ "$prefix" == @relocatable@ ]]; then
    root="$dest"
    pc_prefix='${pcfiledir}/../..'
else
    root="$dest$prefix"
    pc_prefix="$prefix"
fi
lib="$root/lib"
install -d "$lib/pkgconfig" "$root/include"
install -m 0755 "$built/libvelvet_rope.so" "$lib/libvelvet_rope.so.$version"
strip --strip-unneeded "$lib/libvelvet_rope.so.$version"
ln -sfn "libvelvet_rope.so.$version" "$lib/$soname"
ln -sfn "$soname" "$lib/libvelvet_rope.so"
install -m 0644 "$built/libvelvet_rope.a" "$lib/libvelvet_rope.a"
strip --strip-debug "$lib/libvelvet_rope.a"
install -m 0644 "$repo/include/velvet_rope.h" "$root/include/velvet_rope.h"
sed -e "s|@PREFIX@|$pc_prefix|" -e "s|@VERSION@|$version|" \
    "$repo/packaging/velvet-rope.pc.in" > "$lib/pkgconfig/velvet-rope.pc"
echo "install-c: velvet-rope $version into ${root:-/}"
if [[ -z "$dest" && "$prefix" != @relocatable@ ]]; then
    if [[ $(id -u) -eq 0 ]] && command -v ldconfig >/dev/null; then
        # Links the soname and refreshes the loader's cache (a PREFIX outside its search path,
        # such as /opt/x, also needs a line in /etc/ld.so.conf.d/ or an rpath).
        ldconfig
    else
        echo "install-c: run ldconfig as root (or set LD_LIBRARY_PATH=$lib) so that programs find $soname"
    fi
fi
