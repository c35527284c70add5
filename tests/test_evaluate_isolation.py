"""End-to-end isolation tests of the evaluator (CPU): environment, limits, the OS sandbox, timeouts and the
process group, hostile channel frames, calibration, reference failures and the CLI."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from processes import processes_with

from workflow_scripts.core import configuration
from workflow_scripts.core.statuses import Status
from workflow_scripts.evaluation import sandbox
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answer, evaluate_answers
from workflow_scripts.evaluation.confinement import hidden_by
from workflow_scripts.evaluation.isolation import probe_isolation
from workflow_scripts.evaluation.limits import Limits
from workflow_scripts.generation.replay import rename_reference_model

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

DEVICE = os.environ.get("KB_TEST_DEVICE", "cpu")
REPO = Path(__file__).resolve().parent.parent
CHEATS = REPO / "tests" / "cheats"
ADD = CHEATS / "problems" / "1_ElementwiseAdd.py"
LINEAR = CHEATS / "problems" / "5_LinearReLU.py"
ANS = CHEATS / "answers"


def _pgrp_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


def test_environment_and_limits_inside_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TEST_SECRET", "must-not-leak")
    res = evaluate_answer(ADD, ANS / "probes/env_probe.py", EvalConfig(device="cpu", time_answer=False))
    assert res.status == Status.CORRECT.value, res.error


SANDBOX_LEVEL = probe_isolation("auto", EvalConfig(device="cpu").limits(), "cpu")
needs_sandbox = pytest.mark.skipif(not SANDBOX_LEVEL.sandboxed, reason=(
    "no OS sandbox on this host (neither bubblewrap nor unshare works here): " + "; ".join(SANDBOX_LEVEL.warnings)))


@needs_sandbox
def test_user_and_network_namespaces() -> None:
    res = evaluate_answer(ADD, ANS / "probes/report_ns.py", EvalConfig(device="cpu", time_answer=False,
                                                                       run_static=False))
    assert res.status == Status.CORRECT.value, res.error
    assert res.protocol["network_isolation"] is True
    iso = res.protocol["isolation"]
    assert iso["tool"] in ("bwrap", "unshare") and iso["pid_namespace"] and iso["network"] and iso["readonly_root"]
    assert iso["ipc_namespace"]
    assert iso["private_tmp"] == {"bytes": 2048 << 20, "inodes": 32768} and not iso["capabilities"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make test installs it)")
def test_bubblewrap_gives_the_full_level() -> None:
    iso = probe_isolation("bwrap", Limits(), "cpu")
    assert (iso.tool, iso.level, iso.uid, iso.devices) == ("bwrap", "full", 65534, "minimal"), iso


def test_without_a_sandbox_isolation_is_recorded_as_none() -> None:
    res = evaluate_answer(ADD, ANS / "honest/add_triton.py",
                          EvalConfig(device="cpu", time_answer=False, isolation="none"))
    assert res.status == Status.CORRECT.value and res.protocol["network_isolation"] is False
    assert res.protocol["isolation"]["tool"] == "none" and res.protocol["isolation"]["warnings"]


def test_a_missing_bwrap_falls_back_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without bubblewrap (the GPU host): "auto" falls back to unshare, warns, and says why in the record;
    asking for bwrap there is an error, never a silent downgrade."""
    monkeypatch.setenv("KB_BWRAP", "/nonexistent/bwrap")
    with pytest.warns(RuntimeWarning, match="unshare"):
        iso = probe_isolation("auto", Limits(tmp_inodes=1001), "cpu")
    assert iso.tool in ("unshare", "none") and iso.level != "full"
    assert any("bwrap: not found" in w for w in iso.warnings)
    with pytest.raises(sandbox.SandboxUnavailable):
        probe_isolation("bwrap", Limits(tmp_inodes=1002), "cpu")


@pytest.fixture()
def child_pids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The process ids of the evaluation children started during a test (each leads its own process group)."""
    pids: list[int] = []
    orig = sandbox.ChildProcess.start

    def start(self: sandbox.ChildProcess) -> None:
        orig(self)
        assert self.proc is not None
        pids.append(self.proc.pid)

    monkeypatch.setattr(sandbox.ChildProcess, "start", start)
    return pids


def test_timeout_kills_the_process_group(child_pids: list[int]) -> None:
    t0 = time.monotonic()
    res = evaluate_answer(ADD, ANS / "failures/endless_loop.py",
                          EvalConfig(device="cpu", timeout_s=12, run_static=False))
    elapsed = time.monotonic() - t0
    assert res.status == Status.TIMEOUT.value and res.compiled and not res.correct
    assert "timed out" in res.error
    assert elapsed < 30
    assert len(child_pids) == 1  # the answer's process; the reference runs on the trusted side
    for pid in child_pids:  # each child led its own session/process group; nothing of it is left
        assert _pgrp_members(pid) == []


def test_watchdog_kills_a_call_that_never_returns_at_once(child_pids: list[int]) -> None:
    """The per-call watchdog ends a forward that runs past max(floor, 100 x the reference's forward) at once, long
    before the evaluation's own timeout, and leaves nothing of the child behind."""
    t0 = time.monotonic()
    res = evaluate_answer(ADD, ANS / "failures/endless_loop.py",
                          EvalConfig(device="cpu", timeout_s=120, run_static=False, watchdog_floor_s=3.0))
    elapsed = time.monotonic() - t0
    assert res.status == Status.TIMEOUT.value and "killed by the watchdog during correctness" in res.error
    assert elapsed < 30  # the evaluation's timeout is 120 s
    assert len(child_pids) == 1  # the answer's process; the reference runs on the trusted side
    for pid in child_pids:
        assert _pgrp_members(pid) == []


def test_watchdog_leaves_honest_answers_alone() -> None:
    res = evaluate_answer(ADD, ANS / "honest/add_triton.py",
                          EvalConfig(device="cpu", run_static=False, watchdog_floor_s=3.0))
    assert res.status == Status.CORRECT.value, res.error


def test_watchdog_limits() -> None:
    from workflow_scripts.evaluation.protocol import WATCHDOG_CALL_S, WATCHDOG_FIRST_CALL_S, call_limit_s, timing_limit_s

    assert EvalConfig(device="cuda").watchdog_limits() == (WATCHDOG_FIRST_CALL_S, WATCHDOG_CALL_S)
    assert EvalConfig(device="cpu").watchdog_limits() is None  # the interpreter's speed is not the reference's
    assert call_limit_s(1.0, 15.0) == 15.0 and call_limit_s(500.0, 15.0) == 50.0  # 100x a 0.5 s reference
    assert timing_limit_s(2.0, 104, 45.0) == 45.0 and timing_limit_s(11.0, 104, 45.0) == pytest.approx(114.4)
    assert WATCHDOG_FIRST_CALL_S < 60  # a never-returning kernel is killed within a minute


def test_calibration_answer_is_correct_without_triton(tmp_path: Path) -> None:
    for prob in (ADD, LINEAR):  # LINEAR: parameters must match (both models built after seed 42)
        ans = tmp_path / f"cal_{prob.stem}.py"
        ans.write_text(rename_reference_model(prob.read_text()))
        cfg = EvalConfig(device="cpu", require_triton=False, timing_trials=3, run_static=False)
        res = evaluate_answer(prob, ans, cfg)
        assert res.status == Status.CORRECT.value, res.error
        assert res.max_abs_diff == 0.0 and res.runtime_ms is not None and res.triton_launches == 0
        assert res.protocol["require_triton"] is False
    res = evaluate_answer(ADD, tmp_path / "cal_1_ElementwiseAdd.py",
                          EvalConfig(device="cpu", time_answer=False, run_static=False))
    assert res.status == Status.NO_TRITON_LAUNCH.value


def test_configured_secret_seeds_are_used_and_recorded(tmp_path: Path) -> None:
    """The secret seeds can be set to replay a run; the timing seed, drawn once per problem, included."""
    ans = tmp_path / "cal.py"
    ans.write_text(rename_reference_model(ADD.read_text()))
    cfg = EvalConfig(device="cpu", require_triton=False, timing_trials=2, run_static=False, hidden_seeds=[11],
                     timing_seed=22, post_timing_seed=33)
    res = evaluate_answer(ADD, ans, cfg)
    assert res.status == Status.CORRECT.value, res.error
    assert (res.protocol["hidden_seeds"], res.protocol["timing_seed"], res.protocol["post_timing_seed"]) == ([11], 22, 33)


def test_the_reference_is_timed_beside_the_answer_in_alternating_blocks(tmp_path: Path) -> None:
    """Paired timing: the trusted side times the eager reference on the same inputs, in blocks alternating with the
    answer's; both sides get every trial of the protocol. ``paired_block=0`` times the answer alone."""
    ans = tmp_path / "cal.py"
    ans.write_text(rename_reference_model(ADD.read_text()))
    cfg = EvalConfig(device="cpu", require_triton=False, timing_trials=5, warmup=1, run_static=False, paired_block=2)
    res = evaluate_answer(ADD, ans, cfg)
    assert res.status == Status.CORRECT.value, res.error
    paired = res.paired_reference
    assert paired is not None and (paired["blocks"], paired["block_trials"], paired["order"]) == (3, 2, "ABBA")
    assert paired["stats"]["n"] == 5
    assert paired["device_ooms"] is None and "reference_memory_starved" not in res.flags  # no device allocator here
    assert len(paired["raw"]["warmup_ms"]) == 1 and len(paired["raw"]["discarded_ms"]) == 1
    assert len(res.runtime_stats["trials"]) == 5 and len(res.timing_raw["warmup_ms"]) == 1
    assert len(res.timing_raw["launches_per_call"]) == 1 + 1 + 5  # warm-up, discarded, trials: over all blocks
    assert res.protocol["paired_block"] == 2 and res.protocol["paired_reference_block"] == 10  # at most the block
    # Fewer reference trials per block: one beside each of the answer's three blocks; the answer keeps all five.
    fewer = evaluate_answer(ADD, ans, replace(cfg, paired_reference_block=1))
    assert fewer.status == Status.CORRECT.value and fewer.paired_reference["stats"]["n"] == 3
    assert fewer.paired_reference["reference_block_trials"] == 1 and len(fewer.runtime_stats["trials"]) == 5
    alone = evaluate_answer(ADD, ans, replace(cfg, paired_block=0))
    assert alone.status == Status.CORRECT.value and alone.paired_reference is None
    assert len(alone.runtime_stats["trials"]) == 5


def test_reference_failure_is_reference_error(tmp_path: Path) -> None:
    prob = tmp_path / "99_Broken.py"
    prob.write_text(ADD.read_text().replace("return a + b", "raise RuntimeError('reference is broken')"))
    res = evaluate_answer(prob, ANS / "honest/add_triton.py", EvalConfig(device="cpu", run_static=False))
    assert res.status == Status.REFERENCE_ERROR.value and not res.compiled
    assert "reference is broken" in res.error


def test_cli_writes_the_documented_keys(tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "evaluate", "--problem", str(ADD), "--answer",
         str(ANS / "honest/add_triton.py"), "--device", "cpu", "--out", str(out), "--timing-trials", "3",
         "--tf32", "ieee", "--timeout", "120"],
        cwd=REPO, capture_output=True, text=True, timeout=200,
    )
    assert proc.returncode == 0, proc.stderr
    d = json.loads(out.read_text())
    for k in ("status", "compiled", "correct", "runtime_ms", "runtime_stats", "max_abs_diff", "triton_launches",
              "flags", "error", "device", "timing_mode", "tf32", "fingerprint", "protocol"):
        assert k in d, k
    assert d["status"] == "correct" and d["compiled"] and d["correct"]
    assert set(d["runtime_stats"]) >= {"mean", "median", "std", "min", "max", "trials"}
    assert len(d["runtime_stats"]["trials"]) == 3
    assert d["tf32"]["mode"] == "ieee" and d["tf32"]["cuda_matmul_allow_tf32"] is False
    assert d["tf32"]["cudnn_allow_tf32"] is False and d["tf32"]["float32_matmul_precision"] == "highest"
    assert d["timing_mode"] == "cpu_wall_interpreter" and d["fingerprint"]["key"]
    assert d["protocol"]["trial_seeds"] == [734796314, 576165995, 2197670066, 839703249, 2584932063]


def test_cli_no_timing_and_no_require_triton(tmp_path: Path) -> None:
    ans = tmp_path / "cal.py"
    ans.write_text(rename_reference_model(ADD.read_text()))
    out = tmp_path / "eval.json"
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "evaluate", "--problem", str(ADD), "--answer", str(ans),
         "--device", "cpu", "--out", str(out), "--no-timing", "--no-require-triton"],
        cwd=REPO, capture_output=True, text=True, timeout=200,
    )
    assert proc.returncode == 0, proc.stderr
    d = json.loads(out.read_text())
    assert d["status"] == "correct" and d["runtime_ms"] is None and d["runtime_stats"] is None


def test_a_batch_of_children_gives_each_answer_its_own_verdict(child_pids: list[int]) -> None:
    # Three answers, children started two at a time: a honest one, one whose forward raises, and a cheat that
    # mutates its inputs; each gets the verdict it gets alone, and no child outlives the evaluation.
    answers = [ANS / "honest/add_triton.py", ANS / "failures/forward_raises.py", ANS / "cheats/add_mutate_inputs.py"]
    cfg = EvalConfig(device="cpu", time_answer=False, run_static=False, prestart=2)
    batch = evaluate_answers(ADD, answers, cfg)
    alone = [evaluate_answer(ADD, a, EvalConfig(device="cpu", time_answer=False, run_static=False))
             for a in answers]
    assert [r.status for r in batch] == [r.status for r in alone]
    assert batch[0].status == Status.CORRECT.value and batch[1].status == Status.RUNTIME_ERROR.value
    assert batch[2].status != Status.CORRECT.value
    assert {r.phases_s["children_batch"] for r in batch} == {2.0}
    assert len(child_pids) == 6  # 3 for the batch (2, then 1), 3 alone
    time.sleep(0.5)
    assert all(not Path(f"/proc/{pid}").exists() or "Z" in (Path(f"/proc/{pid}/stat").read_text().split()[2])
               for pid in child_pids)


def test_children_start_a_batch_ahead_one_more_as_each_answer_is_taken_up(child_pids: list[int],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A rolling window: with a batch of 2, the first two children start while the problem is prepared, then one as
    # each answer is taken up (the child of the answer two places later), so each has two answers' time to get
    # ready. Children started a batch at a time ([0, 0, 1, 1, 3] judged before each start) gave the first of each
    # batch one answer's time. Never more than one batch beside the answer being judged.
    import workflow_scripts.evaluation.answer as answer_module
    import workflow_scripts.evaluation.reference as reference_module

    monkeypatch.setattr(reference_module.os, "cpu_count", lambda: 4)  # the first batch starts during preparation
    judged: list[int] = []
    judged_at_each_start: list[int] = []
    start_slot = answer_module.ProblemEvaluator.start_slot

    def recorded_start(self: answer_module.ProblemEvaluator) -> object:
        judged_at_each_start.append(len(judged))
        return start_slot(self)

    monkeypatch.setattr(answer_module.ProblemEvaluator, "start_slot", recorded_start)
    cfg = EvalConfig(device="cpu", time_answer=False, run_static=False, prestart=2)
    results = evaluate_answers(ADD, [ANS / "honest/add_triton.py"] * 5, cfg, on_result=lambda k, r: judged.append(k))
    assert [r.status for r in results] == [Status.CORRECT.value] * 5 and len(child_pids) == 5
    assert judged_at_each_start == [0, 0, 0, 1, 2]


def test_answers_with_their_own_require_triton_share_one_reference_side(tmp_path: Path) -> None:
    # The calibration model's reference code is exempt from require_triton, the models' answers are not: one call
    # judges them all against one reference side, each under its own setting (a second call per setting built the
    # problem's inputs and reference outputs twice: 30-40 s more per multi-GB problem on the H200).
    reference = tmp_path / "reference.py"
    reference.write_text(rename_reference_model(ADD.read_text()))
    answers = [ANS / "honest/add_triton.py", reference, reference]
    cfg = EvalConfig(device="cpu", timing_trials=2, run_static=False)
    results = evaluate_answers(ADD, answers, cfg, require_triton=[True, False, True])
    assert [r.status for r in results] == [Status.CORRECT.value, Status.CORRECT.value, Status.NO_TRITON_LAUNCH.value]
    assert [r.protocol["require_triton"] for r in results] == [True, False, True]
    assert {r.phases_s["answers_judged_together"] for r in results} == {3.0}
    with pytest.raises(ValueError, match="2 values for 3 answers"):
        evaluate_answers(ADD, answers, cfg, require_triton=[True, False])


def test_the_first_batch_starts_while_the_problem_is_prepared(child_pids: list[int],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The input size is probed on hosts with cores for it (every GPU host; this CPU host may have two): then the
    # whole first batch starts during the preparation, the answers get the verdicts they get alone, and no more
    # children start than answers. Where the areas' memory would not allow a batch, only the first starts early.
    import workflow_scripts.evaluation.answer as answer_module
    import workflow_scripts.evaluation.reference as reference_module

    monkeypatch.setattr(reference_module.os, "cpu_count", lambda: 4)
    answers = [ANS / "honest/add_triton.py", ANS / "failures/forward_raises.py", ANS / "cheats/add_mutate_inputs.py"]
    cfg = EvalConfig(device="cpu", time_answer=False, run_static=False, prestart=3)
    batch = evaluate_answers(ADD, answers, cfg)
    assert [r.status for r in batch[:2]] == [Status.CORRECT.value, Status.RUNTIME_ERROR.value]
    assert batch[2].status not in (Status.CORRECT.value, Status.RUNTIME_ERROR.value)
    assert {r.phases_s["children_started_early"] for r in batch} == {3.0} and len(child_pids) == 3
    two = evaluate_answers(ADD, answers[:2], cfg)
    assert two[0].phases_s["children_started_early"] == 2.0 and len(child_pids) == 5
    # Room for one child's areas only: the first starts early, the others when the first answer is checked.
    room_for_one = 4 * 2 * 64 * 128 * 4 * 2
    monkeypatch.setattr(answer_module, "available_memory", lambda: room_for_one)
    small = evaluate_answers(ADD, answers, cfg)
    assert [r.status for r in small] == [r.status for r in batch]
    assert small[0].phases_s["children_started_early"] == 1.0 and len(child_pids) == 8


def test_early_children_beyond_the_batch_end_before_any_answer_waits_on_them(child_pids: list[int],
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The early count guesses the outputs (as large as the inputs); where the batch, sized once the reference has
    # run, is smaller, the surplus children end at once: a child without its areas never says it is ready, and a
    # timed answer would wait on it (120 s each). Timed answers here, each as fast as alone.
    import workflow_scripts.evaluation.answer as answer_module
    import workflow_scripts.evaluation.reference as reference_module

    monkeypatch.setattr(reference_module.os, "cpu_count", lambda: 4)
    plenty, room_for_one = 1 << 40, 4 * 2 * 64 * 128 * 4 * 2
    reads = iter([plenty])  # the early count's read; every later one (the batch's) finds room for one child
    monkeypatch.setattr(answer_module, "available_memory", lambda: next(reads, room_for_one))
    answers = [ANS / "honest/add_triton.py"] * 3
    cfg = EvalConfig(device="cpu", run_static=False, prestart=3)
    results = evaluate_answers(ADD, answers, cfg)
    assert [r.status for r in results] == [Status.CORRECT.value] * 3
    assert results[0].phases_s["children_started_early"] == 3.0 and results[0].phases_s["children_batch"] == 1.0
    assert all(r.phases_s["answer_wall_s"] < 60 and r.phases_s.get("next_child_wait_s", 0.0) < 30 for r in results)
    assert len(child_pids) == 5  # 3 early, 2 of them ended; then one per later answer


def test_answer_processes_create_their_device_context_one_at_a_time_and_never_during_a_timing(
        child_pids: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    # Four timed answers: the first's process starts during the preparation, the other three when the first answer
    # is taken up, so their starts meet its timing. Their host parts run together, their device parts (the CUDA
    # context on a GPU) one after the other, each outside every answer's timing.
    import workflow_scripts.evaluation.answer as answer_module
    from workflow_scripts.evaluation.verdict import static_verdict

    monkeypatch.setattr(answer_module.ProblemEvaluator, "_early_count", lambda self, answers: 1)
    cfg = EvalConfig(device="cpu", run_static=False, prestart=4)
    answers = [ANS / "honest/add_triton.py"] * 4
    evaluator = answer_module.ProblemEvaluator(ADD, cfg, None)
    try:
        evaluator.prepare(len(answers))
        results = evaluator.evaluate([(a, static_verdict(a, cfg), cfg) for a in answers])
        history = list(evaluator.gate.history)
    finally:
        evaluator.close()
    assert [r.status for r in results] == [Status.CORRECT.value] * 4 and len(child_pids) == 4
    assert all("child_gate_wait_s" in r.phases_s and "child_device_start_s" in r.phases_s for r in results)
    starts: dict[int, list[float]] = {}
    for event, at, n in history:
        if event in ("go", "ready"):
            starts.setdefault(n, []).append(at)
    assert sorted(starts) == [0, 1, 2, 3] and all(len(v) == 2 and v[0] <= v[1] for v in starts.values())
    spans = sorted(starts.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # one at a time
    quiet = [at for event, at, _ in history if event in ("pause", "resume")]
    assert len(quiet) == 8  # each answer was timed once, the gate paused around it
    windows = list(zip(quiet[::2], quiet[1::2]))
    assert all(end <= w0 or start >= w1 for start, end in spans for w0, w1 in windows)


def test_triton_driver_helpers_are_kept_for_later_problems_once(tmp_path: Path) -> None:
    # The first answer process's Triton cache (built before its answer ran) is published beside the GPU locks, in
    # this user's own folder, whole, once: a later copy never replaces it, and nothing half-written is left.
    from workflow_scripts.evaluation.triton_stub_cache import load_template, publish_template, template_home

    built = tmp_path / "built"
    (built / "ab12").mkdir(parents=True)
    (built / "ab12" / "cuda_utils.so").write_bytes(b"first")
    home = template_home(EvalConfig(device="cuda", lock_dir=str(tmp_path / "locks")))
    assert home is not None and home.parent == tmp_path / "locks" / f"triton-driver-{os.getuid()}"
    assert template_home(EvalConfig(device="cpu")) is None  # the interpreter builds nothing
    assert not load_template(home, tmp_path / "none")  # none kept yet
    publish_template(built, home)
    assert stat.S_IMODE(home.parent.stat().st_mode) == 0o700
    (built / "ab12" / "cuda_utils.so").write_bytes(b"second")
    publish_template(built, home)
    assert (home / "ab12" / "cuda_utils.so").read_bytes() == b"first"
    assert list(home.parent.iterdir()) == [home]
    assert load_template(home, tmp_path / "copy")
    assert (tmp_path / "copy" / "ab12" / "cuda_utils.so").read_bytes() == b"first"


def test_a_triton_template_others_could_have_written_is_never_used(tmp_path: Path) -> None:
    # The lock folder may be shared between users: a template in a folder that someone else can write to (or
    # reached through a link) could hold a planted library that every later answer process would load. Neither
    # used nor published to.
    from workflow_scripts.evaluation.triton_stub_cache import load_template, publish_template, template_home

    home = template_home(EvalConfig(device="cuda", lock_dir=str(tmp_path / "locks")))
    assert home is not None
    (home / "ab12").mkdir(parents=True)
    (home / "ab12" / "cuda_utils.so").write_bytes(b"planted")
    home.parent.chmod(0o777)
    assert not load_template(home, tmp_path / "copy") and not (tmp_path / "copy").exists()
    built = tmp_path / "built"
    (built / "cd34").mkdir(parents=True)
    publish_template(built, home.parent / "other")
    assert not (home.parent / "other").exists()
    # A link to a folder of one's own is refused as well: the folder checked must be the folder used.
    home.parent.chmod(0o700)
    real = home.parent.rename(tmp_path / "elsewhere")
    (tmp_path / "locks" / home.parent.name).symlink_to(real)
    assert not load_template(home, tmp_path / "copy")
    assert load_template(real / home.name, tmp_path / "copy")  # the same folder, reached directly


# ---- the OS sandbox: what an answer cannot do even where the in-process monitor does not see it ------------------


def _from_template(tmp_path: Path, name: str, **subs: str) -> Path:
    text = (ANS / "sandbox" / name).read_text()
    for k, v in subs.items():
        text = text.replace(f"__{k}__", v)
    out = tmp_path / name
    out.write_text(text)
    return out


SANDBOX_TOOLS = [pytest.param("bwrap", marks=pytest.mark.skipif(
                     shutil.which("bwrap") is None, reason="bubblewrap is not installed (make test installs it)")),
                 "unshare"]


@pytest.fixture(scope="module", params=SANDBOX_TOOLS)
def sandboxed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The sandbox answers, evaluated once per sandbox tool against one reference side. Each computes the right
    output only if the sandbox held (else its output is off by one: a mismatch)."""
    if not SANDBOX_LEVEL.sandboxed:
        pytest.skip("no OS sandbox on this host: " + "; ".join(SANDBOX_LEVEL.warnings))
    tmp = tmp_path_factory.mktemp(f"sandbox-{request.param}")
    token = secrets.token_hex(6)
    early, late = REPO / f".kb_sandbox_early_{token}", tmp / "late.txt"
    repo_db = REPO / f".kb_sandbox_write_{token}.db"
    # Places an answer must not write to: the repository, the store, the host's /tmp, /var/tmp and /dev/shm.
    store = REPO / configuration.store_dir(configuration.load([REPO / "config.yaml"]))  # the demo's store
    store.mkdir(parents=True, exist_ok=True)  # a fresh clone has none yet: the write attempts must have a target
    write_dirs = [str(d) for d in (REPO, store, Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")) if d.is_dir()]
    existing = REPO / f".kb_sandbox_existing_{token}"
    existing.write_text("unchanged\n")
    listener = socket.create_server(("127.0.0.1", 0))
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(f"\0kbsandbox{token}")
    abstract.listen()
    shm_key = secrets.randbelow(1 << 30) + 1
    answers = {
        "spawn": _from_template(tmp, "spawn_survivor.py", EARLY=str(early), LATE=str(late), MARKER=f"kbmark{token}"),
        "write_repo": _from_template(tmp, "write_repo.py", TARGET=str(repo_db)),
        "many_files": _from_template(tmp, "many_files.py"),
        "see_evaluator": _from_template(tmp, "see_evaluator.py", HOST_PID=str(os.getpid())),
        "write_c_level": _from_template(tmp, "write_c_level.py", DIRS=json.dumps(write_dirs), EXISTING=str(existing)),
        "double_fork": _from_template(tmp, "survive_double_fork.py", MARKER=f"kbmark{token}"),
        "reach_evaluator": _from_template(tmp, "reach_evaluator.py", HOST_PID=str(os.getpid()),
                                          HOST_PGID=str(os.getpgid(0)), PORT=str(listener.getsockname()[1]),
                                          ABSTRACT=f"kbsandbox{token}", SHM_KEY=str(shm_key)),
        "writable_mounts": _from_template(tmp, "writable_mounts.py"),
        "find_problem": _from_template(tmp, "find_problem_source.py", PROBLEM=str(ADD)),
        "reference_from_disk": ANS / "sandbox" / "reference_from_disk.py",
    }
    cfg = EvalConfig(device="cpu", time_answer=False, run_static=False, isolation=request.param)
    try:
        t0 = time.monotonic()
        results = dict(zip(answers, evaluate_answers(ADD, list(answers.values()), cfg)))
        yield {"results": results, "early": early, "late": late, "repo_db": repo_db, "marker": f"kbmark{token}",
               "returned_after_s": time.monotonic() - t0, "write_dirs": write_dirs, "existing": existing,
               "listener": listener, "abstract": abstract, "shm_key": shm_key}
    finally:
        for p in (early, repo_db, existing):
            p.unlink(missing_ok=True)
        for d in write_dirs:
            for p in Path(d).glob("kb_escape_*"):
                p.unlink(missing_ok=True)
        listener.close()
        abstract.close()
        for pid in processes_with(f"kbmark{token}"):  # only on failure: a survivor of this test
            os.kill(pid, 9)


def test_no_process_started_by_an_answer_outlives_it(sandboxed: dict) -> None:
    """An unaudited spawn (a new session, outside the child's process group) dies with the answer's PID namespace,
    and the write it made at once into the repository failed (read-only)."""
    res = sandboxed["results"]["spawn"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    deadline = time.monotonic() + 3.0
    while processes_with(sandboxed["marker"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(sandboxed["marker"]) == [], "a process the answer started outlived its evaluation"
    assert not sandboxed["early"].exists(), "a process the answer started wrote into the repository"
    assert not sandboxed["late"].exists()


def test_the_repository_is_read_only(sandboxed: dict) -> None:
    res = sandboxed["results"]["write_repo"]
    assert not sandboxed["repo_db"].exists(), "the answer created a file in the repository"
    assert res.status == Status.CORRECT.value, (res.status, res.error)


def test_the_private_tmp_has_a_file_count_cap(sandboxed: dict) -> None:
    res = sandboxed["results"]["many_files"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)  # stopped by the cap, and still judged
    assert res.protocol["isolation"]["private_tmp"]["inodes"] == 32768


def test_the_evaluator_is_not_visible_in_proc(sandboxed: dict) -> None:
    res = sandboxed["results"]["see_evaluator"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    assert res.protocol["isolation"]["pid_namespace"] is True


def test_no_write_outside_the_private_tmp_through_code_the_monitor_does_not_see(sandboxed: dict) -> None:
    """torch.from_file(shared=True), UntypedStorage.from_file, torch's C++ file writer, sqlite3, mkfifo, a shell
    and a nested user + mount namespace, into the repository, the store, /tmp, /var/tmp and /dev/shm, and an existing
    repository file overwritten through a shared mapping: every one fails (the read-only root), checked on the host
    too."""
    res = sandboxed["results"]["write_c_level"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    assert not [p for d in sandboxed["write_dirs"] for p in Path(d).glob("kb_escape_*")]
    assert not list(Path(tempfile.gettempdir()).glob("kbeval-*/kb_escape_*"))  # beside the other answers' folders
    assert sandboxed["existing"].read_text() == "unchanged\n"


def test_no_process_outlives_the_evaluation_by_double_fork_setsid_nohup_or_a_nested_pid_namespace(
        sandboxed: dict) -> None:
    res = sandboxed["results"]["double_fork"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    deadline = time.monotonic() + 3.0
    while processes_with(sandboxed["marker"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(sandboxed["marker"]) == [], "a process the answer started outlived its evaluation"


@pytest.mark.parametrize("tool", SANDBOX_TOOLS)
def test_every_process_of_an_answer_has_exited_when_its_child_is_killed(tool: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not merely soon after: the moment the kill returns, so the next answer never runs beside a dying process that
    still holds its memory (seen on an H200: a multi-GB problem's next answer out of device memory while the last
    one's process still held tens of GiB). The answer's process and one it started each hold 2 GiB on the test's
    device (KB_TEST_DEVICE): a CUDA context that large takes a while to tear down after the sandbox's wrapper is
    reaped; on the CPU the kernel frees it quickly, and the check mostly holds either way."""
    if not SANDBOX_LEVEL.sandboxed:
        pytest.skip("no OS sandbox on this host: " + "; ".join(SANDBOX_LEVEL.warnings))
    from workflow_scripts.evaluation.sandbox import ChildProcess, exited

    still_running: list[list[int]] = []  # per kill of a running child: its processes not yet exited afterwards
    kill = ChildProcess.kill

    def recording_kill(self: ChildProcess) -> None:
        running = self.proc is not None and self.proc.poll() is None
        tree = [self.proc.pid] + [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)] if running else []
        kill(self)
        if running:
            still_running.append([pid for pid in tree if not exited(pid)])

    monkeypatch.setattr(ChildProcess, "kill", recording_kill)
    cfg = EvalConfig(device=DEVICE, time_answer=False, run_static=False, isolation=tool, memory_limit_gib=8.0)
    result = evaluate_answer(ADD, ANS / "sandbox" / "big_memory_at_exit.py", cfg)
    assert result.status == Status.CORRECT.value, (result.status, result.error)
    assert still_running and all(pids == [] for pids in still_running), still_running


def test_a_child_process_group_is_signalled_once(child_pids: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluator ends each answer's process in several places (after its verdict, on the slot's close, on the
    evaluator's close); only the first signals its process group: once the group has exited its id may be a new
    process's."""
    signalled: list[int] = []
    killpg = os.killpg

    def recording_killpg(pgid: int, sig: int) -> None:
        signalled.append(pgid)
        killpg(pgid, sig)

    monkeypatch.setattr(sandbox.os, "killpg", recording_killpg)
    cfg = EvalConfig(device="cpu", time_answer=False, run_static=False, prestart=2)
    results = evaluate_answers(ADD, [ANS / "honest/add_triton.py", ANS / "failures/forward_raises.py"], cfg)
    assert [r.status for r in results] == [Status.CORRECT.value, Status.RUNTIME_ERROR.value]
    assert len(child_pids) == 2 and sorted(signalled) == sorted(child_pids)


def test_the_evaluator_cannot_be_signalled_traced_read_or_reached_over_sockets(sandboxed: dict) -> None:
    """From an unmonitored interpreter it starts, the answer cannot signal the evaluator or its process group, attach
    to it, read its memory, connect to its TCP or abstract unix sockets, nor leave a SysV segment in the host's IPC
    namespace."""
    res = sandboxed["results"]["reach_evaluator"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    sandboxed["listener"].settimeout(0.1)
    with pytest.raises(TimeoutError):
        sandboxed["listener"].accept()
    segments = Path("/proc/sysvipc/shm").read_text().split("\n")[1:]
    assert not [line for line in segments if line.split() and int(line.split()[0]) == sandboxed["shm_key"]], (
        "the answer's SysV segment outlived it in the host's IPC namespace")


def test_the_problems_sources_are_hidden_from_the_answer(sandboxed: dict) -> None:
    """The problem's folder is empty in the answer's sandbox (recorded in the result), so the one file that rebuilds
    the reference from the problem's source on disk and passed every problem (correct before) gets nothing."""
    res = sandboxed["results"]["find_problem"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    assert hidden_by(res.protocol["hidden_from_answer"], ADD.parent)
    generic = sandboxed["results"]["reference_from_disk"]
    assert generic.status != Status.CORRECT.value and not generic.correct, generic.status


def test_no_writable_host_mount_or_host_directory_descriptor(sandboxed: dict) -> None:
    res = sandboxed["results"]["writable_mounts"]
    assert res.status == Status.CORRECT.value, (res.status, res.error)


@pytest.mark.parametrize("kind", ["nested", "huge_size", "huge_number"])
def test_a_hostile_frame_is_the_answers_failure(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer that writes its own frames sends a deeply nested header, a 4 GiB header-length claim or a
    number no float holds: the answer crashes (result_channel_forged); the evaluator neither raises nor allocates
    what the frame claims."""
    monkeypatch.setattr(sandbox, "CHILD_MODULE", "tests.fixtures.forging_child")
    ans = tmp_path / f"{kind}.py"
    ans.write_text(kind + "\n")
    tracemalloc.start()
    try:
        res = evaluate_answer(ADD, ans, EvalConfig(device="cpu", time_answer=False, run_static=False, timeout_s=60))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.status in (Status.CRASH.value, Status.REJECTED_RUNTIME.value), (res.status, res.error)
    assert "result_channel_forged" in res.flags and "result channel" in res.error
    assert peak < 64 << 20, f"the evaluator allocated {peak >> 20} MiB for a hostile frame"


def test_a_setup_error_sent_while_the_answer_loads_is_the_answers_failure(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer that writes its own frames and reports a harness setup error while its module loads gets load_error;
    the evaluator no longer raises InfrastructureError (exit non-zero, no result for any answer)."""
    monkeypatch.setattr(sandbox, "CHILD_MODULE", "tests.fixtures.forging_child")
    ans = tmp_path / "setup_error.py"
    ans.write_text("setup_error\n")
    res = evaluate_answer(ADD, ans, EvalConfig(device="cpu", time_answer=False, run_static=False, timeout_s=60))
    assert res.status == Status.LOAD_ERROR.value and "while the answer was loading" in res.error, (res.status,
                                                                                                     res.error)


def test_an_answer_that_shrinks_its_areas_still_gets_a_verdict(tmp_path: Path) -> None:
    """The answer truncates the memory areas it was handed; before their sizes were sealed, the evaluator's next
    write into the secret inputs' area was a SIGBUS that killed it (no result at all)."""
    res = evaluate_answer(ADD, ANS / "sandbox/truncate_areas.py",
                          EvalConfig(device="cpu", time_answer=False, run_static=False))
    assert res.status == Status.CORRECT.value, (res.status, res.error)
    assert [t["kind"] for t in res.trials] == ["seeded"] * 5 + ["hidden"]
