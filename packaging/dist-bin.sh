#!/usr/bin/env bash
# The Envoy module and the `velvet-rope` command as tarballs into dist/, without debug
# information:
#   velvet-rope-envoy-<version>-x86_64-linux-gnu.tar.gz  libvelvet_rope_envoy.so (load it as
#       Envoy's dynamic module `velvet_rope_envoy`, from ENVOY_DYNAMIC_MODULES_SEARCH_PATH)
#   velvet-rope-<version>-x86_64-linux-gnu.tar.gz        bin/velvet-rope
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
version="$(python3 packaging/versions.py)"
# One package per build, as `make test-envoy` and `make demo` build them: built together,
# cargo would unify their features differently and build the engine once more.
"${CARGO:-cargo}" build --release -p velvet-rope-envoy
"${CARGO:-cargo}" build --release -p velvet-rope-cli
mkdir -p dist target/bin-dist
envoy="velvet-rope-envoy-$version-x86_64-linux-gnu"
cli="velvet-rope-$version-x86_64-linux-gnu"
rm -rf "target/bin-dist/$envoy" "target/bin-dist/$cli"
rm -f dist/velvet-rope-envoy-*-x86_64-linux-gnu.tar.gz dist/velvet-rope-[0-9]*-x86_64-linux-gnu.tar.gz
install -D -m 0755 target/release/libvelvet_rope_envoy.so "target/bin-dist/$envoy/libvelvet_rope_envoy.so"
install -D -m 0755 target/release/velvet-rope "target/bin-dist/$cli/bin/velvet-rope"
strip --strip-unneeded "target/bin-dist/$envoy/libvelvet_rope_envoy.so" "target/bin-dist/$cli/bin/velvet-rope"
cp CHANGELOG.md LICENSE "target/bin-dist/$envoy/"
cp CHANGELOG.md LICENSE "target/bin-dist/$cli/"
tar -C target/bin-dist -czf "dist/$envoy.tar.gz" "$envoy"
tar -C target/bin-dist -czf "dist/$cli.tar.gz" "$cli"
ls -l "dist/$envoy.tar.gz" "dist/$cli.tar.gz"
