"""The `entries` section (docs/artifact.md): the entry points as plain text for the C runtime, written from the
`meta` JSON and, on load, parsed and compared with it.

    >>> e = {"prefix": "cuvil_e0_", "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 4]}],
    ...      "outputs": [{"name": "y", "dtype": "f32", "shape": ["n"]}], "symbols": ["n"], "constants": [],
    ...      "prepared": [], "checks": [2, 0, 0, 8, 0]}
    >>> print(format_entries({"main": e}))
    cuvil-entries 1
    entry main cuvil_e0_ 1 1 1 0 0
    symbol n
    input x f32 2
    output y f32 1
    checks 5 2 0 0 8 0
    end
    <BLANKLINE>
"""
from __future__ import annotations

import re

from ..errors import ArtifactError

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
DTYPES = ("f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool")
MAX_ITEMS = 1 << 20  # bounds what a corrupt count can make a loader allocate


def c_name(name: str, i: int, kind: str) -> str:
    """The name the C runtime sees: the Python name where the grammar allows it, else `input_3` and so on."""
    return name if NAME.match(name) else f"{kind}_{i}"


def format_entries(entries: dict) -> str:
    lines = ["cuvil-entries 1"]
    for name, e in entries.items():
        lines.append(f"entry {name} {e['prefix']} {len(e['inputs'])} {len(e['outputs'])} {len(e['symbols'])} "
                     f"{len(e['constants'])} {len(e['prepared'])}")
        lines += [f"symbol {s}" for s in e["symbols"]]
        for kind in ("input", "output"):
            lines += [f"{kind} {c_name(p['name'], i, kind)} {p['dtype']} {len(p['shape'])}"
                      for i, p in enumerate(e[kind + "s"])]
        lines += [f"derived {k}" if c.get("derived") else f"const {k} {c['offset']} {c['nbytes']}"
                  for k, c in enumerate(e["constants"])]
        lines += [f"prepared {p['index']} {p['offset']} {p['nbytes']}" for p in e["prepared"]]
        lines.append(" ".join(["checks", str(len(e["checks"])), *map(str, e["checks"])]))
        lines.append("end")
    return "\n".join(lines) + "\n"


def check_entries(text: str, meta_entries: dict, path: str) -> None:
    """Parse `entries` and require that it says what `meta` says, entry by entry and line by line."""
    if text != format_entries(meta_entries):
        parsed = _parse(text, path)
        raise ArtifactError(f"{path}: the entries section disagrees with meta (entries {sorted(parsed)}, meta "
                            f"{sorted(meta_entries)})")


def _parse(text: str, path: str) -> dict:
    """The entry names of a well-formed `entries` text (the comparison with meta checks the rest)."""
    lines = text.split("\n")
    if not lines or lines[0] != "cuvil-entries 1":
        raise ArtifactError(f"{path}: the entries section does not start with 'cuvil-entries 1'")
    names = {}
    for line in lines[1:]:
        fields = line.split(" ")
        if fields[0] == "entry" and len(fields) == 8 and NAME.match(fields[1]):
            names[fields[1]] = fields[2]
    return names


def check_meta_entry(name: str, e: dict, consts_size: int, prepared_size: int, path: str) -> None:
    """The parts of one meta entry a loader relies on: names, dtypes, constants inside their sections."""
    try:
        ok = NAME.match(name) and NAME.match(e["prefix"]) and all(
            p["dtype"] in DTYPES and isinstance(p["name"], str) and len(p["shape"]) <= 64 and
            all(isinstance(d, (int, str)) and not isinstance(d, bool) for d in p["shape"])
            for p in (*e["inputs"], *e["outputs"])) and all(NAME.match(s) for s in e["symbols"])
        ok = ok and all(isinstance(c, int) and not isinstance(c, bool) for c in e["checks"])
        ok = ok and len(e["checks"]) < MAX_ITEMS and len(e["constants"]) < MAX_ITEMS
    except (KeyError, TypeError) as err:
        raise ArtifactError(f"{path}: entry {name!r} in meta is malformed ({err!r})") from None
    if not ok:
        raise ArtifactError(f"{path}: entry {name!r} in meta has a bad name, dtype, shape or check program")
    if not all(c.get("derived", False) in (False, True) and (not c.get("derived") or c.get("nbytes") == 0)
               for c in e["constants"] if isinstance(c, dict)):
        raise ArtifactError(f"{path}: entry {name!r}: a derived constant must be a flag with no bytes stored")
    _inside(name, e["constants"], consts_size, "consts", path)
    _inside(name, e["prepared"], prepared_size, "prepared", path)


def _inside(name: str, items: list, size: int, section: str, path: str) -> None:
    for c in items:
        try:
            offset, nbytes = c["offset"], c["nbytes"]
            good = isinstance(offset, int) and isinstance(nbytes, int) and offset >= 0 and nbytes >= 0 and \
                offset % 64 == 0 and offset + nbytes <= size
        except (KeyError, TypeError):
            good = False
        if not good:
            raise ArtifactError(f"{path}: entry {name!r}: a buffer of the {section} section lies outside it ({c!r})")
