#!/usr/bin/env bash
# The C library, header and pkg-config file as a tarball into dist/ (relocatable: its
# velvet-rope.pc finds the prefix from its own place, so it can be unpacked anywhere):
#   velvet-rope-c-<version>-x86_64-linux-gnu.tar.gz  (lib/, include/, lib/pkgconfig/)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
version="$(python3 packaging/versions.py)"
"${CARGO:-cargo}" build --release -p velvet-rope-c
python3 packaging/abi.py check target/release/libvelvet_rope.so
name="velvet-rope-c-$version-x86_64-linux-gnu"
stage="target/c-dist/$name"
rm -rf "$stage"
rm -f dist/velvet-rope-c-*-x86_64-linux-gnu.tar.gz
packaging/install-c.sh @relocatable@ "$stage"
cp CHANGELOG.md LICENSE "$stage/"
mkdir -p dist
tar -C target/c-dist -czf "dist/$name.tar.gz" "$name"
ls -l "dist/$name.tar.gz"
