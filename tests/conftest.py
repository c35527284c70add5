"""Shared fixtures. The KernelBench data (../shared/kernelbench, or $KERNELBENCH_DIR) is optional: tests that
need it skip cleanly where it is absent. ``demo_run`` is the one full demo run (``make demo``'s configuration, as it
ships) shared by every test that reads a finished demo (tests/test_pipeline_e2e.py, tests/test_report.py);
``small_run`` is one small finished pipeline run shared by the end-to-end tests of the store and of configuration
errors; ``compile_cache`` is one folder for what torch.compile builds, which the other pipeline runs of the session
name (``baselines.compile_cache_dir``), so a problem's compiled baseline is built once per session."""

from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from cli import SMALL_RESULTS, SmallRun


REPO = Path(__file__).resolve().parents[1]


def kernelbench_dir() -> Path:
    # CI clones the repo with shared/ beside it: <parent>/<clone> and <parent>/shared/kernelbench.
    env = os.environ.get("KERNELBENCH_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "kernelbench"


@pytest.fixture(scope="session")
def kb_dir() -> Path:
    """A KernelBench checkout with both levels and the prompt files, or a skip."""
    d = kernelbench_dir()
    if not (d / "KernelBench" / "level1").is_dir() or not (d / "src/kernelbench/prompts/prompts.toml").is_file():
        pytest.skip(f"KernelBench data not available at {d} (set KERNELBENCH_DIR)")
    return d


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for what torch.compile builds (``baselines.compile_cache_dir``), shared by the session's pipeline
    runs that name it; the demo run adds what it built (``demo_run``)."""
    return tmp_path_factory.mktemp("compile-cache")


class BackgroundDemo:
    """The session's demo run, started as soon as the tests are collected (``pytest_collection_finish``), beside the
    tests that come before its readers: the demo (13 torch.compile baselines) is the session's longest single piece
    of work. It lives in a folder (``base``) with its log, its process id and, once it ended, its return code, so
    that any process of the session can wait for it: under pytest-xdist the first worker to collect starts it in the
    session's shared folder and the worker that runs its readers waits for it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.work = base / "demo"
        self.log = base / "snakemake.log"
        self.returncode = base / "returncode"

    def start_once(self) -> None:
        """Started here unless another process of the session started it (its folder is made atomically)."""
        try:
            self.base.mkdir()
        except FileExistsError:
            return
        from workflow_scripts.devtools.workspace import copy_workflow

        copy_workflow(self.work)
        with open(self.log, "wb") as log:
            # A shell writes the return code, whichever process (if any) waits for it.
            proc = subprocess.Popen(["sh", "-c", '"$@"; echo $? > "$0.part" && mv "$0.part" "$0"', str(self.returncode),
                                     sys.executable, "-m", "snakemake", "--cores", "2"],
                                    cwd=self.work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (self.base / "pid").write_text(str(proc.pid))

    def finished(self, timeout: float = 1500) -> Path:
        deadline = time.monotonic() + timeout
        while not self.returncode.exists():
            assert time.monotonic() < deadline, f"the demo run did not end in {timeout} s"
            time.sleep(1)
        assert self.returncode.read_text().strip() == "0", self.log.read_text(errors="replace")[-5000:]
        return self.work

    def close(self) -> None:
        """The run's whole process group stopped (it was started in a session of its own) and its folder removed."""
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.killpg(int((self.base / "pid").read_text()), signal.SIGKILL)
        shutil.rmtree(self.base, ignore_errors=True)


# The session's folder that every pytest-xdist worker sees (set by the controller before the workers start).
SHARED_DIR_ENV = "KB_TESTS_SHARED_DIR"


def under_xdist(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if under_xdist(config):
        return
    compile_package()
    if getattr(config.option, "numprocesses", None):
        os.environ[SHARED_DIR_ENV] = tempfile.mkdtemp(prefix="kb-tests-")


def compile_package() -> None:
    """The package's bytecode written once, before any test starts a process. Where PYTHONDONTWRITEBYTECODE is set
    (as on the CI host), and always in the evaluator's children (``python -B``), no process writes it, so each one
    compiled every module it imports from source (about 0.2 s of CPU for an evaluator child), over a thousand times a
    session. The workflow's copies take the bytecode along (``copy_workflow``); Python checks each file against its
    source's size and time, so an edited source is compiled afresh."""
    compileall.compile_dir(REPO / "workflow_scripts", quiet=1)


def session_demo(config: pytest.Config) -> BackgroundDemo:
    """The session's demo run: in the folder every xdist worker sees, or in one of this process's own."""
    shared = os.environ.get(SHARED_DIR_ENV) if under_xdist(config) else None
    if shared is None:
        if BACKGROUND_DEMO not in config.stash:
            config.stash[BACKGROUND_DEMO] = BackgroundDemo(Path(tempfile.mkdtemp(prefix="kb-demo-run-")) / "run")
        return config.stash[BACKGROUND_DEMO]
    return BackgroundDemo(Path(shared) / "demo-run")


BACKGROUND_DEMO = pytest.StashKey[BackgroundDemo]()


# Session-scoped runs that several test files read: under pytest-xdist (``make test`` runs two workers) each file that
# uses one joins that run's group, so one worker builds it once; every other file is a group of its own (module-scoped
# fixtures, such as the cheat suite's one evaluation of every case, stay built once).
SHARED_RUNS = ("demo_run", "small_run")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by the marks added here, and before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that read a session's finished pipeline run are integration tests, wherever they stand; under xdist,
    each test joins its file's group (``SHARED_RUNS``)."""
    for item in items:
        if {"demo_run", "small_run", "compile_cache"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    if not under_xdist(config):
        return
    group_of_file: dict[Path, str] = {}
    for item in items:
        shared = next((run for run in SHARED_RUNS if run in getattr(item, "fixturenames", ())), None)
        if shared is not None or item.path not in group_of_file:
            group_of_file[item.path] = shared or group_of_file.get(item.path) or item.path.name
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of_file[item.path]))
    # The demo's readers last: their worker runs other files while the demo, started at collection, runs beside.
    items.sort(key=lambda item: group_of_file[item.path] == "demo_run")


def pytest_collection_finish(session: pytest.Session) -> None:
    if any("demo_run" in getattr(item, "fixturenames", ()) for item in session.items):
        session_demo(session.config).start_once()  # under xdist: by the first worker to get here


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if under_xdist(config):
        return  # the controller ends the shared run, once every worker is done
    shared = os.environ.pop(SHARED_DIR_ENV, None)
    if shared is not None:
        BackgroundDemo(Path(shared) / "demo-run").close()
        shutil.rmtree(shared, ignore_errors=True)
    demo = config.stash.get(BACKGROUND_DEMO, None)
    if demo is not None:
        demo.close()
        shutil.rmtree(demo.base.parent, ignore_errors=True)


def _link_unless_present(source: str, target: str) -> None:
    if not os.path.exists(target):
        os.link(source, target)


@pytest.fixture(scope="session")
def demo_run(request: pytest.FixtureRequest, compile_cache: Path) -> Path:
    """The demo as `make demo` runs it (config.yaml unchanged: every problem, every model, the compiled baselines)
    on a copy of the workflow, once per session (started in the background when the tests were collected). Tests
    that change it leave it complete and consistent again."""
    demo = session_demo(request.config)
    demo.start_once()  # started at collection, unless its readers were selected only afterwards
    work = demo.finished()
    # What it compiled (in its store's caches/, the default place) serves the session's other runs: hard links,
    # since the cache replaces files whole (by rename) and never writes into one. A file another run of this worker
    # already put there is the same artifact (its name is its content's key): kept.
    caches = work / yaml.safe_load((work / "config.yaml").read_text())["store"] / "caches"
    if caches.is_dir():
        shutil.copytree(caches, compile_cache, copy_function=_link_unless_present, dirs_exist_ok=True)
    return work


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> SmallRun:
    """Two demo problems, three models (twin shares expert's answers; garbled's second completion is not UTF-8),
    run to the summary once per session. Tests that change it leave it complete and consistent again."""
    from workflow_scripts.devtools.workspace import copy_workflow

    work = copy_workflow(tmp_path_factory.mktemp("small"))
    garbled = work / "garbled"
    garbled.mkdir()
    (garbled / "level1_1.txt").write_bytes((work / "demo/completions/expert/level1_1.txt").read_bytes())
    (garbled / "level1_2.txt").write_bytes(b"\xff\xfe not utf-8 \x80")
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["suite"].update(levels=[1], only={"1": [1, 2]})
    config["models"] = {name: config["models"][name] for name in ("expert", "twin")}
    config["models"]["garbled"] = {"label": "Garbled", "kind": "cached", "completions": "garbled"}
    config["summary"].update(reference="expert", resamples=1000)
    # Eager speedups from the baseline stage (no paired timing), as the published study's rows have them.
    config["evaluation"]["paired_block"] = 0
    # torch.compile's C++ build takes minutes per problem on a shared CPU; these tests read only eager numbers, and
    # an unknown mode fails at once (the baseline records compile_status "error: ...").
    config["baselines"]["compile_mode"] = "no-compile-in-tests"
    config.update(results_dir=SMALL_RESULTS, store=f"{SMALL_RESULTS}/.store")  # its own folder, as every configuration
    (work / "small.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    run = SmallRun(work, "small.yaml")
    done = run.snakemake("--cores", "2")
    assert done.returncode == 0, done.stderr[-5000:]
    return run

