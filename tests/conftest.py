"""Shared fixtures. The KernelBench data (../shared/kernelbench, or $KERNELBENCH_DIR) is optional: tests that
need it skip cleanly where it is absent. ``demo_run`` is the one full demo run (``make demo``'s configuration, as it
ships) shared by every test that reads a finished demo (tests/test_pipeline_e2e.py, tests/test_report.py);
``small_run`` is one small finished pipeline run shared by the end-to-end tests of the store and of configuration
errors; ``compile_cache`` is one folder for what torch.compile builds, which the other pipeline runs of the session
name (``baselines.compile_cache_dir``), so a problem's compiled baseline is built once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from cli import SMALL_RESULTS, SmallRun


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
    tests that come before its readers: on CI's two cores most tests leave one idle, and the demo (13 torch.compile
    baselines) is the session's longest single piece of work."""

    def __init__(self) -> None:
        from workflow_scripts.devtools.workspace import copy_workflow

        self.base = Path(tempfile.mkdtemp(prefix="kb-demo-run-"))
        self.work = copy_workflow(self.base / "demo")
        self.log = self.base / "snakemake.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "2"],
                                         cwd=self.work, stdout=log, stderr=subprocess.STDOUT)

    def finished(self, timeout: float = 1500) -> Path:
        returncode = self.proc.wait(timeout)
        assert returncode == 0, self.log.read_text(errors="replace")[-5000:]
        return self.work

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)


BACKGROUND_DEMO = pytest.StashKey[BackgroundDemo]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if any("demo_run" in getattr(item, "fixturenames", ()) for item in session.items):
        session.config.stash[BACKGROUND_DEMO] = BackgroundDemo()


def pytest_sessionfinish(session: pytest.Session) -> None:
    demo = session.config.stash.get(BACKGROUND_DEMO, None)
    if demo is not None:
        demo.close()


@pytest.fixture(scope="session")
def demo_run(request: pytest.FixtureRequest, compile_cache: Path) -> Path:
    """The demo as `make demo` runs it (config.yaml unchanged: every problem, every model, the compiled baselines)
    on a copy of the workflow, once per session (started in the background when the tests were collected). Tests
    that change it leave it complete and consistent again."""
    work = request.config.stash[BACKGROUND_DEMO].finished()
    # What it compiled (in its store's caches/, the default place) serves the session's other runs: hard links,
    # since the cache replaces files whole (by rename) and never writes into one.
    caches = work / yaml.safe_load((work / "config.yaml").read_text())["store"] / "caches"
    if caches.is_dir():
        shutil.copytree(caches, compile_cache, copy_function=os.link, dirs_exist_ok=True)
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


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by the marks added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that read a session's finished pipeline run are integration tests, wherever they stand."""
    for item in items:
        if {"demo_run", "small_run", "compile_cache"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
