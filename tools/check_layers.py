"""Refuses an #include that runs against the engine's layers.

    python3 tools/check_layers.py

Layers, lowest first (torchscan_dispatch/BUILD): the public value types
(types.h, status.h), core/, analyses/, session/, integrations/. A file may
include its own layer and those below it; the public Session API
(torchscan.h) only from session/ up. formulas/ and reports/ sit below the
engine and include none of it. Bazel's visibility refuses upward
dependencies between targets; this check also catches an upward #include
that a target reaches without declaring it.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENGINE = "torchscan_dispatch"
ORDER = ["types", "core", "analyses", "session", "integrations"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_header(path: str) -> str | None:
    """The layer an included path belongs to (None: not the engine's)."""
    if not path.startswith(ENGINE + "/"):
        return None
    rest = path[len(ENGINE) + 1:]
    if rest in ("types.h", "status.h"):
        return "types"
    if rest == "torchscan.h":
        return "api"
    return rest.split("/", 1)[0]


def allowed(source_layer: str, target: str) -> bool:
    if target == "api":
        return ORDER.index(source_layer) >= ORDER.index("session")
    if target not in ORDER:
        return False
    return ORDER.index(target) <= ORDER.index(source_layer)


def main() -> int:
    problems = []
    for path in sorted(ROOT.glob("**/*")):
        if path.suffix not in (".h", ".cc") or any(p.startswith("bazel-") for p in path.relative_to(ROOT).parts):
            continue
        rel = path.relative_to(ROOT).as_posix()
        top = rel.split("/", 1)[0]
        if top in ("formulas", "reports"):
            source = "below"
        elif top == ENGINE:
            source = layer_of_header(rel) or "types"
            if source == "api":
                continue
        else:
            continue
        for included in INCLUDE.findall(path.read_text(errors="replace")):
            target = layer_of_header(included)
            if target is None:
                continue
            if source == "below" or source not in ORDER or not allowed(source, target):
                problems.append(f"{rel}: includes {included} ({target}), above its layer ({source})")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) run upward; the layers are listed in torchscan_dispatch/BUILD")
        return 1
    print("layers: every include runs downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
