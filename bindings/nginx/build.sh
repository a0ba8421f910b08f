#!/usr/bin/env bash
# Builds the nginx dynamic module over the velvet-rope C ABI, for Debian's stock nginx:
#   target/nginx-module/ngx_http_velvet_rope_module.so
#
# Steps (the recipe for nginx dynamic modules that was tried on Debian 12):
#   1. install nginx and nginx-dev when missing (Debian 12; needs root),
#   2. build the C ABI (`cargo build --release -p velvet-rope-c`) -> target/release/libvelvet_rope.a,
#   3. configure nginx-dev's source tree with Debian's own flags (--with-compat, so the module's
#      signature matches the stock binary) into a build folder under target/, and build the module.
# Nothing is written outside target/ of the repository (and the apt installation).
#
# Environment:
#   CARGO                    cargo command (default: cargo)
#   VELVET_ROPE_SKIP_CARGO=1 use the library already in target/release (or VELVET_ROPE_LIB_DIR)
#   VELVET_ROPE_LIB_DIR      folder holding libvelvet_rope.a (default: target/release)
#   VELVET_ROPE_INCLUDE_DIR  folder holding velvet_rope.h   (default: include)
#   MAKE_JOBS                parallel jobs for make (default: 1)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/nginx-module"
builddir="$out/build"
src=/usr/share/nginx/src

log() { printf 'build.sh: %s\n' "$*" >&2; }

# 1. nginx and its module development files.
if [[ ! -x /usr/sbin/nginx || ! -f "$src/conf_flags" ]]; then
    log "installing nginx and nginx-dev"
    if [[ $(id -u) -ne 0 ]]; then
        log "nginx/nginx-dev are missing and installing them needs root"
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q nginx nginx-dev
fi

# 2. The C ABI as a static library, so the module carries everything and loads anywhere.
if [[ "${VELVET_ROPE_SKIP_CARGO:-0}" != 1 ]]; then
    log "building the C ABI (cargo build --release -p velvet-rope-c)"
    (cd "$repo" && "${CARGO:-cargo}" build --release -p velvet-rope-c)
fi

lib_dir="${VELVET_ROPE_LIB_DIR:-$repo/target/release}"
inc_dir="${VELVET_ROPE_INCLUDE_DIR:-$repo/include}"
for f in "$lib_dir/libvelvet_rope.a" "$inc_dir/velvet_rope.h"; do
    if [[ ! -f "$f" ]]; then
        log "missing $f"
        exit 1
    fi
done
export VELVET_ROPE_LIB_DIR="$lib_dir" VELVET_ROPE_INCLUDE_DIR="$inc_dir"

# 3. Configure with Debian's flags. `config` reads the two variables above, and changing
#    the library path needs a new configure, so configure runs whenever the inputs change.
mkdir -p "$builddir"
# shellcheck disable=SC1091
. "$src/conf_flags"   # defines NGX_CONF_FLAGS, the flags Debian's nginx was built with
cc_opt="$(dpkg-buildflags --get CFLAGS) -fPIC $(dpkg-buildflags --get CPPFLAGS)"
ld_opt="$(dpkg-buildflags --get LDFLAGS) -fPIC"
stamp_text="$(nginx -v 2>&1) | $cc_opt | $ld_opt | ${NGX_CONF_FLAGS[*]} | $lib_dir | $inc_dir | $(sha256sum "$here/config")"
stamp="$builddir/.configured"

if [[ ! -f "$builddir/Makefile" || ! -f "$stamp" || "$(cat "$stamp")" != "$stamp_text" ]]; then
    log "configuring nginx module build in $builddir"
    rm -f "$stamp"
    (cd "$src" && ./configure \
        --with-cc-opt="$cc_opt" \
        --with-ld-opt="$ld_opt" \
        "${NGX_CONF_FLAGS[@]}" \
        --add-dynamic-module="$here" \
        --builddir="$builddir") > "$builddir/configure.log" 2>&1 || {
        log "configure failed; see $builddir/configure.log"
        tail -n 30 "$builddir/configure.log" >&2
        exit 1
    }
    printf '%s' "$stamp_text" > "$stamp"
fi

# The module's object depends on the library too: relink when the library is newer.
so="$builddir/ngx_http_velvet_rope_module.so"
if [[ -f "$so" && "$lib_dir/libvelvet_rope.a" -nt "$so" ]]; then
    rm -f "$so"
fi

log "building the module"
(cd "$src" && make -j"${MAKE_JOBS:-1}" -f "$builddir/Makefile" modules) > "$builddir/make.log" 2>&1 || {
    log "make failed; see $builddir/make.log"
    grep -E 'error|warning' "$builddir/make.log" | head -n 40 >&2 || tail -n 40 "$builddir/make.log" >&2
    exit 1
}
if grep -E 'warning:' "$builddir/make.log" >&2; then
    log "the module compiled with warnings (above)"
fi

cp "$so" "$out/ngx_http_velvet_rope_module.so"
log "built $out/ngx_http_velvet_rope_module.so"
