#!/usr/bin/env python3
"""One version for every artifact: a check that every place that states it agrees.

The version lives in Cargo.toml (`[workspace.package] version`): the Rust crates, the C
library (its `VR_VERSION_*` constants and soname), the Python wheel (maturin reads it) and the
Debian package take it from there. The Node package and its addon's crate keep their own copy
(npm reads package.json; the addon's crate is its own workspace), and CHANGELOG.md must have a
section for it. `packaging/versions.py` prints the version, or fails naming what disagrees.
Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cargo_version(path: Path, section: str) -> str | None:
    text = path.read_text()
    if section not in text:
        return None
    match = re.search(r'^version\s*=\s*"([^"]+)"', text.split(section, 1)[1], re.M)
    return match.group(1) if match else None


def main() -> int:
    version = cargo_version(REPO / "Cargo.toml", "[workspace.package]")
    if version is None:
        print("versions.py: no [workspace.package] version in Cargo.toml", file=sys.stderr)
        return 1
    header = (REPO / "include" / "velvet_rope.h").read_text()
    parts = [
        re.search(rf"#define VR_VERSION_{p} (\d+)", header) for p in ("MAJOR", "MINOR", "PATCH")
    ]
    seen = {
        "node/package.json": json.loads((REPO / "node" / "package.json").read_text())["version"],
        "node/Cargo.toml": cargo_version(REPO / "node" / "Cargo.toml", "[package]"),
        "node/npm/linux-x64-gnu/package.json": json.loads(
            (REPO / "node" / "npm" / "linux-x64-gnu" / "package.json").read_text()
        )["version"],
        "include/velvet_rope.h (VR_VERSION_*)": ".".join(m.group(1) if m else "?" for m in parts),
        "node/package-lock.json": json.loads(
            (REPO / "node" / "package-lock.json").read_text()
        )["packages"][""]["version"],
    }
    # The generated loader compares the platform package's version with its own.
    loader = set(re.findall(r"bindingPackageVersion !== '([^']+)'",
                            (REPO / "node" / "binding.js").read_text()))
    seen["node/binding.js (generated: `npm run build`)"] = ",".join(sorted(loader)) or "none"
    wrong = {where: f"says {v}, Cargo.toml says {version}" for where, v in seen.items()
             if v != version}
    changelog = (REPO / "CHANGELOG.md").read_text()
    section = re.search(rf"^## {re.escape(version)}\b[^\n]*\n(.*?)(?=^## |\Z)", changelog,
                        re.M | re.S)
    if not section:
        wrong[f"CHANGELOG.md (a `## {version}` section)"] = "missing"
    elif not re.search(r"^- ", section.group(1), re.M):
        wrong[f"CHANGELOG.md (the `## {version}` section)"] = "no entries"
    licence = (REPO / "LICENSE").read_bytes()
    for copy in ("python/LICENSE", "node/LICENSE"):
        if (REPO / copy).read_bytes() != licence:
            wrong[copy] = "differs from LICENSE (the package ships this copy)"
    if wrong:
        for where, why in wrong.items():
            print(f"versions.py: {where}: {why}", file=sys.stderr)
        return 1
    print(version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
