"""KernelBench problem sources: list the problems of a suite, validate a checkout, fetch a pinned checkout.

A suite is laid out like a KernelBench checkout (see docs/design.md):

    <suite>/KernelBench/level<L>/<id>_<Name>.py
    <suite>/src/kernelbench/prompts/prompts.toml

CLI::

    python -m workflow_scripts kernelbench list --suite DIR --out problems.parquet [--levels 1 2]
    python -m workflow_scripts kernelbench validate --suite DIR [--revision REV] [--expect-counts 1=100 2=100]
    python -m workflow_scripts kernelbench fetch --dest DIR [--revision REV] [--url URL] [--sha256 HEX]
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Sequence

from workflow_scripts.core.hashing import sha256_file

# The revision the benchmark protocol names (ScalingIntelligence/KernelBench).
PINNED_REVISION = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
REPO_URL = "https://github.com/ScalingIntelligence/KernelBench"
ARCHIVE_URL_TEMPLATE = REPO_URL + "/archive/{revision}.tar.gz"

PROMPTS_TOML_REL = "src/kernelbench/prompts/prompts.toml"
REVISION_FILE = ".kernelbench_revision"  # json written by fetch_checkout
PLAIN_REVISION_FILE = "REVISION"  # plain-text alternative (one line: the commit sha)
UNKNOWN_REVISION = "unknown"
DEFAULT_LEVELS: tuple[int, ...] = (1, 2)

# <id>_<Name>.py, e.g. 19_ReLU.py, 12_Matmul_with_diagonal_matrices_.py
_PROBLEM_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class KernelBenchError(Exception):
    """A suite/checkout is missing, incomplete, at the wrong revision, or could not be fetched."""


@dataclass(frozen=True)
class Problem:
    """One benchmark problem (the record of docs/design.md)."""

    level: int
    problem_id: int
    name: str  # file stem without the id, e.g. "ReLU"
    path: str  # relative to the suite root, POSIX separators
    sha256: str  # of the file's bytes

    @property
    def key(self) -> str:
        return f"level{self.level}_{self.problem_id}"

    def source(self, suite_dir: Path | str) -> str:
        """The problem source as KernelBench reads it (text mode, universal newlines)."""
        return read_text(Path(suite_dir) / self.path)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CheckoutInfo:
    """What validate_checkout found."""

    path: str
    revision: str  # a 40-hex sha, or "unknown"
    revision_source: str  # "git" | "revision_file" | "plain_revision_file" | "unknown"
    counts: dict[int, int] = field(default_factory=dict)  # problems per level
    prompts_toml: str = PROMPTS_TOML_REL

    def to_dict(self) -> dict:
        d = asdict(self)
        d["counts"] = {str(k): v for k, v in self.counts.items()}
        return d


def read_text(path: Path) -> str:
    # KernelBench reads with open(path, "r"): text mode, universal newlines. We pin UTF-8 rather than the locale.
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


# --------------------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------------------


def level_dir(suite_dir: Path | str, level: int) -> Path:
    return Path(suite_dir) / "KernelBench" / f"level{level}"


def list_problems(suite_dir: Path | str, levels: Iterable[int] = DEFAULT_LEVELS) -> list[Problem]:
    """All problems of the given levels, sorted by (level, problem_id).

    Files not named <id>_<Name>.py (e.g. __init__.py) are ignored; a missing level dir or two files with the same
    id in one level is an error, since either would silently change the benchmark's denominator.
    """
    suite = Path(suite_dir)
    problems: list[Problem] = []
    for level in levels:
        ldir = level_dir(suite, level)
        if not ldir.is_dir():
            raise KernelBenchError(f"level {level} missing: {ldir} is not a directory")
        seen: dict[int, str] = {}
        for entry in sorted(ldir.iterdir()):
            m = _PROBLEM_FILE_RE.match(entry.name)
            if not m or not entry.is_file():
                continue
            pid, name = int(m.group(1)), m.group(2)
            if pid in seen:
                raise KernelBenchError(f"level {level}: duplicate problem id {pid}: {seen[pid]} and {entry.name}")
            seen[pid] = entry.name
            problems.append(
                Problem(
                    level=int(level),
                    problem_id=pid,
                    name=name,
                    path=PurePosixPath("KernelBench", f"level{level}", entry.name).as_posix(),
                    sha256=sha256_file(entry),
                )
            )
    problems.sort(key=lambda p: (p.level, p.problem_id))
    return problems


def find_problem(suite_dir: Path | str, level: int, problem_id: int) -> Problem:
    """The one problem with this id in this level (only that level dir is scanned)."""
    for p in list_problems(suite_dir, levels=(level,)):
        if p.problem_id == int(problem_id):
            return p
    raise KernelBenchError(f"no problem {problem_id} in level {level} of {Path(suite_dir)}")


def problems_dataframe(problems: Sequence[Problem]):
    """The parquet table: columns level, problem_id, problem (the name), path, sha256."""
    import pandas as pd  # imported lazily: the rest of the module needs only the stdlib

    return pd.DataFrame(
        {
            "level": pd.Series([p.level for p in problems], dtype="int64"),
            "problem_id": pd.Series([p.problem_id for p in problems], dtype="int64"),
            "problem": pd.Series([p.name for p in problems], dtype="string"),
            "path": pd.Series([p.path for p in problems], dtype="string"),
            "sha256": pd.Series([p.sha256 for p in problems], dtype="string"),
        }
    )


# --------------------------------------------------------------------------------------------------------------
# Revision detection and validation
# --------------------------------------------------------------------------------------------------------------


def _git_revision(root: Path) -> str | None:
    """HEAD of the git repo whose top level is exactly `root`, else None.

    The top-level check matters: a suite nested inside another repo (demo/suite inside this project) would
    otherwise report the *project's* HEAD as the suite revision.
    """
    if not (root / ".git").exists():
        return None
    try:
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()
        if Path(top).resolve() != root.resolve():
            return None
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip().lower()
    except (OSError, subprocess.SubprocessError):
        return None
    return head if _SHA_RE.match(head) else None


def detect_revision(root: Path | str) -> tuple[str, str]:
    """(revision, source): git HEAD, else our .kernelbench_revision json, else a plain REVISION file, else unknown."""
    root = Path(root)
    rev = _git_revision(root)
    if rev:
        return rev, "git"
    meta = root / REVISION_FILE
    if meta.is_file():
        try:
            rev = str(json.loads(meta.read_text(encoding="utf-8"))["revision"]).strip().lower()
        except (ValueError, KeyError, TypeError) as e:
            raise KernelBenchError(f"unreadable {meta}: {e}") from e
        return rev, "revision_file"
    plain = root / PLAIN_REVISION_FILE
    if plain.is_file():
        lines = plain.read_text(encoding="utf-8").split()
        if lines:
            return lines[0].strip().lower(), "plain_revision_file"
    return UNKNOWN_REVISION, "unknown"


def validate_checkout(
    directory: Path | str,
    expected_revision: str | None = None,
    expected_counts: Mapping[int, int] | None = None,
    levels: Iterable[int] | None = None,
) -> CheckoutInfo:
    """Check that `directory` is a usable suite; raise KernelBenchError saying what is wrong.

    levels defaults to the keys of expected_counts, else (1, 2). With expected_revision, a checkout whose
    revision cannot be determined is rejected (a required pin cannot be confirmed); without it, 'unknown' is fine.
    """
    root = Path(directory)
    if not root.exists():
        raise KernelBenchError(f"KernelBench checkout not found: {root} does not exist")
    if not root.is_dir():
        raise KernelBenchError(f"KernelBench checkout not a directory: {root}")
    if levels is None:
        levels = tuple(sorted(expected_counts)) if expected_counts else DEFAULT_LEVELS
    levels = tuple(int(lv) for lv in levels)

    missing = [lv for lv in levels if not level_dir(root, lv).is_dir()]
    if missing:
        raise KernelBenchError(
            f"KernelBench checkout {root} is missing level(s) {missing} "
            f"(expected {', '.join(str(level_dir(root, lv).relative_to(root)) for lv in missing)})"
        )
    if not (root / PROMPTS_TOML_REL).is_file():
        raise KernelBenchError(f"KernelBench checkout {root} has no {PROMPTS_TOML_REL}")

    problems = list_problems(root, levels)
    counts = {lv: sum(1 for p in problems if p.level == lv) for lv in levels}
    empty = [lv for lv, n in counts.items() if n == 0]
    if empty:
        raise KernelBenchError(f"KernelBench checkout {root}: level(s) {empty} contain no <id>_<Name>.py problems")
    if expected_counts:
        wrong = {int(lv): (counts.get(int(lv), 0), int(n)) for lv, n in expected_counts.items()
                 if counts.get(int(lv), 0) != int(n)}
        if wrong:
            detail = ", ".join(f"level {lv}: found {got}, expected {want}" for lv, (got, want) in sorted(wrong.items()))
            raise KernelBenchError(f"KernelBench checkout {root} has the wrong number of problems ({detail})")

    revision, source = check_revision(root, expected_revision)
    return CheckoutInfo(path=str(root), revision=revision, revision_source=source, counts=counts)


def check_revision(root: Path | str, expected_revision: str | None) -> tuple[str, str]:
    """(revision, source) of a checkout (``detect_revision``); with ``expected_revision``, a checkout whose revision
    cannot be determined, or is another, is refused (a required pin cannot be confirmed)."""
    revision, source = detect_revision(root)
    if expected_revision:
        want = expected_revision.strip().lower()
        if revision == UNKNOWN_REVISION:
            raise KernelBenchError(
                f"KernelBench checkout {root}: revision unknown (not a git checkout, no {REVISION_FILE} or "
                f"{PLAIN_REVISION_FILE} file) but revision {want} is required"
            )
        if revision != want:
            raise KernelBenchError(
                f"KernelBench checkout {root} is at revision {revision} (from {source}), expected {want}"
            )
    return revision, source


def suite_root_of(path: Path | str) -> Path:
    """The suite folder (the one holding KernelBench/ and src/) that a problem or prompt file lies in."""
    for parent in Path(path).parents:
        if (parent / "KernelBench").is_dir() and (parent / "src").is_dir():
            return parent
    raise KernelBenchError(f"{path} is not inside a KernelBench-layout suite (KernelBench/ and src/)")


def problem_files(suite_dir: Path | str, levels: Iterable[int], only: dict[int, list[int]] | None = None
                  ) -> dict[tuple[int, int], str]:
    """(level, id) -> problem file, from file names alone (no hashing: the workflow calls this at parse time for
    200 problems x 15 models). A missing level or no problem at all is an error naming the folder."""
    suite = Path(suite_dir)
    wanted = {int(level): {int(i) for i in ids} for level, ids in (only or {}).items()}
    found: dict[tuple[int, int], str] = {}
    for level in levels:
        ldir = level_dir(suite, level)
        if not ldir.is_dir():
            raise KernelBenchError(f"suite {suite} has no level {level}: {ldir} is missing")
        for entry in sorted(ldir.iterdir()):
            match = _PROBLEM_FILE_RE.match(entry.name)
            if match and (not wanted or int(match.group(1)) in wanted.get(int(level), ())):
                found[(int(level), int(match.group(1)))] = str(entry)
    if not found:
        raise KernelBenchError(f"suite {suite} holds no problems for levels {list(levels)}")
    return dict(sorted(found.items()))


def index_suite(
    suite: Path,
    levels: list[int],
    revision: str | None = None,
    expected_counts: dict[int, int] | None = None,
    only: dict[int, list[int]] | None = None,
):
    """The problem table of a validated suite, restricted to ``only`` (level -> ids) when given."""
    validate_checkout(suite, expected_revision=revision, expected_counts=expected_counts, levels=levels)
    problems = list_problems(suite, levels)
    if only:
        wanted = {(int(level), int(pid)) for level, ids in only.items() for pid in ids}
        missing = wanted - {(p.level, p.problem_id) for p in problems}
        if missing:
            raise KernelBenchError(f"suite.only names problems the suite lacks: {sorted(missing)}")
        problems = [p for p in problems if (p.level, p.problem_id) in wanted]
    return problems_dataframe(problems)


# --------------------------------------------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------------------------------------------


def archive_url(revision: str) -> str:
    return ARCHIVE_URL_TEMPLATE.format(revision=revision)


def _download(url: str, dest: Path, timeout: float) -> str:
    """Stream url (http(s):// or file://) into dest; return the sha256 of the bytes."""
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(dest, "wb") as out:
            while block := resp.read(1 << 20):
                h.update(block)
                out.write(block)
    except OSError as e:  # URLError and HTTPError are OSErrors
        raise KernelBenchError(f"could not download {url}: {e}") from e
    return h.hexdigest()


def _common_top_dir(names: Sequence[str]) -> str | None:
    """The single top-level folder all members live under (GitHub's KernelBench-<sha>/), else None."""
    tops = {PurePosixPath(n).parts[0] for n in names if PurePosixPath(n).parts}
    if len(tops) != 1:
        return None
    top = tops.pop()
    if top in ("", ".", "..", "/"):
        return None  # never strip these: dropping ".." would turn a traversal into a legitimate-looking path
    # A lone top-level *file* is not a wrapper folder.
    return top if any(len(PurePosixPath(n).parts) > 1 for n in names) else None


def _extract_filter(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo:
    # "data" refuses absolute paths, .. traversal, device files and links leaving the tree; on top of it the owner
    # keeps write access, so an archive of a read-only tree can still get its revision record and be cleaned up.
    member = tarfile.data_filter(member, dest_path)
    if member.mode is not None:
        member = member.replace(mode=member.mode | (0o700 if member.isdir() else 0o600), deep=False)
    return member


def _extract_archive(archive: Path, into: Path, revision: str, label: str | None = None) -> None:
    """Extract a (GitHub) tarball into `into`, dropping its single top-level folder.

    git-archive tarballs carry the commit id in a pax global header ("comment"); when present it must be the
    requested revision, which checks the archive's content against the pin, not just the URL we asked for.
    """
    try:
        with tarfile.open(archive, "r:*") as tf:
            members = tf.getmembers()  # reads the pax global header too
            comment = (tf.pax_headers or {}).get("comment", "").strip().lower()
            if comment and _SHA_RE.match(comment) and comment != revision.lower():
                raise KernelBenchError(f"archive {label or archive} is of commit {comment}, expected {revision}")
            top = _common_top_dir([m.name for m in members])
            renamed = []
            for m in members:
                parts = PurePosixPath(m.name).parts
                if top is not None:
                    parts = parts[1:]
                    if not parts:
                        continue  # the wrapper folder itself
                renamed.append(m.replace(name=PurePosixPath(*parts).as_posix(), deep=False))
            tf.extractall(into, members=renamed, filter=_extract_filter)
    except tarfile.TarError as e:
        raise KernelBenchError(f"could not extract {label or archive}: {e}") from e


def fetch_checkout(
    dest: Path | str,
    revision: str = PINNED_REVISION,
    url: str | None = None,
    expected_sha256: str | None = None,
    expected_counts: Mapping[int, int] | None = None,
    timeout: float = 120.0,
) -> CheckoutInfo:
    """Download the archive of `revision`, extract it to `dest` and record what was fetched.

    dest/.kernelbench_revision gets {"revision", "archive_sha256", "url"}. An existing dest already recorded at
    this revision is reused as is; any other existing non-empty dest is an error (we never overwrite a suite).
    The result is validated against the revision before it is returned.
    """
    dest = Path(dest)
    revision = revision.strip().lower()
    url = url or archive_url(revision)

    if dest.exists():
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()  # an empty placeholder (e.g. made by a workflow engine) is not a checkout
        else:
            rev, source = detect_revision(dest) if dest.is_dir() else (UNKNOWN_REVISION, "unknown")
            if rev == revision:
                return validate_checkout(dest, expected_revision=revision, expected_counts=expected_counts)
            raise KernelBenchError(f"{dest} already exists (revision {rev} from {source}); refusing to overwrite it")

    dest.parent.mkdir(parents=True, exist_ok=True)
    # Work next to dest so the final rename is atomic and a failed fetch leaves no half-extracted suite.
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}.fetch-", dir=dest.parent) as tmp:
        tmp_path = Path(tmp)
        archive = tmp_path / "archive.tar.gz"
        digest = _download(url, archive, timeout)
        if expected_sha256 and digest != expected_sha256.strip().lower():
            raise KernelBenchError(f"archive {url} has sha256 {digest}, expected {expected_sha256}")
        staging = tmp_path / "checkout"
        staging.mkdir()
        _extract_archive(archive, staging, revision, label=url)
        record = {"revision": revision, "archive_sha256": digest, "url": url}
        (staging / REVISION_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        # Validate before publishing so a bad archive never appears at dest.
        validate_checkout(staging, expected_revision=revision, expected_counts=expected_counts)
        os.replace(staging, dest)
    return validate_checkout(dest, expected_revision=revision, expected_counts=expected_counts)


# --------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------
