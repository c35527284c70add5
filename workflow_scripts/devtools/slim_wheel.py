"""Drop other platforms' solver binaries from PuLP's wheel: the GPU host's wheelhouse fits what a device call carries.

PuLP's universal wheel bundles the CBC solver for six platforms (16 MB, 40% of the wheelhouse). Snakemake's ILP
scheduler runs only the GPU host's own (linux/i64), so the others are removed and the wheel's RECORD rewritten to
match; pip then installs it like the original.

    python -m workflow_scripts.devtools.slim_wheel wheelhouse/pulp-*.whl
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import zipfile
from pathlib import Path

SOLVER_DIR = "pulp/solverdir/cbc/"
KEPT_PLATFORM = "pulp/solverdir/cbc/linux/i64/"


def dropped(member: str) -> bool:
    """A bundled CBC binary of another platform than the GPU host's."""
    return member.startswith(SOLVER_DIR) and not member.startswith(KEPT_PLATFORM) and not member.endswith("/")


def slim(wheel: Path) -> int:
    """Rewrite `wheel` in place without other platforms' binaries; returns the bytes saved."""
    before = wheel.stat().st_size
    with tempfile.NamedTemporaryFile(dir=wheel.parent, suffix=".whl", delete=False) as handle:
        slimmed = Path(handle.name)
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if dropped(info.filename):
                continue
            data = source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                rows = data.decode().splitlines(keepends=True)
                data = "".join(row for row in rows if not dropped(row.split(",", 1)[0])).encode()
            target.writestr(info, data)
    shutil.move(slimmed, wheel)
    return before - wheel.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    for wheel in parser.parse_args().wheels:
        print(f"{wheel}: {slim(wheel) / 1e6:.1f} MB of other platforms' solver binaries dropped")


if __name__ == "__main__":
    main()
