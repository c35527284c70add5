"""An answer's result record: static analysis first (``static_verdict``: a rejection or a syntax error runs
nothing), then the status decided from what its session established (``judged``: ``protocol.decide_status``, an
evaluation without its done message never a pass, a tree over its memory cap a crash) and the record itself
(``result_record``, the JSON of docs/design.md "Evaluation")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.analysis.static import analyze_source
from workflow_scripts.core.records import TIMING_MODES, headline_ms
from workflow_scripts.core.statuses import Status, is_compiled, is_integrity_flag
from workflow_scripts.evaluation import cuda_lock, environment, freezer
from workflow_scripts.evaluation.channel import HARNESS_VERSION
from workflow_scripts.evaluation.config import EvalConfig
from workflow_scripts.evaluation.protocol import SEED_DERIVATION, decide_status
from workflow_scripts.evaluation.records import EvalResult
from workflow_scripts.evaluation.session import AnswerSession


def run_static_analysis(code: str) -> tuple[dict[str, Any] | None, list[str], str | None, str | None]:
    """(report, flags, reject_message, syntax_error) from ``analysis.static.analyze_source``."""
    try:
        report = analyze_source(code).to_dict()
    except Exception as e:  # noqa: BLE001 - an analyser bug on odd code must not cost the answer its verdict
        return None, [f"static_analysis_error:{type(e).__name__}"], None, None
    flags, reject = [], None
    for finding in report["findings"]:
        flags.append(f"static:{finding['code']}")
        if finding["severity"] == "reject" and reject is None:
            reject = f"static analysis: {finding['code']} (line {finding['line']}): {finding['message']}"
    syntax = report["syntax_error"] if not report["parses"] else None
    return report, flags, reject, syntax


@dataclass
class StaticVerdict:
    """What static analysis said of an answer before anything ran: its report, its flags, a rejection, a syntax
    error."""

    report: dict[str, Any] | None
    flags: list[str]
    reject: str | None
    syntax: str | None


def static_verdict(path: Path, cfg: EvalConfig) -> StaticVerdict:
    code = path.read_text(errors="replace")
    return StaticVerdict(*run_static_analysis(code)) if cfg.run_static else StaticVerdict(None, [], None, None)


def protocol_record(cfg: EvalConfig) -> dict[str, Any]:
    """The protocol an answer was judged under, as its result records it (the run's seeds are added per answer)."""
    return {
        "harness_version": HARNESS_VERSION,
        "kernelbench_seed": cfg.seed,
        "seed_derivation": SEED_DERIVATION,
        "correctness_trials": cfg.correctness_trials,
        "atol": cfg.atol,
        "rtol": cfg.rtol,
        "precision": "fp32",
        "no_grad": True,
        "eval_mode": False,
        "require_triton": cfg.require_triton,
        "timing": cfg.timing_protocol().to_dict() if cfg.time_answer else None,
        "paired_block": cfg.paired_block if cfg.time_answer else None,
        "paired_reference_block": cfg.paired_reference_block if cfg.time_answer and cfg.paired_block else None,
        "integer_inputs": cfg.integer_inputs,
        "reject_cheats": cfg.reject_cheats,
        "post_timing_check": cfg.post_timing_check,
        "hidden_trials": cfg.hidden_trials,
        "cpu_threads": cfg.cpu_threads if cfg.device == "cpu" else None,
        # Whether the job stepped aside between its GPU steps (evaluation.yield_gpu, resolved: "auto" on a driver
        # with the checkpoint lock says true): it changes what may run beside the answer's untimed steps, never its
        # timing, so it is recorded here and kept out of the store key.
        "yield_gpu": cfg.yields_gpu(),
        # Whether each stop of the answer's process tree also locks its CUDA work (freezer, cuda_lock: its submitted
        # kernels completed before anything is timed beside it, its further calls held): "cuda_lock" where the driver
        # has the calls (phases_s.answer_gpu_locks counts the locks taken, flags gpu_work_* the failures); "stop only"
        # where it has not, when a stopped answer's queued kernels may still run.
        "gpu_work_held": ("cuda_lock" if cuda_lock.available() else "stop only") if cfg.device == "cuda" else None,
        # While other jobs timed (a yielding job's steps aside): the answer's tree stopped whole ("stopped"), or its
        # CUDA processes locked and running on, everything else of it stopped ("locked_running":
        # evaluation.compile_beside_timing, where the driver can). None where the job never steps aside.
        "beside_others_timing": (freezer.beside_others_timing(cfg.beside_timing_hold())
                                 if cfg.device == "cuda" and cfg.yields_gpu() else None),
    }


def result_record(cfg: EvalConfig, status: Status, ev: AnswerSession | None, error: str | None, static: StaticVerdict,
            phases: dict[str, float]) -> EvalResult:
    protocol = protocol_record(cfg)
    flags = list(dict.fromkeys(static.flags + (ev.flags if ev else [])))
    stats = ev.runtime_stats if ev else None
    correct = status == Status.CORRECT
    diffs = [t.max_abs_diff for t in ev.trials] if ev else []
    max_diff = None if not diffs or any(d is None for d in diffs) else max(diffs)  # type: ignore[type-var]
    launches = sum(t.launches or 0 for t in ev.trials if t.kind != "post_timing") if ev and ev.trials else None
    tf32 = (ev.tf32 if ev and ev.tf32 else None) or environment.tf32_flags_for_mode(cfg.tf32)
    sm = sorted(ev.sm_clocks)[len(ev.sm_clocks) // 2] if ev and ev.sm_clocks else None
    fp = environment.fingerprint(cfg.device, ev.gpu if ev else cfg.gpu_index, cfg.tf32, tf32, sm)
    fp["key"] = environment.fingerprint_key(fp)
    if ev is not None:
        protocol.update({
            "trial_seeds": ev.trial_seeds, "hidden_seeds": ev.hidden_seeds, "timing_seed": ev.timing_seed,
            "post_timing_seed": ev.post_seed,
            # What confined the answer's process (isolation.Isolation); network_isolation kept for older readers.
            "isolation": ev.isolation.to_dict() if ev.isolation else None,
            # The folders the answer's process found empty but for what each kept (confinement.Cover; sandboxed
            # levels only): everything but the system, the interpreter, the harness and its own folder.
            "hidden_from_answer": ([c.to_dict() for c in ev.slot.child.covers]
                                   if ev.isolation and ev.isolation.sandboxed else []),
            "network_isolation": bool(ev.isolation and ev.isolation.network),
            # The cap on the host memory of the answer's process tree, and its peak use (memory_cap.py).
            "host_memory": ev.slot.child.cap.record() if ev.slot.child.cap else None,
            "gpu": ev.gpu, "done_received": ev.done_ok,
        })
    phases = dict(phases, **(ev.phases if ev else {}))
    return EvalResult(
        status=status.value, compiled=is_compiled(status), correct=correct,
        runtime_ms=headline_ms(stats) if correct else None, runtime_stats=stats,
        max_abs_diff=max_diff, triton_launches=launches, flags=flags,
        error=(error[:6000] if error else None), device=cfg.device, timing_mode=TIMING_MODES[cfg.device],
        tf32=tf32, fingerprint=fp, protocol=protocol, trials=[t.to_dict() for t in ev.trials] if ev else [],
        timing_raw=ev.timing_raw if ev else None, phases_s=phases, static=static.report,
        paired_reference=ev.paired_reference if (ev and correct) else None,
        problem_audit=ev.reference.audit.to_dict() if ev and ev.reference.audit else None,
    )


def judged(cfg: EvalConfig, ev: AnswerSession, static: StaticVerdict, phases: dict[str, float]) -> EvalResult:
    all_launched = all((t.launches or 0) > 0 for t in ev.trials if t.kind in ("seeded", "hidden"))
    cap = ev.slot.child.cap
    if cap is not None and cap.exceeded() and ev.failure is None:
        ev.failure = Status.CRASH  # the host-memory cap killed the tree, whenever that was
        ev.error = f"the child was {cap.describe()}" + (f"\n{ev.error}" if ev.error else "")
    status = decide_status(
        imported=ev.imported, pre_import_status=ev.pre_import_status, failure=ev.failure,
        trial_verdicts=[t.verdict for t in ev.trials], flags=ev.flags + static.flags,
        require_triton=cfg.require_triton, all_calls_launched=all_launched, reject_cheats=cfg.reject_cheats,
    )
    if status == Status.CORRECT and not ev.done_ok:
        status = Status.CRASH  # no end message: never a pass
        ev.error = ev.error or "no done message at the end"
    if status == Status.NO_TRITON_LAUNCH and not ev.error:
        ev.error = "require_triton: a correctness call launched no Triton kernel"
    if status == Status.REJECTED_RUNTIME:
        msg = "integrity check failed: " + ", ".join(f for f in ev.flags if is_integrity_flag(f))
        ev.error = msg + (f"\n{ev.error}" if ev.error else "")
    return result_record(cfg, status, ev, ev.error, static, phases)
