"""Baselines: eager and torch.compile(max-autotune) timed like answers, in their own children (CPU)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cuda_driver import Driver, use_driver
from gpu_timers import start_timer, stopped

from workflow_scripts.evaluation import cuda_lock, freezer
from workflow_scripts.evaluation.baseline import BaselineConfig, _run_one, compile_seconds, measure_baselines
from workflow_scripts.evaluation.gpu_lock import YieldingLease, acquire_gpu

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = REPO / "tests" / "cheats" / "problems"


def baseline_cli(out: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "baseline", "--problem", str(PROBLEMS / "5_LinearReLU.py"),
         "--device", "cpu", "--out", str(out), "--timing-trials", "5", *args],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_eager_and_compile_on_cpu(tmp_path: Path) -> None:
    cache = tmp_path / "compile-cache"
    d = baseline_cli(tmp_path / "base.json", "--compile-cache", str(cache))
    for k in ("eager_ms", "eager_stats", "eager_status", "compile_ms", "compile_stats", "compile_status",
              "compile_time_s", "compile_backend", "device", "timing_mode", "fingerprint"):
        assert k in d, k
    assert d["eager_status"] == "ok" and d["eager_ms"] > 0 and len(d["eager_stats"]["trials"]) == 5
    assert d["compile_status"] == "ok" and d["compile_ms"] > 0 and len(d["compile_stats"]["trials"]) == 5
    assert d["compile_backend"] == "inductor-cpp" and d["compile_mode"] == "max-autotune"
    assert d["compile_time_s"] > 0  # the first call, recorded apart from the run time
    assert d["compile_max_abs_diff_vs_eager"] is not None and d["compile_max_abs_diff_vs_eager"] < 1e-4
    assert d["timing_mode"] == "cpu_wall_interpreter" and d["fingerprint"]["key"]
    assert d["protocol"]["timing"]["trials"] == 5 and d["protocol"]["timing"]["discard_first"] == 1
    assert d["protocol"]["autotune_alone"] is True  # the default: each autotuning benchmark with the GPU alone
    assert d["protocol"]["beside_others_timing"] is None  # no lease on the CPU: nothing steps aside
    assert d["phases_s"]["stopped_s"] == d["phases_s"]["gpu_held_s"] == 0.0
    # The compile cache: empty at first, it keeps what the compile built, the precompiled header and Inductor's
    # instruction-set checks apart (shared by every problem), nothing of the problem's own among them; the same
    # problem compiled again takes it all back and compiles far faster.
    assert d["compile_cache"]["files_seeded"] == 0 and d["compile_cache"]["files_kept"] > 0
    assert list(cache.glob("shared/torchinductor_*/precompiled_headers/*.gch"))
    checks = list(cache.glob("shared/.inductor/*/*.cpp"))
    assert checks and all(b"_chk_kernel" in source.read_bytes() for source in checks)
    assert {path.with_suffix(".so") for path in checks} <= set(cache.glob("shared/.inductor/*/*.so"))
    assert list(cache.glob("problems/*/.inductor/*/*.cpp"))  # the problem's kernels stay its own
    again = baseline_cli(tmp_path / "again.json", "--compile-cache", str(cache), "--no-eager")
    assert again["compile_cache"]["files_seeded"] == d["compile_cache"]["files_kept"]
    assert again["compile_status"] == "ok" and again["compile_time_s"] < d["compile_time_s"] / 2


def test_what_no_problem_depends_on_is_seeded_into_every_problem_s_compile(tmp_path: Path) -> None:
    # A compile child's folder as Inductor and Triton leave it: the header, an instruction-set check, Triton's GPU
    # driver module, and the problem's own kernel and launcher. Another problem's child gets the first three only.
    from workflow_scripts.evaluation.compile_cache import keep, seed

    private, cache = tmp_path / "child", tmp_path / "cache"
    files = {"torchinductor_u/precompiled_headers/h.gch": b"header",
             ".inductor/ab/cab.cpp": b"extern \"C\" void __avx_chk_kernel() {}", ".inductor/ab/cab.so": b"isa",
             ".triton/K1/cuda_utils.cpython-312-x86_64-linux-gnu.so": b"driver",
             ".inductor/cd/ccd.cpp": b"extern \"C\" void kernel(float* in_out_ptr0) {}", ".inductor/cd/ccd.so": b"k",
             ".triton/K2/__triton_launcher.so": b"launcher"}
    for relative, content in files.items():
        (private / relative).parent.mkdir(parents=True, exist_ok=True)
        (private / relative).write_bytes(content)
    assert keep(cache, "problem-a", private) == len(files)
    other = tmp_path / "other-child"
    assert seed(cache, "problem-b", other) == 4
    assert {p.relative_to(other).as_posix() for p in other.rglob("*") if p.is_file()} == {
        "torchinductor_u/precompiled_headers/h.gch", ".inductor/ab/cab.cpp", ".inductor/ab/cab.so",
        ".triton/K1/cuda_utils.cpython-312-x86_64-linux-gnu.so"}
    assert seed(cache, "problem-a", tmp_path / "again") == len(files)


def test_failing_baseline_keeps_the_problem(tmp_path: Path) -> None:
    prob = tmp_path / "98_Broken.py"
    prob.write_text((PROBLEMS / "1_ElementwiseAdd.py").read_text().replace(
        "return a + b", "raise RuntimeError('no kernel for this')"))
    res = measure_baselines(prob, BaselineConfig(device="cpu", timing_trials=2))
    assert res.eager_status.startswith("error") and "no kernel for this" in res.eager_status
    assert res.compile_status.startswith("error")
    assert res.eager_ms is None and res.compile_ms is None and res.compile_time_s is None


def test_a_failing_baseline_gives_its_gpu_back(tmp_path: Path) -> None:
    # The eager call fails inside its exclusive window: the status says so, and the lease is shared again.
    prob = tmp_path / "98_Broken.py"
    prob.write_text((PROBLEMS / "1_ElementwiseAdd.py").read_text().replace(
        "return a + b", "raise RuntimeError('no kernel for this')"))
    locks = tmp_path / "locks"
    cfg = BaselineConfig(device="cpu", timing_trials=2, compile_threads=1, lock_dir=str(locks))
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=locks, purpose="baseline") as lease, \
            YieldingLease(lease) as yielding_lease:
        status, _ = _run_one(prob, cfg, yielding_lease, None, "eager")
        assert status.startswith("error") and "no kernel for this" in status
        assert lease.mode == "shared"
    kinds = [json.loads(line)["activity"] for line in (locks / "timeline.jsonl").read_text().splitlines()]
    assert kinds == ["lease_acquire", "lease_shared", "lease_wait", "baseline_eager", "lease_exclusive", "lease_shared",
                     "lease_held"]


def test_same_timing_protocol_as_answers() -> None:
    from workflow_scripts.evaluation.answer import EvalConfig

    for dev in ("cpu", "cuda"):
        assert BaselineConfig(device=dev).timing_protocol() == EvalConfig(device=dev).timing_protocol()


@contextlib.contextmanager
def _baseline_beside_a_timer(locks: Path, cfg: BaselineConfig, problem: str, which: str,
                             hold: freezer.Hold = freezer.Hold.STOPPED
                             ) -> Iterator[tuple[psutil.Process, dict]]:
    """One baseline child (``_run_one``) in a thread under a yielding lease of GPU 0 of ``locks`` (a lock file: the
    child runs on the CPU); a 1-s timing job comes while the child starts (importing torch: seconds) and gets the GPU
    at once; the block runs while the timer holds it. The child's (status, info) is under "res" once the block ends."""
    out: dict = {}
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=locks, purpose="baseline") as lease, \
            YieldingLease(lease, hold=hold) as yielding_lease:
        worker = threading.Thread(target=lambda: out.update(
            res=_run_one(PROBLEMS / problem, cfg, yielding_lease, None, which)))
        worker.start()
        try:
            child = next_child("workflow_scripts.evaluation.child")
            timer = start_timer(locks, 1.0)
            assert timer.stdout is not None and float(timer.stdout.readline()) < 1.0
            yield child, out
            timer.wait(10)
        finally:
            worker.join(300)


def test_a_baseline_steps_aside_while_it_compiles_and_times_alone(tmp_path: Path) -> None:
    # The compile child under a yielding lease of a GPU that is only a lock file (the child runs on the CPU): a timing
    # job that comes while it starts and compiles gets the GPU at once, the child's tree stopped meanwhile; the
    # baseline's own timing runs in an exclusive window of its own.
    locks = tmp_path / "locks"
    cfg = BaselineConfig(device="cpu", timing_trials=2, compile_threads=1, lock_dir=str(locks))
    with _baseline_beside_a_timer(locks, cfg, "5_LinearReLU.py", "compile") as (child, out):
        assert stopped(child.pid)
    status, info = out["res"]
    assert status == "ok", status
    assert info["autotune_exclusive"] == "benchmarks" and info["stopped_s"] >= 1.0
    lines = [json.loads(line) for line in (locks / "timeline.jsonl").read_text().splitlines()]
    own = [e for e in lines if e.get("purpose") == "baseline"]
    assert any(e["activity"] == "lease_yielded" and e["end"] - e["start"] >= 1.0 for e in own)
    (timed,) = [e for e in lines if e["activity"] == "baseline_compile"]
    assert timed["compile_time_s"] == info["compile_time_s"]
    assert any(e["activity"] == "lease_exclusive" and e["start"] <= timed["start"] <= timed["end"] <= e["end"]
               for e in own)  # timed inside the baseline's exclusive window


def test_a_trusted_baseline_child_runs_on_beside_a_timing_with_its_gpu_work_held(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # baselines.compile_beside_timing, where the driver can lock (a stand-in here: every process has CUDA state): a
    # timing job that comes while the child starts gets the GPU at once, the child locked but running; the seconds
    # count as held, not stopped, and move the deadline all the same.
    driver = Driver(set(), every_pid=True)
    use_driver(monkeypatch, driver)
    locks = tmp_path / "locks"
    cfg = BaselineConfig(device="cpu", timing_trials=2, lock_dir=str(locks))
    with _baseline_beside_a_timer(locks, cfg, "1_ElementwiseAdd.py", "eager", hold=freezer.Hold.GPU_HELD) as (child, out):
        assert driver.states.get(child.pid) == cuda_lock.STATE_LOCKED and not stopped(child.pid)
    status, info = out["res"]
    assert status == "ok", status
    assert info["stopped_s"] == 0.0 and info["gpu_held_s"] >= 1.0
    # Locked for the step-aside (and again as its own window closed: a downgrade holds the child while this side
    # holds no lock), unlocked after each, never while stopped.
    locks = [(call, status) for call, pid, status in driver.calls if pid == child.pid and call != "state"]
    assert len(locks) >= 2 and [call for call, _ in locks] == ["lock", "unlock"] * (len(locks) // 2)
    assert psutil.STATUS_STOPPED not in {status for _, status in locks}


@pytest.mark.parametrize("waits, stops, expected", [
    ([], [], 10.0),
    ([(2.0, 4.0)], [], 8.0),
    ([], [(3.0, 6.0), (-5.0, 1.0), (9.0, 20.0)], 5.0),  # stops outside the compile span count for nothing
    # A stop that begins while the child's request waits to be read, and outlasts it: each second left out once
    # (s26's H100 run read 0.0 on 4 of 10 compiled baselines, the two subtracted one after the other).
    ([(2.0, 4.0)], [(3.0, 6.0)], 6.0),
    ([(1.0, 9.0)], [(0.0, 10.0)], 0.0),
])
def test_the_compile_time_leaves_out_each_waiting_or_stopped_second_once(
        waits: list[tuple[float, float]], stops: list[tuple[float, float]], expected: float) -> None:
    reply = {"compile_span": [0.0, 10.0], "wait_spans": [list(w) for w in waits]}
    assert compile_seconds(reply, stops) == pytest.approx(expected)


@pytest.mark.parametrize("reply", [{}, {"compile_span": "soon"}, {"compile_span": [5.0, 1.0]},
                                   {"compile_span": [0.0, 1.0], "wait_spans": [["a", 1.0]]}])
def test_a_compile_reply_without_a_readable_span_has_no_compile_time(reply: dict) -> None:
    assert compile_seconds(reply, []) is None


def next_child(marker: str, timeout_s: float = 60.0) -> psutil.Process:
    """The first process under this one whose command line carries ``marker``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in psutil.Process().children(recursive=True):
            try:
                if marker in " ".join(p.cmdline()):
                    return p
            except psutil.Error:
                continue
        time.sleep(0.01)
    raise AssertionError(f"no process with {marker!r} started")


def test_compile_beside_timing_is_a_baseline_setting_outside_its_store_key() -> None:
    """``baselines.compile_beside_timing`` (on by default) changes what runs beside other jobs' timing, never a pick or
    a timing of the baseline's own: the schema's key, a BaselineConfig field, not in the store key."""
    import yaml

    from workflow_scripts.core.params import ParamsError, parse_params
    from workflow_scripts.evaluation.jobs import key_params

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["baselines"]["properties"]["compile_beside_timing"]["type"] == "boolean"
    stopped_whole = parse_params(BaselineConfig, {"compile_beside_timing": False}, source="--params baselines")
    assert BaselineConfig().compile_beside_timing is True and stopped_whole.compile_beside_timing is False
    assert key_params(stopped_whole) == key_params(BaselineConfig())
    with pytest.raises(ParamsError, match="compile_beside_timing"):
        parse_params(BaselineConfig, {"compile_beside_timing": "yes"}, source="--params baselines")


def test_autotune_alone_reaches_the_baseline_s_config_and_its_store_key() -> None:
    """``baselines.autotune_alone`` as the stage reads it (the schema's key, a BaselineConfig field): picks made beside
    other jobs' work may differ, so a baseline measured either way is stored under a key of its own."""
    import yaml

    from workflow_scripts.core.params import ParamsError, parse_params
    from workflow_scripts.evaluation.jobs import key_params

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["baselines"]["properties"]["autotune_alone"]["type"] == "boolean"
    in_turn = parse_params(BaselineConfig, {"autotune_alone": False}, source="--params baselines")
    assert in_turn.autotune_alone is False and BaselineConfig().autotune_alone is True
    assert key_params(in_turn) != key_params(BaselineConfig())
    with pytest.raises(ParamsError, match="autotune_alone"):
        parse_params(BaselineConfig, {"autotune_alone": "no"}, source="--params baselines")
    # The compile cache keeps max-autotune's picks: one folder per setting, the alone one named as caches were before.
    from workflow_scripts.evaluation.compile_cache import folder_name

    key = "ab" * 32
    assert folder_name(key, True) == f"compile-{key[:16]}" != folder_name(key, False)
