#!/usr/bin/env bash
# The Python wheel and sdist into dist/: an abi3 wheel (CPython 3.10 and later) for
# manylinux_2_28 x86_64 (glibc 2.28 and later), linked with zig (the `ziglang` package) so
# that it needs no newer glibc than that, whatever this machine's is; maturin checks the tag.
#   VENV  a virtual environment to install the build tools into (default: .venv)
# The wheel is built in a target folder of its own (target/wheel): the Node addon's build
# shares target/x86_64-unknown-linux-gnu with other flags, and each would rebuild the other's.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="${VENV:-.venv}"
if [[ "$venv" != /* ]]; then venv="$repo/$venv"; fi
test -x "$venv/bin/python" || python3 -m venv "$venv"
echo "dist-python: maturin and zig (pinned: packaging/requirements.txt)"
"$venv/bin/python" -m pip install -q -r packaging/requirements.txt
mkdir -p dist
rm -f dist/velvet_rope-*.whl dist/velvet_rope-*.tar.gz
echo "dist-python: building the manylinux_2_28 abi3 wheel (a release build: minutes the first time)"
CARGO_TARGET_DIR="${WHEEL_TARGET_DIR:-$repo/target/wheel}" PATH="$venv/bin:$PATH" \
    "$venv/bin/maturin" build --release --strip --zig \
    --compatibility manylinux_2_28 -m python/Cargo.toml --out dist
echo "dist-python: the source distribution"
"$venv/bin/maturin" sdist -m python/Cargo.toml --out dist
ls -l dist/velvet_rope-*
