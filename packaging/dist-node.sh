#!/usr/bin/env bash
# The npm packages into dist/, in napi-rs's per-platform layout:
#   velvet-rope-<version>.tgz                    the package, carrying the linux-x64-gnu addon
#                                                beside its loader (installs on its own)
#   velvet-rope-linux-x64-gnu-<version>.tgz      the addon as its platform's package
#                                                (node/npm/linux-x64-gnu), for a registry
#                                                where other platforms' packages sit beside it
# Packs the addon `npm run build` made (make node-env), without its debug information.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
addon=node/velvet-rope.linux-x64-gnu.node
if [[ ! -f "$addon" ]]; then
    echo "dist-node: $addon is missing: make node-env builds it" >&2
    exit 1
fi
stage=target/npm-stage
rm -rf "$stage" && mkdir -p "$stage/main" "$stage/linux-x64-gnu" dist
rm -f dist/velvet-rope-*.tgz
# The files package.json lists, as npm pack would take them from node/.
(cd node && node -e 'for (const f of require("./package.json").files) console.log(f)') |
while read -r pattern; do
    # shellcheck disable=SC2086
    (cd node && cp $pattern "$repo/$stage/main/")
done
# The published package.json: the addon inside is for Linux x86-64 with glibc only, so npm
# refuses to install it elsewhere rather than failing at require(); without the development
# dependencies and scripts of the source tree. (A release for several platforms drops the addon
# from the main package and adds the platform packages as optionalDependencies, as napi-rs's
# `napi prepublish` does.)
node -e '
  const pkg = require("./node/package.json")
  delete pkg.devDependencies
  delete pkg.scripts
  Object.assign(pkg, { os: ["linux"], cpu: ["x64"], libc: ["glibc"] })
  require("fs").writeFileSync(process.argv[1], JSON.stringify(pkg, null, 2) + "\n")
' "$stage/main/package.json"
strip --strip-unneeded "$stage/main/velvet-rope.linux-x64-gnu.node"
cp node/npm/linux-x64-gnu/package.json node/npm/linux-x64-gnu/README.md node/LICENSE "$stage/linux-x64-gnu/"
cp "$stage/main/velvet-rope.linux-x64-gnu.node" "$stage/linux-x64-gnu/"
npm pack --silent --pack-destination "$repo/dist" "./$stage/main" >/dev/null
npm pack --silent --pack-destination "$repo/dist" "./$stage/linux-x64-gnu" >/dev/null
ls -l dist/velvet-rope-*.tgz
