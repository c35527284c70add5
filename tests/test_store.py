"""Unit tests of the content-addressed store: keys, reuse, corruption, verification and repair."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
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


def test_code_versions_follow_each_files_imports_by_its_content(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file's imports are parsed once per content (``_ImportsCache``): a cached entry is what the closure
    follows, and an edited file is parsed again, never matched to its old entry."""
    import shutil

    copy = tmp_path / "workflow_scripts"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(store_module, "PACKAGE_DIR", copy)
    cache = copy / "__pycache__" / store_module.IMPORTS_CACHE_NAME
    summary = copy / "stages" / "summary.py"

    def follows_evaluation() -> bool:
        return any(p.parent.name == "evaluation" for p in code_files("workflow_scripts.stages.summary"))

    first = code_version("workflow_scripts.stages.summary")
    entries = json.loads(cache.read_text())
    assert sha256_file(summary) in entries and not follows_evaluation()
    # The closure reads the entry, not the source: an entry naming a module the file does not import is followed.
    entries[sha256_file(summary)] = sorted(entries[sha256_file(summary)] + ["workflow_scripts.evaluation"])
    cache.write_text(json.dumps(entries))
    assert follows_evaluation()
    cache.write_text("not json")  # a damaged cache is parsed anew, and rewritten
    assert code_version("workflow_scripts.stages.summary") == first and not follows_evaluation()
    assert sha256_file(summary) in json.loads(cache.read_text())
    # A lazy import added inside a function: a new content, parsed, its import followed.
    lazy_import = "\n\ndef _late() -> None:\n    import workflow_scripts.evaluation.answer\n"
    summary.write_text(summary.read_text() + lazy_import)
    assert follows_evaluation() and code_version("workflow_scripts.stages.summary") != first


def object_of(store: Store, name: str) -> Path:
    return store.object_path(json.loads((store.manifest / f"{name}.json").read_text())["key"])


def test_second_build_reuses_and_copies(in_tmp: Path) -> None:
    store = Store("store")
    calls: list[str] = []
    assert build_text(store, Path("out/a.txt"), "hello", calls=calls) is True
    assert build_text(store, Path("out/b.txt"), "hello", calls=calls) is False  # same key, other readable name
    assert calls == ["hello"]
    assert Path("out/b.txt").read_text() == "hello"
    # One object, and each readable name a file of its own: never the object's inode.
    assert object_of(store, "out/a.txt") == object_of(store, "out/b.txt")
    assert len({os.stat(p).st_ino for p in ("out/a.txt", "out/b.txt", object_of(store, "out/a.txt"))}) == 3
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
    obj.write_text("evil")  # the readable copy keeps the good bytes
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
    assert Path("a.txt").read_text() == "good"  # rewritten from its intact object
    assert store.verify() == []


def test_repair_restores_a_corrupt_object_from_an_intact_copy(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    obj = object_of(store, "a.txt")
    os.chmod(obj, 0o644)
    obj.write_text("evil")
    assert [p.kind for p in store.verify(repair=True)] == ["corrupt_object"]
    assert obj.read_text() == "good" and not os.stat(obj).st_mode & 0o222
    assert store.verify() == [] and events(store)[-1] == "restored"


def test_repair_drops_a_lost_object_with_the_results_made_from_it(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    rows = Path("rows.txt")
    store.build({"txt": rows}, "rows", "v1", {}, {"a": sha256_file(Path("a.txt"))},
                lambda out: out["txt"].write_text("rows from a"))
    obj = object_of(store, "a.txt")
    os.chmod(obj, 0o644)
    obj.write_text("evil")
    Path("a.txt").write_text("edited too")  # no intact copy left to restore the object from
    assert {p.kind for p in store.verify(repair=True)} == {"corrupt_object", "corrupt_readable"}
    # Both go, so that Snakemake reruns the job of a.txt (it would not while rows.txt is up to date).
    assert not obj.exists() and not Path("a.txt").exists() and not rows.exists()
    assert store.verify() == []


def test_repair_drops_an_edited_result_whose_object_is_gone(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    obj = object_of(store, "a.txt")
    obj.unlink()
    store.meta_path(obj.name).unlink()
    Path("a.txt").write_text("edited")
    assert [p.kind for p in store.verify(repair=True)] == ["corrupt_readable"]
    assert not Path("a.txt").exists() and store.verify() == []  # the next run recomputes it


def test_repair_removes_the_entry_of_a_deleted_result(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    Path("a.txt").unlink()  # e.g. a model taken out of the configuration, its results deleted
    assert [p.kind for p in store.verify(repair=True)] == ["missing_readable"]
    assert not Path("a.txt").exists() and store.verify() == []


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
    assert store.object_path(key).read_text() == "good"  # restored from the intact result file
    assert main(["--params", "{}", "--store", "store"]) == 0


def test_an_edited_result_file_leaves_the_object_intact(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    obj = object_of(store, "a.txt")
    assert not os.stat(obj).st_mode & 0o222  # objects are read-only
    with open("a.txt", "w") as handle:  # in place, as root would even through a read-only hard link
        handle.write("edited")
    assert obj.read_text() == "good" and store.fetch(obj.name) == obj
    assert [p.kind for p in store.verify()] == ["corrupt_readable"]  # the object itself verifies
    calls: list[str] = []
    assert build_text(store, Path("a.txt"), "good", calls=calls) is False  # a rerun rewrites it from the store
    assert calls == [] and Path("a.txt").read_text() == "good" and store.verify() == []


def test_check_result_refuses_an_edited_or_unrecorded_result_naming_it(in_tmp: Path) -> None:
    from workflow_scripts.core.store import ChangedResult

    store = Store("store")
    build_text(store, Path("out/a.txt"), "good")
    assert store.check_result(Path("out/a.txt")) == sha256_file(Path("out/a.txt"))
    Path("out/a.txt").write_text("edited")
    with pytest.raises(ChangedResult, match=r"out/a\.txt was changed after the store wrote it") as refused:
        store.check_result(Path("out/a.txt"))
    assert refused.value.path == "out/a.txt" and "repair_store" in refused.value.message
    assert events(store)[-1] == "refused_changed"
    Path("out/b.txt").write_text("placed by hand")
    with pytest.raises(ChangedResult, match=r"out/b\.txt is not a result this store wrote"):
        store.check_result(Path("out/b.txt"))
    assert store.check_result(Path("out/b.txt"), required=False) == sha256_file(Path("out/b.txt"))


def test_forget_drops_the_objects_and_every_name_made_from_them(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("out/m1/a.txt"), "shared")
    build_text(store, Path("out/m2/a.txt"), "shared")  # another model's identical answer: the same object
    build_text(store, Path("out/m2/b.txt"), "own")
    shared = object_of(store, "out/m1/a.txt")
    assert store.forget([Path("out/m1/a.txt")], dry_run=True).names == ["out/m1/a.txt", "out/m2/a.txt"]
    assert shared.exists() and Path("out/m2/a.txt").exists()  # a dry run deletes nothing
    forgotten = store.forget([Path("out/m1/a.txt")])
    assert forgotten.names == ["out/m1/a.txt", "out/m2/a.txt"] and forgotten.keys == [shared.name]
    assert not shared.exists() and not Path("out/m1/a.txt").exists() and not Path("out/m2/a.txt").exists()
    assert Path("out/m2/b.txt").exists() and store.verify() == []
    assert events(store)[-1] == "forgotten"
    # What was made from a forgotten result goes too (Snakemake would not rebuild a missing input of an up-to-date
    # result); its object stays, reused if the recomputed inputs are the same.
    build_text(store, Path("out/m1/a.txt"), "shared")
    summary = Path("out/summary.txt")
    store.build({"txt": summary}, "summary", "v1", {}, {"a": sha256_file(Path("out/m1/a.txt"))},
                lambda out: out["txt"].write_text("made from a"))
    summary_object = object_of(store, "out/summary.txt")
    chained = store.forget([Path("out/m1/a.txt")], dry_run=True)
    assert chained.names == ["out/m1/a.txt"] and chained.downstream == ["out/summary.txt"]
    store.forget([Path("out/m1/a.txt")])
    assert not summary.exists() and summary_object.exists()
    calls: list[str] = []
    assert build_text(store, Path("out/m1/a.txt"), "shared", calls=calls) is True  # computed anew
    assert calls == ["shared"]
    assert store.forget([Path("out/m2")]).names == ["out/m2/b.txt"]  # a folder: every result under it
    with pytest.raises(ValueError, match="no result of the store"):
        store.forget([Path("out/m3")])


def test_forget_tool(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from workflow_scripts.tools.forget import main

    store = Store("elsewhere/.store")
    Path("config.yaml").write_text("store: elsewhere/.store\n")
    build_text(store, Path("out/a.txt"), "x")
    assert main(["out/a.txt", "--dry-run"]) == 0 and Path("out/a.txt").exists()
    assert main(["out/a.txt"]) == 0 and not Path("out/a.txt").exists()
    assert "out/a.txt" in capsys.readouterr().out
    with pytest.raises(SystemExit) as failed:
        main(["out/a.txt"])
    assert failed.value.code == 2 and "out/a.txt: no result of the store" in capsys.readouterr().err


def test_verify_reports_and_repairs_a_hard_linked_result(in_tmp: Path) -> None:
    store = Store("store")
    build_text(store, Path("a.txt"), "good")
    Path("a.txt").unlink()
    os.link(object_of(store, "a.txt"), "a.txt")  # how an older version wrote result files
    assert [p.kind for p in store.verify()] == ["linked_readable"]
    store.verify(repair=True)
    assert not os.path.samefile("a.txt", object_of(store, "a.txt")) and Path("a.txt").read_text() == "good"
    assert store.verify() == []


# -- end to end: the Snakemake CLI on the small run (tests/conftest.py) ---------------------------------------------


def computed(run, stage: str) -> list[dict]:
    return [e for e in run.events() if e["stage"] == stage and e["event"] == "computed"]


@pytest.mark.integration
def test_an_edited_baseline_never_reaches_the_published_numbers(small_run) -> None:
    results = small_run.work / "results/small"
    baseline = results / "baselines/level1_1.json"
    published = {name: (results / name).read_bytes() for name in ("evaluations.parquet", "summary.json")}
    original = baseline.read_bytes()
    store = Store(results / ".store")
    assert not os.path.samefile(baseline, object_of(store, "results/small/baselines/level1_1.json"))  # a copy
    edited = json.loads(original)
    edited["eager_ms"] *= 250  # the expert's eager speedup on level1_1 would grow 250-fold
    baseline.write_text(json.dumps(edited))

    rerun = small_run.snakemake("--cores", "2")
    assert rerun.returncode != 0
    assert "results/small/baselines/level1_1.json was changed after the store wrote it" in rerun.stdout + rerun.stderr
    # Nothing was folded in: the failed collect job's rows are gone (Snakemake removes a failed job's outputs),
    # never rewritten with the edited number; the summary was not touched.
    assert not (results / "evaluations.parquet").exists()
    assert (results / "summary.json").read_bytes() == published["summary.json"]
    assert "refused_changed" in [e["event"] for e in small_run.events()]

    # The documented way back: repair_store rewrites the edited copy from its object; the next run rebuilds the rest.
    baselines_computed = len(computed(small_run, "baselines"))
    assert small_run.snakemake("--cores", "1", "repair_store").returncode == 0
    done = small_run.snakemake("--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert baseline.read_bytes() == original
    assert {name: (results / name).read_bytes() for name in published} == published
    assert len(computed(small_run, "baselines")) == baselines_computed  # restored, not measured again


@pytest.mark.integration
def test_forget_measures_anew_and_a_forced_rerun_reuses(small_run) -> None:
    results = small_run.work / "results/small"
    expert, twin = results / "evaluations/expert/level1_1.json", results / "evaluations/twin/level1_1.json"
    baseline = results / "baselines/level1_2.json"
    before = {path: path.read_bytes() for path in (expert, twin, baseline)}
    evaluations, baselines = len(computed(small_run, "evaluate")), len(computed(small_run, "baselines"))

    # Snakemake's own idiom reruns the jobs, and each finds its answer in the store: nothing is measured again.
    forced = small_run.snakemake("--cores", "2", "--forcerun", "evaluate", "baseline")
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert len(computed(small_run, "evaluate")) == evaluations and len(computed(small_run, "baselines")) == baselines
    assert {path: path.read_bytes() for path in before} == before
    log = (results / "logs/evaluations/expert/level1_1.log").read_text()
    assert "reused from the store" in log and "python -m workflow_scripts forget" in log

    forget = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "forget", "--configfile", small_run.configfile,
         "results/small/evaluations/expert/level1_1.json", "results/small/baselines/level1_2.json"],
        cwd=small_run.work, capture_output=True, text=True, timeout=120,
    )
    assert forget.returncode == 0, forget.stderr
    assert "results/small/evaluations/twin/level1_1.json" in forget.stdout  # the same answer: the same object
    assert not expert.exists() and not twin.exists() and not baseline.exists()
    assert [e["event"] for e in small_run.events()[-2:]] == ["forgotten", "forgotten"]

    done = small_run.snakemake("--cores", "2")  # a plain run: no --forcerun needed
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(computed(small_run, "evaluate")) == evaluations + 1  # the shared answer, once
    assert len(computed(small_run, "baselines")) == baselines + 1
    new_expert, new_baseline = json.loads(expert.read_text()), json.loads(baseline.read_text())
    assert new_expert["runtime_stats"]["trials"] != json.loads(before[expert])["runtime_stats"]["trials"]
    assert new_baseline["eager_stats"]["trials"] != json.loads(before[baseline])["eager_stats"]["trials"]
    assert twin.read_bytes() == expert.read_bytes()  # twin's job found the new object
    rows = pd.read_parquet(results / "evaluations.parquet").set_index(["model", "problem_id"])
    assert rows.loc[("expert", 1), "runtime_ms"] == pytest.approx(new_expert["runtime_ms"])
    assert small_run.snakemake("--cores", "1", "verify_store").returncode == 0
