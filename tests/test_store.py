"""Unit tests of the content-addressed store: keys, reuse, corruption, verification and repair."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workflow_scripts.core import store as store_module
from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.store import Store, code_files, code_version, object_key

PACKAGE = Path(store_module.__file__).resolve().parents[1]


@pytest.fixture()
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def build_text(store: Store, readable: Path, text: str, params: dict | None = None, calls: list | None = None) -> bool:
    def compute(out: dict[str, Path]) -> None:
        if calls is not None:
            calls.append(text)
        out["txt"].write_text(text)

    return store.build({"txt": readable}, "demo", "v1", params or {}, {"input": text}, compute)


def events(store: Store) -> list[str]:
    return [json.loads(line)["event"] for line in (store.root / "events.jsonl").read_text().splitlines()]


def test_key_depends_on_every_part() -> None:
    base = object_key("s", "c", {"p": 1}, {"i": "h"})
    assert base == object_key("s", "c", {"p": 1}, {"i": "h"})
    assert len({base, object_key("t", "c", {"p": 1}, {"i": "h"}), object_key("s", "d", {"p": 1}, {"i": "h"}),
                object_key("s", "c", {"p": 2}, {"i": "h"}), object_key("s", "c", {"p": 1}, {"i": "g"})}) == 5


def test_code_version_covers_whole_subpackages_never_a_hand_kept_list() -> None:
    files = {p.relative_to(PACKAGE).as_posix() for p in code_files("workflow_scripts.stages.evaluate")}
    # The stage itself, and every module of each subpackage it imports from (directly or not).
    assert "stages/evaluate.py" in files
    assert {p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "evaluation").glob("*.py")} <= files
    assert {p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "core").glob("*.py")} <= files
    # Neither other stages nor subpackages it does not use, nor the development tools.
    assert not any(f.startswith(("stages/summary", "scoring/", "devtools/", "tools/")) for f in files)
    with pytest.raises(ValueError, match="not a module"):
        code_version("workflow_scripts.stages.no_such_stage")


def test_code_version_changes_with_any_file_of_a_used_subpackage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    copy = tmp_path / "workflow_scripts"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(store_module, "PACKAGE_DIR", copy)
    before_evaluate = code_version("workflow_scripts.stages.evaluate")
    before_summary = code_version("workflow_scripts.stages.summary")
    # A new helper module nobody imports yet, beside the evaluator: still part of the evaluator's code version.
    (copy / "evaluation" / "new_helper.py").write_text("X = 1\n")
    assert code_version("workflow_scripts.stages.evaluate") != before_evaluate
    assert code_version("workflow_scripts.stages.summary") == before_summary  # the summary does not use evaluation/
    (copy / "devtools" / "workspace.py").write_text("# changed\n")
    assert code_version("workflow_scripts.stages.summary") == before_summary  # devtools are never hashed
    (copy / "core" / "io.py").write_text((copy / "core" / "io.py").read_text() + "\n# changed\n")
    assert code_version("workflow_scripts.stages.summary") != before_summary  # every stage uses core/


def test_second_build_reuses_and_links(in_tmp: Path) -> None:
    store = Store("store")
    calls: list[str] = []
    assert build_text(store, Path("out/a.txt"), "hello", calls=calls) is True
    assert build_text(store, Path("out/b.txt"), "hello", calls=calls) is False  # same key, other readable name
    assert calls == ["hello"]
    assert Path("out/b.txt").read_text() == "hello"
    assert os.stat("out/a.txt").st_ino == os.stat("out/b.txt").st_ino  # both resolve to the one object
    entry = json.loads((store.manifest / "out/b.txt.json").read_text())
    assert entry["sha256"] == sha256_file(Path("out/b.txt")) and entry["stage"] == "demo"
    assert events(store) == ["computed", "reused"]


def test_changed_params_recompute(in_tmp: Path) -> None:
    store = Store("store")
    calls: list[str] = []
    build_text(store, Path("a.txt"), "x", {"seed": 1}, calls)
    build_text(store, Path("a.txt"), "x", {"seed": 2}, calls)
    assert calls == ["x", "x"]


def test_corrupt_object_is_never_reused_and_verify_reports_it(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    key = json.loads((store.manifest / "a.txt.json").read_text())["key"]
    obj = store.object_path(key)
    os.chmod(obj, 0o644)
    obj.write_text("evil")  # the readable hard link shows the same bytes
    problems = store.verify()
    assert {p.kind for p in problems} == {"corrupt_object"}
    assert store.fetch(key) is None
    calls: list[str] = []
    assert build_text(store, Path("a.txt"), "good", calls=calls) is True  # rebuilt, not silently used
    assert calls == ["good"] and Path("a.txt").read_text() == "good"
    assert store.verify() == []


def test_corrupt_copy_reported_and_repaired(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    Path("a.txt").unlink()
    Path("a.txt").write_text("edited by hand")  # a separate file now, not the object
    problems = store.verify()
    assert [p.kind for p in problems] == ["corrupt_readable"]
    assert [p.kind for p in store.verify(repair=True)] == ["corrupt_readable"]
    assert not Path("a.txt").exists()  # Snakemake rebuilds it on the next run
    assert store.verify() == []  # object, name and manifest entry are gone together


def test_failed_compute_leaves_nothing(in_tmp: Path) -> None:
    store = Store("store")

    def explode(out: dict[str, Path]) -> None:
        out["txt"].write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.build({"txt": Path("a.txt")}, "demo", "v1", {}, {}, explode)
    assert not Path("a.txt").exists()
    assert list(store.objects.glob("*/*.meta.json")) == []


def test_missing_output_is_an_error(in_tmp: Path) -> None:
    store = Store("store")
    with pytest.raises(RuntimeError, match="did not write"):
        store.build({"txt": Path("a.txt")}, "demo", "v1", {}, {}, lambda out: None)


def test_cli_verify_exit_codes(in_tmp: Path) -> None:
    from workflow_scripts.stages.verify_store import main

    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    assert main(["--params", "{}", "--store", "store", "--report", "report.json"]) == 0
    key = json.loads((store.manifest / "a.txt.json").read_text())["key"]
    os.chmod(store.object_path(key), 0o644)
    store.object_path(key).write_text("bad")
    assert main(["--params", "{}", "--store", "store", "--report", "report.json"]) == 1
    assert json.loads(Path("report.json").read_text())["ok"] is False
    assert main(["--params", '{"repair": true}', "--store", "store"]) == 0
    assert not store.object_path(key).exists()
