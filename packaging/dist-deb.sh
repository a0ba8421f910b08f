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
strip --strip-unneeded "$stage/usr/lib/nginx/modules/ngx_http_velvet_rope_module.so"
install -D -m 0644 packaging/debian/mod-http-velvet-rope.conf \
    "$stage/usr/share/nginx/modules-available/mod-http-velvet-rope.conf"
install -D -m 0644 packaging/debian/copyright "$stage/usr/share/doc/$name/copyright"
# Debian's changelog of the package: one entry for this version.
{
    printf '%s (%s-1) unstable; urgency=medium\n\n' "$name" "$version"
    printf '  * velvet-rope %s: see CHANGELOG.md of the repository.\n\n' "$version"
    printf ' -- velvet-rope developers <velvet-rope@example.invalid>  %s\n' \
        "$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}")"
} | gzip -9n > "$stage/usr/share/doc/$name/changelog.Debian.gz"
chmod 0644 "$stage/usr/share/doc/$name/changelog.Debian.gz"
install -d "$stage/DEBIAN"
for script in postinst prerm postrm; do
    install -m 0755 "packaging/debian/$script" "$stage/DEBIAN/$script"
done
size="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
sed -e "s/@VERSION@/$version-1/" -e "s/@NGINX_ABI@/$abi/" -e "s/@GLIBC@/$glibc/" \
    -e "s/@SIZE@/$size/" packaging/debian/control.in > "$stage/DEBIAN/control"
mkdir -p dist
rm -f dist/"$name"_*.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "dist/${name}_${version}-1_amd64.deb"
dpkg-deb --info "dist/${name}_${version}-1_amd64.deb" | sed -n '/Package:/,$p'
