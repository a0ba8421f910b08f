#!/usr/bin/env bash
# The nginx module as a Debian package for Debian 12's nginx, into dist/:
#   libnginx-mod-http-velvet-rope_<version>-1_amd64.deb
# laid out as Debian's own module packages are: the module under /usr/lib/nginx/modules/, its
# `load_module` line in /usr/share/nginx/modules-available/mod-http-velvet-rope.conf, enabled
# on installation by a link in /etc/nginx/modules-enabled/ (which Debian's nginx.conf
# includes), and depending on the exact nginx ABI it was built against (`nginx-abi-*`, which
# Debian's nginx package provides). Builds the module first (bindings/nginx/build.sh).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
version="$(python3 packaging/versions.py)"
bindings/nginx/build.sh
module=target/nginx-module/ngx_http_velvet_rope_module.so
abi="$(dpkg-query -W -f='${Provides}\n' nginx | tr ',' '\n' | grep -o 'nginx-abi-[^ ]*' | head -1)"
if [[ -z "$abi" ]]; then
    echo "dist-deb: the installed nginx provides no nginx-abi-*: is this Debian's nginx?" >&2
    exit 1
fi
# The newest glibc symbol version the module needs (Rust's standard library, statically in it).
glibc="$(objdump -T "$module" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)"
name=libnginx-mod-http-velvet-rope
stage="target/deb/$name"
rm -rf "$stage"
install -D -m 0644 "$module" "$stage/usr/lib/nginx/modules/ngx_http_velvet_rope_module.so"
strip --strip-debug "$stage/usr/lib/nginx/modules/ngx_http_velvet_rope_module.so"
install -D -m 0644 packaging/debian/mod-http-velvet-rope.conf \
    "$stage/usr/share/nginx/modules-available/mod-http-velvet-rope.conf"
install -D -m 0644 packaging/debian/copyright "$stage/usr/share/doc/$name/copyright"
install -d "$stage/DEBIAN"
for script in postinst prerm postrm; do
    install -m 0755 "packaging/debian/$script" "$stage/DEBIAN/$script"
done
size="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
sed -e "s/@VERSION@/$version-1/" -e "s/@NGINX_ABI@/$abi/" -e "s/@GLIBC@/$glibc/" \
    -e "s/@SIZE@/$size/" packaging/debian/control.in > "$stage/DEBIAN/control"
mkdir -p dist
rm -f dist/"$name"_*.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "dist/${name}_${version}-1_amd64.deb"
dpkg-deb --info "dist/${name}_${version}-1_amd64.deb" | sed -n '/Package:/,$p'
