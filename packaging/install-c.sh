#!/usr/bin/env bash
# Installs the C library as a system's package would: `install-c.sh PREFIX [DESTDIR]`
#   PREFIX/lib/libvelvet_rope.so.<version>  (soname libvelvet_rope.so.0.<minor>: a link of
#                                            that name, and libvelvet_rope.so to link with)
#   PREFIX/lib/libvelvet_rope.a
#   PREFIX/include/velvet_rope.h
#   PREFIX/lib/pkgconfig/velvet-rope.pc     (prefix=PREFIX; with PREFIX `@relocatable@`, the
#                                            prefix is worked out from the .pc file's place)
# from the release build (cargo build --release -p velvet-rope-c), without debug information.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:?usage: install-c.sh PREFIX [DESTDIR]}"
dest="${2:-}"
version="$(python3 "$repo/packaging/versions.py")"
soname="$(readelf -d "$repo/target/release/libvelvet_rope.so" | sed -n 's/.*soname: \[\(.*\)\]/\1/p')"
if [[ -z "$soname" ]]; then
    echo "install-c: target/release/libvelvet_rope.so has no soname: build it first" >&2
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
install -m 0755 "$repo/target/release/libvelvet_rope.so" "$lib/libvelvet_rope.so.$version"
strip --strip-debug "$lib/libvelvet_rope.so.$version"
ln -sfn "libvelvet_rope.so.$version" "$lib/$soname"
ln -sfn "$soname" "$lib/libvelvet_rope.so"
install -m 0644 "$repo/target/release/libvelvet_rope.a" "$lib/libvelvet_rope.a"
strip --strip-debug "$lib/libvelvet_rope.a"
install -m 0644 "$repo/include/velvet_rope.h" "$root/include/velvet_rope.h"
sed -e "s|@PREFIX@|$pc_prefix|" -e "s|@VERSION@|$version|" \
    "$repo/packaging/velvet-rope.pc.in" > "$lib/pkgconfig/velvet-rope.pc"
echo "install-c: velvet-rope $version into ${root:-/}"
