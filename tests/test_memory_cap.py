"""The host-memory cap on an answer's whole process tree (workflow_scripts/evaluation/memory_cap.py), in both of its
mechanisms: a memory cgroup per child where the host allows one, else the trusted side's polling. The hogs take
memory that no per-process limit sees (processes of their own, unmapped memfds). KB_TEST_DEVICE=cuda runs the
end-to-end cases on the GPU (where RLIMIT_AS is not set at all)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import processes_with

from workflow_scripts.core.statuses import Status
from workflow_scripts.evaluation import memory_cap, timing
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answers

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

REPO = Path(__file__).resolve().parent.parent
ADD = REPO / "tests" / "cheats" / "problems" / "1_ElementwiseAdd.py"
HOG = REPO / "tests" / "cheats" / "answers" / "sandbox" / "host_memory_hog.py"
HONEST = REPO / "tests" / "cheats" / "answers" / "honest" / "add_autotune_stdlib.py"
DEVICE = os.environ.get("KB_TEST_DEVICE", "cpu")
LIMIT_GIB = 2.0
HOG_MIB = 4096  # twice the cap: four 1 GiB processes, or eight 512 MiB memfds, each under every per-process limit

MODES = [pytest.param("cgroup", marks=pytest.mark.skipif(memory_cap.cgroup_root() is None,
                                                         reason="no writable memory cgroup on this host")),
         "watch"]


@pytest.fixture(scope="module", params=MODES)
def capped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp(f"cap-{request.param}")
    marker = f"kbhog{secrets.token_hex(6)}"
    answers = {}
    for how in ("processes", "memfd"):
        text = HOG.read_text().replace("__HOW__", how).replace("__HOG_MIB__", str(HOG_MIB))
        answers[how] = tmp / f"hog_{how}.py"
        answers[how].write_text(text.replace("__MARKER__", marker))
    answers["honest"] = HONEST
    cfg = EvalConfig(device=DEVICE, time_answer=False, run_static=False, memory_limit_gib=LIMIT_GIB,
                     memory_cap=request.param)
    try:
        results = dict(zip(answers, evaluate_answers(ADD, list(answers.values()), cfg)))
        yield {"mode": request.param, "results": results, "marker": marker}
    finally:
        for pid in processes_with(marker):  # only on failure
            os.kill(pid, 9)


@pytest.mark.parametrize("how", ["processes", "memfd"])
def test_a_tree_over_the_cap_is_killed_and_not_credited(capped: dict, how: str) -> None:
    res = capped["results"][how]
    assert res.status == Status.CRASH.value, (res.status, res.error)
    assert "host memory cap exceeded" in (res.error or ""), res.error
    record = res.protocol["host_memory"]
    assert record["exceeded"] is True
    assert record["mode"].startswith("cgroup_v" if capped["mode"] == "cgroup" else "watch")
    assert record["limit_bytes"] >= LIMIT_GIB * (1 << 30)
    assert res.protocol["isolation"]["host_memory"] == record["mode"]
    deadline = time.monotonic() + 3.0
    while processes_with(capped["marker"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(capped["marker"]) == [], "a hog process outlived its evaluation"


def test_an_honest_answer_beside_them_is_judged_under_the_cap(capped: dict) -> None:
    res = capped["results"]["honest"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    record = res.protocol["host_memory"]
    assert record["exceeded"] is False
    # No peak where the kernel keeps none (cgroup v2 before Linux 5.19 has no memory.peak).
    assert record["peak_bytes"] is None or 0 < record["peak_bytes"] < record["limit_bytes"]


def test_tree_usage_counts_children_and_unmapped_memfds_but_not_the_exempt_areas() -> None:
    """A child holding 256 MiB resident and a 256 MiB memfd it never mapped reads about 512 MiB; a memfd of the
    caller's, inherited by the child, counts only when it is not exempt."""
    area = os.memfd_create("area")
    os.write(area, b"a" * (128 << 20))
    code = ("import os, sys, time; held = b'x' * (256 << 20); fd = os.memfd_create('m'); "
            "os.write(fd, b'y' * (256 << 20)); print('ready', flush=True); time.sleep(30)")
    # The shell stays (no exec): the memory is in its child, found only by walking the tree.
    outer = subprocess.Popen(["/bin/sh", "-c", f'"{sys.executable}" -c "$0"; :', code], stdout=subprocess.PIPE,
                             pass_fds=(area,), start_new_session=True)
    try:
        assert outer.stdout is not None and outer.stdout.readline().strip() == b"ready"
        assert memory_cap.psutil.Process(outer.pid).children(), "the memory must be in a child of the root"
        st = os.fstat(area)
        exempt = frozenset({(st.st_dev, st.st_ino)})
        used = memory_cap.tree_usage(outer.pid, exempt)
        assert 500 << 20 <= used <= 800 << 20, used
        with_area = memory_cap.tree_usage(outer.pid)
        assert with_area - used >= 120 << 20, (with_area, used)
    finally:
        outer.kill()
        outer.wait()
        os.close(area)


def test_a_configured_cgroup_cap_on_a_host_without_one_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_cap, "cgroup_root", lambda: None)
    with pytest.raises(memory_cap.MemoryCapUnavailable, match="memory_cap=cgroup"):
        memory_cap.resolve_mode("cgroup")
    with pytest.warns(RuntimeWarning, match="polling"):
        memory_cap._WARNED.clear()
        assert memory_cap.resolve_mode("auto") == "watch"
    with pytest.raises(ValueError, match="memory_cap must be one of"):
        memory_cap.resolve_mode("rlimit")


def _holder(code: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code + "\nprint('ready', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE, start_new_session=True)
    assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
    return p


def test_tree_usage_counts_a_memfd_that_is_only_mapped() -> None:
    """A memfd filled with write(), mapped by one page, its fd closed: in no fd table and 4 KiB of RSS, 256 MiB held."""
    code = ("import os, time, ctypes; libc = ctypes.CDLL(None); libc.mmap.restype = ctypes.c_void_p\n"
            "fd = os.memfd_create('m'); os.write(fd, b'y' * (256 << 20))\n"
            "assert libc.mmap(None, ctypes.c_size_t(4096), 1, 1, fd, ctypes.c_long(0)) not in (None, 2**64 - 1)\n"
            "os.close(fd)")
    p = _holder(code)
    try:
        if not os.access(f"/proc/{p.pid}/map_files", os.R_OK) or os.geteuid() != 0:
            pytest.skip("/proc/<pid>/map_files needs CAP_SYS_ADMIN")
        assert memory_cap.tree_usage(p.pid) >= 250 << 20
    finally:
        p.kill()
        p.wait()


def test_a_process_name_that_is_not_utf8_neither_hides_memory_nor_stops_the_watcher() -> None:
    """PR_SET_NAME with bytes that are not UTF-8: /proc/<pid>/status is not text. The watcher thread, which polls
    every tree, died on it (UnicodeDecodeError), and the cap was off for every later answer."""
    code = ("import ctypes, time; ctypes.CDLL(None).prctl(15, b'\\xff\\xfekb', 0, 0, 0)\n"
            "held = b'x' * (128 << 20)")
    p = _holder(code)
    try:
        assert memory_cap.tree_usage(p.pid) >= 120 << 20
        cap = memory_cap.TreeMemoryCap("watch", 64 << 20)
        cap.attach(p.pid)
        deadline = time.monotonic() + 5.0
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cap.exceeded() and p.poll() is not None
        cap.close()
        assert memory_cap._watcher().thread.is_alive()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_a_tree_the_watcher_cannot_measure_is_killed_and_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll that raises kills that one tree (not trusted to stay under its cap), names why, and the watcher goes on
    polling the others."""
    def broken(pid: int, exempt: frozenset = frozenset()) -> int:
        raise ValueError("odd /proc")

    monkeypatch.setattr(memory_cap, "tree_usage", broken)
    victim = subprocess.Popen(["sleep", "30"], start_new_session=True)
    cap = memory_cap.TreeMemoryCap("watch", 1 << 40)
    cap.attach(victim.pid)
    try:
        assert victim.wait(timeout=5) == -9
        assert cap.exceeded() and "could not be measured" in cap.describe() and "odd /proc" in cap.describe()
        assert memory_cap._watcher().thread.is_alive()
    finally:
        cap.close()
        if victim.poll() is None:
            victim.kill()


def test_the_cgroup_is_made_in_the_evaluators_own_never_above_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers stay inside whatever bounds the evaluator (a Slurm step, a systemd scope): with its own cgroup
    visible, the mount's root is no candidate; only a namespaced view (own path not visible) falls back to it."""
    mount = tmp_path / "unified"
    (mount / "job" / "step").mkdir(parents=True)
    monkeypatch.setattr(memory_cap, "_mounts", lambda: [(str(mount), "cgroup2", {"rw"})])
    monkeypatch.setattr(memory_cap, "_own_paths", lambda: {"2": "/job/step"})
    assert [r.path for r in memory_cap._candidates()] == [mount / "job" / "step"]
    monkeypatch.setattr(memory_cap, "_own_paths", lambda: {"2": "/not/visible/here"})
    assert [r.path for r in memory_cap._candidates()] == [mount]


@pytest.mark.skipif(memory_cap.cgroup_root() is None, reason="no writable memory cgroup on this host")
def test_the_memory_a_process_may_still_take_respects_its_cgroups_limit() -> None:
    """A Slurm job's or container's memory limit bounds what the evaluator plans with (input areas on the host, helper
    processes, answer batches), where the host's MemAvailable does not see it."""

    root = memory_cap.cgroup_root()
    assert root is not None
    limit = 3 << 30
    cgroup = root.path / f"{memory_cap._PREFIX}headroom-{os.getpid()}-{secrets.token_hex(3)}"
    cgroup.mkdir()
    try:
        for name in root.limit_files:
            (cgroup / name).write_text(str(limit))
        code = ("import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
                "from workflow_scripts.evaluation import memory_cap, reference; "
                "print(memory_cap.cgroup_headroom(), reference.available_memory(), memory_cap.cgroup_limit())")
        procs = cgroup / "cgroup.procs"
        # The child joins the cgroup before it measures: the shell moves itself in, then execs Python.
        out = subprocess.run(["sh", "-c", f'echo $$ > {procs} && exec "$0" -c "$1" /dev/null', sys.executable,
                              code], capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
        headroom, available, least_limit = int(out[0]), int(out[1]), int(out[2])
        # Two reads of the cgroup's usage a moment apart differ by a few pages (CI saw 4 KiB); the host's
        # MemAvailable, which the bound must cut, is gigabytes above the 3-GiB limit.
        jitter = 1 << 20
        assert 0 < headroom < limit and available <= headroom + jitter and headroom < least_limit <= limit
    finally:
        cgroup.rmdir()


def test_nested_limits_give_the_least_headroom_and_the_least_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's cgroup inside a node's: what may still be taken is the tightest of limit - usage, what a run may plan
    with the tightest limit (evaluation/resources.py host_memory_bytes)."""
    monkeypatch.setattr(memory_cap, "_cgroup_limits", lambda: [(8 << 30, 2 << 30), (4 << 30, 7 << 29)])
    assert memory_cap.cgroup_headroom() == 1 << 29 and memory_cap.cgroup_limit() == 4 << 30
    monkeypatch.setattr(memory_cap, "_cgroup_limits", lambda: [])
    assert memory_cap.cgroup_headroom() is None and memory_cap.cgroup_limit() is None


def test_the_watcher_polls_between_timed_trials_never_during_one() -> None:
    """A timed trial holds ``timing.TRIAL_GATE``: the watcher's poll (Python work that took the interpreter's lock
    inside the trusted side's reference windows) waits for the trial's end, then kills a tree over its cap."""
    p = _holder("import time; held = b'x' * (128 << 20)")
    cap = memory_cap.TreeMemoryCap("watch", 64 << 20)
    try:
        with timing.TRIAL_GATE:  # a trial in progress, as long as the test needs
            cap.attach(p.pid)
            time.sleep(20 * memory_cap.POLL_S)
            assert p.poll() is None and not cap.exceeded()
        deadline = time.monotonic() + 5.0
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cap.exceeded() and p.poll() is not None
    finally:
        cap.close()
        if p.poll() is None:
            p.kill()
        p.wait()
