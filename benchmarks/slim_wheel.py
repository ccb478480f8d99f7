"""A wheel without the parts a run does not use, so that it fits in one call's 64 MiB.

Ray's wheel (79 MB) carries a 34 MB Java jar (``ray/jars``: Java workers, which we never start)
and its dashboard's source maps; without them it is about 45 MB, and the whole ``.whl/`` of the
``ray-vs-local`` stage travels in one call. The members under each PREFIX are left out and their
lines leave ``RECORD`` (pip checks the rest against it as usual).

    python benchmarks/slim_wheel.py .whl/ray-*.whl --drop ray/jars/ --drop-suffix .js.map

The wheel is rewritten in place (``--out DIR`` writes it there instead).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import zipfile
from pathlib import Path


def slim(wheel: Path, prefixes: list[str], suffixes: list[str], out: Path) -> tuple[int, int]:
    """Writes ``out`` without the members under ``prefixes`` or ending in ``suffixes``;
    returns (members dropped, bytes dropped, uncompressed)."""
    def dropped(name: str) -> bool:
        return name.startswith(tuple(prefixes)) or name.endswith(tuple(suffixes))

    n = size = 0
    with zipfile.ZipFile(wheel) as src, tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / wheel.name
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                if dropped(info.filename):
                    n, size = n + 1, size + info.file_size
                    continue
                data = src.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines(keepends=True)
                    data = "".join(l for l in lines if not dropped(l.split(",", 1)[0])).encode()
                dst.writestr(info, data)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(part, out)
    return n, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--drop", action="append", default=[], metavar="PREFIX",
                    help="leave out the members under this path (repeatable)")
    ap.add_argument("--drop-suffix", action="append", default=[], metavar="SUFFIX",
                    help="leave out the members whose names end so (repeatable)")
    ap.add_argument("--out", type=Path, help="folder for the slimmed wheel (default: in place)")
    args = ap.parse_args()
    if not (args.drop or args.drop_suffix):
        ap.error("name what to leave out: --drop PREFIX or --drop-suffix SUFFIX")
    out = (args.out / args.wheel.name) if args.out else args.wheel
    before = args.wheel.stat().st_size
    n, size = slim(args.wheel, args.drop, args.drop_suffix, out)
    print(f"{out}: {n} member(s) left out ({size / 2**20:.1f} MiB unpacked); "
          f"{before / 2**20:.1f} -> {out.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
