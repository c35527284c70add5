"""Problem listing, checkout validation and fetching (workflow_scripts.suite.kernelbench)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from workflow_scripts.suite import kernelbench as kb
from workflow_scripts.suite.kernelbench import (
    PINNED_REVISION,
    KernelBenchError,
    Problem,
    detect_revision,
    fetch_checkout,
    find_problem,
    list_problems,
    validate_checkout,
)

REPO = Path(__file__).resolve().parents[1]
OTHER_REVISION = "0" * 40


def make_suite(root: Path, counts: dict[int, int] | None = None, prompts: bool = True) -> Path:
    """A tiny suite laid out like a checkout: <id>_P<id>.py problems per level and a prompts.toml."""
    counts = {1: 3, 2: 2} if counts is None else counts
    for level, n in counts.items():
        d = root / "KernelBench" / f"level{level}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(1, n + 1):
            (d / f"{i}_Op_{level}_{i}.py").write_text(f"# level {level} problem {i}\nclass Model: pass\n")
    if prompts:
        p = root / "src" / "kernelbench" / "prompts"
        p.mkdir(parents=True, exist_ok=True)
        (p / "prompts.toml").write_text("[meta]\nversion = \"1.0\"\n")
    return root


def write_revision_file(root: Path, revision: str) -> None:
    (root / kb.REVISION_FILE).write_text(json.dumps({"revision": revision, "archive_sha256": "x", "url": "u"}))


# ------------------------------------------------------------------------------------------------ listing


def test_list_problems_real_checkout(kb_dir: Path) -> None:
    problems = list_problems(kb_dir)
    assert [sum(p.level == lv for p in problems) for lv in (1, 2)] == [100, 100]
    keys = [(p.level, p.problem_id) for p in problems]
    assert len(set(keys)) == 200 and keys == sorted(keys)
    for lv in (1, 2):
        assert sorted(p.problem_id for p in problems if p.level == lv) == list(range(1, 101))
    for p in problems:
        data = (kb_dir / p.path).read_bytes()
        assert p.sha256 == hashlib.sha256(data).hexdigest()
        assert not Path(p.path).is_absolute() and p.path == f"KernelBench/level{p.level}/{p.problem_id}_{p.name}.py"
    relu = find_problem(kb_dir, 1, 19)
    assert (relu.name, relu.path) == ("ReLU", "KernelBench/level1/19_ReLU.py")
    assert relu.key == "level1_19"


def test_list_problems_synthetic(tmp_path: Path) -> None:
    suite = make_suite(tmp_path, {1: 12, 2: 1})
    (suite / "KernelBench" / "level1" / "__init__.py").write_text("")  # not a problem file
    (suite / "KernelBench" / "level1" / "notes.txt").write_text("")
    problems = list_problems(suite)
    assert [(p.level, p.problem_id) for p in problems] == [(1, i) for i in range(1, 13)] + [(2, 1)]  # numeric order
    assert problems[0] == Problem(1, 1, "Op_1_1", "KernelBench/level1/1_Op_1_1.py",
                                  hashlib.sha256(b"# level 1 problem 1\nclass Model: pass\n").hexdigest())
    assert list_problems(suite, levels=(2,)) == problems[-1:]
    with pytest.raises(KernelBenchError, match="no problem 99 in level 1"):
        find_problem(suite, 1, 99)


def test_duplicate_problem_id_is_an_error(tmp_path: Path) -> None:
    suite = make_suite(tmp_path)
    (suite / "KernelBench" / "level1" / "1_Other.py").write_text("")
    with pytest.raises(KernelBenchError, match="duplicate problem id 1"):
        list_problems(suite)


# ------------------------------------------------------------------------------------------------ validation


def test_validate_real_checkout_unknown_revision(kb_dir: Path) -> None:
    info = validate_checkout(kb_dir, expected_counts={1: 100, 2: 100})
    assert info.counts == {1: 100, 2: 100}
    # The shared copy is neither a git checkout nor fetched by us: unknown, accepted only when not required.
    assert (info.revision, info.revision_source) == ("unknown", "unknown")
    with pytest.raises(KernelBenchError, match="revision unknown"):
        validate_checkout(kb_dir, expected_revision=PINNED_REVISION)


def test_validate_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(KernelBenchError, match="does not exist"):
        validate_checkout(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(KernelBenchError, match="not a directory"):
        validate_checkout(tmp_path / "file")


def test_validate_missing_level(tmp_path: Path) -> None:
    suite = make_suite(tmp_path, {1: 2})
    with pytest.raises(KernelBenchError, match=r"missing level\(s\) \[2\]"):
        validate_checkout(suite)
    assert validate_checkout(suite, levels=(1,)).counts == {1: 2}


def test_validate_empty_level_and_counts(tmp_path: Path) -> None:
    suite = make_suite(tmp_path, {1: 2, 2: 0})
    with pytest.raises(KernelBenchError, match="contain no"):
        validate_checkout(suite)
    make_suite(tmp_path, {1: 2, 2: 1})
    with pytest.raises(KernelBenchError, match="level 1: found 2, expected 100"):
        validate_checkout(suite, expected_counts={1: 100, 2: 1})


def test_validate_missing_prompts_toml(tmp_path: Path) -> None:
    suite = make_suite(tmp_path, prompts=False)
    with pytest.raises(KernelBenchError, match="prompts.toml"):
        validate_checkout(suite)


def test_validate_revision_from_files(tmp_path: Path) -> None:
    suite = make_suite(tmp_path)
    assert validate_checkout(suite).revision == "unknown"
    (suite / kb.PLAIN_REVISION_FILE).write_text(PINNED_REVISION.upper() + "\n")
    assert detect_revision(suite) == (PINNED_REVISION, "plain_revision_file")
    write_revision_file(suite, OTHER_REVISION)  # the json record wins over the plain file
    assert detect_revision(suite) == (OTHER_REVISION, "revision_file")
    with pytest.raises(KernelBenchError, match=f"at revision {OTHER_REVISION}.*expected {PINNED_REVISION}"):
        validate_checkout(suite, expected_revision=PINNED_REVISION)
    write_revision_file(suite, PINNED_REVISION)
    info = validate_checkout(suite, expected_revision=PINNED_REVISION)
    assert (info.revision, info.revision_source) == (PINNED_REVISION, "revision_file")


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.integration
def test_validate_revision_from_git(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite")
    _git("init", "-q", cwd=suite)
    _git("add", "-A", cwd=suite)
    _git("commit", "-q", "-m", "x", cwd=suite)
    head = _git("rev-parse", "HEAD", cwd=suite)
    info = validate_checkout(suite, expected_revision=head)
    assert (info.revision, info.revision_source) == (head, "git")
    with pytest.raises(KernelBenchError, match="expected 0000"):
        validate_checkout(suite, expected_revision=OTHER_REVISION)
    # A suite nested inside some other repo (like demo/suite in this project) must not take that repo's HEAD.
    nested = make_suite(suite / "nested")
    assert detect_revision(nested) == ("unknown", "unknown")


# ------------------------------------------------------------------------------------------------ fetching


def build_tarball(src: Path | None, out: Path, revision: str, extra: dict[str, bytes] | None = None,
                  pax_comment: str | None = None) -> Path:
    """A GitHub-style archive: everything under KernelBench-<rev>/, commit id in the pax global header."""
    top = f"KernelBench-{revision}"
    headers = {"comment": pax_comment if pax_comment is not None else revision}
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT, pax_headers=headers) as tf:
        if src is not None:
            tf.add(src, arcname=top)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out


def test_fetch_from_file_url(tmp_path: Path) -> None:
    src = make_suite(tmp_path / "src", {1: 4, 2: 3})
    archive = build_tarball(src, tmp_path / "kb.tar.gz", PINNED_REVISION)
    url = archive.as_uri()
    dest = tmp_path / "out" / "kernelbench"

    info = fetch_checkout(dest, PINNED_REVISION, url=url, expected_counts={1: 4, 2: 3})
    assert (info.revision, info.revision_source, info.counts) == (PINNED_REVISION, "revision_file", {1: 4, 2: 3})
    # The wrapper folder is dropped and files arrive byte for byte.
    assert (dest / "KernelBench" / "level1" / "1_Op_1_1.py").read_bytes() == \
        (src / "KernelBench" / "level1" / "1_Op_1_1.py").read_bytes()
    assert not (dest / f"KernelBench-{PINNED_REVISION}").exists()
    record = json.loads((dest / kb.REVISION_FILE).read_text())
    assert record == {"revision": PINNED_REVISION, "url": url,
                      "archive_sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}
    assert [p.sha256 for p in list_problems(dest)] == [p.sha256 for p in list_problems(src)]
    assert [p.name for p in dest.parent.iterdir()] == ["kernelbench"]  # no leftover temp dirs

    # Re-fetching the same revision reuses it (no download: the URL is gone); another revision is refused.
    archive.unlink()
    assert fetch_checkout(dest, PINNED_REVISION, url=url).revision == PINNED_REVISION
    with pytest.raises(KernelBenchError, match="refusing to overwrite"):
        fetch_checkout(dest, OTHER_REVISION, url=url)


def test_fetch_checks_archive_hash_and_commit(tmp_path: Path) -> None:
    src = make_suite(tmp_path / "src")
    archive = build_tarball(src, tmp_path / "kb.tar.gz", PINNED_REVISION)
    dest = tmp_path / "dest"
    with pytest.raises(KernelBenchError, match="sha256"):
        fetch_checkout(dest, PINNED_REVISION, url=archive.as_uri(), expected_sha256="ab" * 32)
    assert not dest.exists()
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert fetch_checkout(dest, PINNED_REVISION, url=archive.as_uri(), expected_sha256=digest).counts == {1: 3, 2: 2}

    # The archive's own commit id (pax header) must be the requested revision.
    wrong = build_tarball(src, tmp_path / "wrong.tar.gz", PINNED_REVISION, pax_comment=OTHER_REVISION)
    with pytest.raises(KernelBenchError, match=f"wrong.tar.gz is of commit {OTHER_REVISION}"):
        fetch_checkout(tmp_path / "dest2", PINNED_REVISION, url=wrong.as_uri())
    assert not (tmp_path / "dest2").exists()


def test_fetch_rejects_bad_archives(tmp_path: Path) -> None:
    evil = build_tarball(None, tmp_path / "evil.tar.gz", PINNED_REVISION, extra={"../escape.txt": b"x"})
    with pytest.raises(KernelBenchError, match="could not extract"):
        fetch_checkout(tmp_path / "d1", PINNED_REVISION, url=evil.as_uri())
    assert not (tmp_path / "escape.txt").exists()
    # An archive that extracts but is no checkout fails validation and is not published.
    junk = build_tarball(None, tmp_path / "junk.tar.gz", PINNED_REVISION, extra={"top/README": b"hi"})
    with pytest.raises(KernelBenchError, match="missing level"):
        fetch_checkout(tmp_path / "d2", PINNED_REVISION, url=junk.as_uri())
    assert not (tmp_path / "d2").exists()
    with pytest.raises(KernelBenchError, match="could not download"):
        fetch_checkout(tmp_path / "d3", PINNED_REVISION, url=(tmp_path / "absent.tar.gz").as_uri())


def test_fetch_real_checkout_tarball(kb_dir: Path, tmp_path: Path) -> None:
    # The full 100+100 problems through a tarball (built in tmp, never inside the project).
    archive = build_tarball(kb_dir, tmp_path / "kb.tar.gz", PINNED_REVISION)
    dest = tmp_path / "kernelbench"
    info = fetch_checkout(dest, url=archive.as_uri(), expected_counts={1: 100, 2: 100})
    assert info.revision == PINNED_REVISION
    assert [(p.path, p.sha256) for p in list_problems(dest)] == [(p.path, p.sha256) for p in list_problems(kb_dir)]


# ------------------------------------------------------------------------------------------------ CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "workflow_scripts", "kernelbench", *args], cwd=REPO, env=env,
                          capture_output=True, timeout=300)


@pytest.mark.integration
def test_cli_list_writes_parquet(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    suite = make_suite(tmp_path / "suite", {1: 3, 2: 2})
    out = tmp_path / "res" / "problems.parquet"
    r = run_cli("list", "--suite", str(suite), "--out", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_parquet(out)
    assert list(df.columns) == ["level", "problem_id", "problem", "path", "sha256"]
    expected = list_problems(suite)
    assert df["level"].tolist() == [p.level for p in expected]
    assert df["problem_id"].tolist() == [p.problem_id for p in expected]
    assert df["problem"].tolist() == [p.name for p in expected]
    assert df["sha256"].tolist() == [p.sha256 for p in expected]


@pytest.mark.integration
def test_cli_list_real_checkout(kb_dir: Path, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    out = tmp_path / "problems.parquet"
    r = run_cli("list", "--kernelbench", str(kb_dir), "--out", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_parquet(out)
    assert len(df) == 200 and df.groupby("level").size().to_dict() == {1: 100, 2: 100}
    assert not df.duplicated(["level", "problem_id"]).any()


@pytest.mark.integration
def test_cli_validate_and_fetch(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite")
    r = run_cli("validate", "--suite", str(suite), "--expect-counts", "1=3", "2=2")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"] == {"1": 3, "2": 2}
    r = run_cli("validate", "--suite", str(suite), "--revision", PINNED_REVISION)
    assert r.returncode == 1 and b"revision unknown" in r.stderr
    r = run_cli("validate", "--suite", str(tmp_path / "missing"))
    assert r.returncode == 1 and b"does not exist" in r.stderr

    archive = build_tarball(suite, tmp_path / "kb.tar.gz", PINNED_REVISION)
    r = run_cli("fetch", "--dest", str(tmp_path / "fetched"), "--url", archive.as_uri())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["revision"] == PINNED_REVISION
