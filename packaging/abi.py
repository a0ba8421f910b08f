#!/usr/bin/env python3
"""The C ABI of libvelvet_rope, written down, and a check that it changes only with the version.

The description (`include/velvet_rope.abi`) lists what a program compiled against
`include/velvet_rope.h` depends on: every function's prototype, every constant's value, and
every struct's size, alignment and field offsets as the C compiler lays them out (gcc compiles
a program that prints them). It starts with the version it was recorded for.

    packaging/abi.py check [LIBRARY]   fails when the header no longer matches the record, or
                                       (with LIBRARY, the built .so) when the library exports a
                                       `vr_` symbol the header does not declare, or the other way
    packaging/abi.py record            writes the record; refuses when the ABI changed and the
                                       version did not (bump it first: docs/compatibility.md)

The version constants (`VR_VERSION_*`) are left out: they change with every release by design.
Standard library only: runs with the system's python3.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADER = REPO / "include" / "velvet_rope.h"
RECORD = REPO / "include" / "velvet_rope.abi"


def version() -> str:
    """The workspace's version (`[workspace.package] version` in Cargo.toml)."""
    text = (REPO / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1]
    match = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
    if not match:
        sys.exit("abi.py: no version under [workspace.package] in Cargo.toml")
    return match.group(1)


def without_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def structs(code: str) -> dict[str, list[str]]:
    """Each `typedef struct { ... } name;`: its field names, in order."""
    out = {}
    for body, name in re.findall(r"typedef struct\s*\{(.*?)\}\s*(\w+)\s*;", code, re.S):
        fields = []
        for decl in body.split(";"):
            decl = squeeze(decl)
            if not decl:
                continue
            field = re.search(r"(\w+)\s*(\[[^\]]*\])?$", decl)
            if not field:
                sys.exit(f"abi.py: cannot read the field `{decl}` of {name}")
            fields.append((field.group(1), squeeze(decl)))
        out[name] = fields
    return out


def layouts(fields: dict[str, list[tuple[str, str]]]) -> list[str]:
    """Sizes, alignments and offsets, as gcc lays the structs out on this machine."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', f'#include "{HEADER}"', "int main(void) {"]
    for name, members in sorted(fields.items()):
        lines.append(
            f'  printf("struct {name} size %zu align %zu\\n", sizeof({name}), _Alignof({name}));'
        )
        for field, decl in members:
            lines.append(
                f'  printf("  field {name}.{field} offset %zu size %zu  /* {decl} */\\n", '
                f"offsetof({name}, {field}), sizeof((({name} *)0)->{field}));"
            )
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "layout.c", Path(tmp) / "layout"
        src.write_text("\n".join(lines) + "\n")
        subprocess.run(["gcc", "-std=c11", "-o", str(exe), str(src)], check=True)
        return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()


def functions(code: str) -> dict[str, str]:
    """Each declared function's name and prototype (whitespace squeezed)."""
    out = {}
    code = re.sub(r"^\s*#.*$", " ", code, flags=re.M)
    for decl in code.split(";"):
        decl = squeeze(decl)
        match = re.search(r"\b(vr_\w+)\s*\(", decl)
        if match and not decl.startswith("typedef"):
            # What precedes the prototype on the same statement (`extern "C" {`, `}`) is not
            # part of it.
            decl = re.sub(r'^.*?(extern "C" \{|\})\s*', "", decl)
            out[match.group(1)] = decl
    return out


def describe() -> str:
    """The ABI of the header, as text (see the module's documentation)."""
    code = without_comments(HEADER.read_text())
    out = [f"version {version()}"]
    for name, value in re.findall(r"^\s*#define\s+(VR_\w+)\s+(.+?)\s*$", code, re.M):
        if not name.startswith("VR_VERSION_"):
            out.append(f"const {name} = {value}")
    for name, value in re.findall(r"\b(VR_\w+)\s*=\s*(\w+)\s*,?", code):
        out.append(f"enumerator {name} = {value}")
    for name, proto in sorted(functions(code).items()):
        out.append(f"function {name}: {proto}")
    out += layouts(structs(code))
    return "\n".join(out) + "\n"


def exported(library: Path) -> set[str]:
    """The `vr_` functions the shared library exports."""
    text = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True
    ).stdout
    return {line.split()[-1] for line in text.splitlines() if re.search(r" T vr_\w+$", line)}


def body(description: str) -> list[str]:
    """The description without its version line."""
    return [l for l in description.splitlines() if not l.startswith("version ")]


def check(library: Path | None) -> int:
    now = describe()
    if not RECORD.exists():
        print(f"abi.py: {RECORD.relative_to(REPO)} is missing: run `make abi`", file=sys.stderr)
        return 1
    recorded = RECORD.read_text()
    if now != recorded:
        diff = "".join(
            difflib.unified_diff(
                recorded.splitlines(True), now.splitlines(True), "recorded", "header now"
            )
        )
        print(diff, file=sys.stderr)
        if body(now) != body(recorded) and recorded.splitlines()[0] == now.splitlines()[0]:
            print(
                "abi.py: the C ABI changed without a version bump. Bump the version "
                "(Cargo.toml, node/package.json, node/Cargo.toml; a CHANGELOG entry saying "
                "what changed), then `make abi` to record it (docs/compatibility.md).",
                file=sys.stderr,
            )
        else:
            print("abi.py: the record is stale: `make abi` records it.", file=sys.stderr)
        return 1
    if library is not None:
        declared = set(functions(without_comments(HEADER.read_text())))
        have = exported(library)
        if declared != have:
            print(
                f"abi.py: {library} exports {sorted(have - declared)} beyond the header, "
                f"and lacks {sorted(declared - have)}",
                file=sys.stderr,
            )
            return 1
    print(f"abi.py: the C ABI matches its record for {version()}"
          + (f" ({len(functions(without_comments(HEADER.read_text())))} functions exported)"
             if library else ""))
    return 0


def record() -> int:
    now = describe()
    if RECORD.exists():
        recorded = RECORD.read_text()
        if body(now) != body(recorded) and recorded.splitlines()[0] == now.splitlines()[0]:
            print(
                f"abi.py: the C ABI changed but the version is still {version()}: bump it "
                "first (docs/compatibility.md), then record.",
                file=sys.stderr,
            )
            return 1
    RECORD.write_text(now)
    print(f"abi.py: recorded the C ABI of {version()} in {RECORD.relative_to(REPO)}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"] and len(argv) <= 2:
        return check(Path(argv[1]) if len(argv) == 2 else None)
    if argv == ["record"]:
        return record()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
