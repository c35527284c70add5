"""The wheelhouse's PuLP wheel keeps the GPU host's solver and its RECORD stays in step with its members."""

from __future__ import annotations

import zipfile
from pathlib import Path

from workflow_scripts.devtools.slim_wheel import slim

MEMBERS = {
    "pulp/__init__.py": b"",
    "pulp/solverdir/cbc/linux/i64/cbc": b"host" * 1000,
    "pulp/solverdir/cbc/osx/i64/cbc": b"other" * 1000,
    "pulp/solverdir/cbc/win/i64/cbc.exe": b"other" * 1000,
}
EXECUTABLE = 0o100755


def _wheel(path: Path) -> Path:
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in MEMBERS.items())
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in MEMBERS.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = EXECUTABLE << 16  # pip restores the mode: the solver must stay runnable
            wheel.writestr(info, data)
        wheel.writestr("pulp-3.3.2.dist-info/RECORD", record + "pulp-3.3.2.dist-info/RECORD,,\n")
    return path


def test_other_platforms_dropped_from_members_and_record(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "pulp-3.3.2-py3-none-any.whl")
    assert slim(wheel) > 0
    with zipfile.ZipFile(wheel) as slimmed:
        names = set(slimmed.namelist())
        record = slimmed.read("pulp-3.3.2.dist-info/RECORD").decode()
        host_binary = slimmed.read("pulp/solverdir/cbc/linux/i64/cbc")
        host_mode = slimmed.getinfo("pulp/solverdir/cbc/linux/i64/cbc").external_attr >> 16
    assert names == {"pulp/__init__.py", "pulp/solverdir/cbc/linux/i64/cbc", "pulp-3.3.2.dist-info/RECORD"}
    assert host_binary == MEMBERS["pulp/solverdir/cbc/linux/i64/cbc"] and host_mode == EXECUTABLE
    assert {row.split(",")[0] for row in record.splitlines()} == names
