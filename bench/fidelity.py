"""Fidelity: the same answers judged by KernelBench's own harness and by our evaluator, verdict against verdict.

Per problem the answers are: the reference renamed to ModelNew; our honest Triton answer where
bench/kernelbench_answers/ours has one; and mutants of the renamed reference, a subclass ``ModelNew(_Base)`` whose
``forward`` calls the reference's and changes its output (so parameters and seeded weights stay the reference's):
syntax error, RuntimeError, an extra dimension, float64, +1e-2, a change well within atol=rtol=1e-4, NaN, and an
endless Python loop. Each answer is judged by KernelBench's ``eval_kernel_against_ref`` (bench/kernelbench_harness.py,
a fresh process per answer) and by ``evaluate_answers`` twice: our default config and the KernelBench-exact one, in
a worker process replaced after a problem whose verdicts show a CUDA error (``OursSide``).
One JSON line per answer in $OUT/fidelity.jsonl, written as soon as its three verdicts exist; a rerun skips the
answers already there (a cut-off device call resumes), and ``--budget-s`` stops starting problems after that long.

    python3 bench/fidelity.py --suite .kb --out $OUT          # on the device (about 80 answers on 32 problems)
    python3 bench/fidelity.py --summarize --out $OUT          # disagreements and counts, no GPU
    BENCH_DEVICE=cpu PYTHONPATH=. .venv/bin/python bench/fidelity.py --suite demo/suite --problems L1_1 L2_1 \\
        --timeout-s 20 --out /tmp/fid                         # smoke test of our side (Triton interpreter)

KernelBench's result as a category: compiled False -> compile_error; correctness True -> correct; ``runtime_error``
in its metadata -> runtime_error (a dtype mismatch lands here: its allclose raises); "shape mismatch" ->
shape_mismatch; "Output mismatch" -> value_mismatch (NaN included); no verdict printed (crash, or its ``None`` for a
lock-file error) -> harness_error, with the stderr tail; still running after --timeout-s -> killed_after_timeout
(it has no timeout of its own), which counts as compiled and incorrect. ``agree_*``: our (compiled, correct) equals
KernelBench's (compiled, correctness); null without a KernelBench verdict.

Timing: KernelBench's harness processes of one problem run --kb-parallel at a time (default 3) on the same GPU, never
beside our evaluator; its runtimes are then only indicative, and so is the ratio ours/KernelBench recorded for
answers correct in both. The timeout answers run last, all at once (nothing is timed then): KernelBench's harness on
each beside our evaluator, which uses timeout_s=--timeout-s in both configs. Cost on an H200, roughly: 6-10 s per
KernelBench harness process, a few seconds per answer and per problem for each of our configs, about 2 x 45 s per
timeout answer on our side (the per-call watchdog): with 80 answers expect more than one 10-minute device call;
pass --budget-s (e.g. 480) and rerun the same command to resume.
With --problems every mutant kind goes on every listed problem; the default list spreads them (MUTANT_PLAN).
BENCH_DEVICE=cpu runs our side only (KernelBench's harness needs CUDA): ``kb`` is null.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workflow_scripts.evaluation.answer import EvalConfig, EvalResult, evaluate_answers  # noqa: E402
from workflow_scripts.generation.replay import rename_reference_model  # noqa: E402
from bench import kernelbench_harness  # noqa: E402
from bench.gpu_problem_worker import ours_answer, reference_answer  # noqa: E402
from bench.gpu_watchdog import append_record, problem_file  # noqa: E402

DEVICE = os.environ.get("BENCH_DEVICE", "cuda")  # BENCH_DEVICE=cpu: a smoke run of our side
POISONED = "CUDA error"  # in a verdict's error: the trusted side's CUDA context may be unusable from here on
# Our Triton answers are written for KernelBench's problems; the demo suite reuses the keys for other problems.
KERNELBENCH_MARK = Path("KernelBench") / "level1" / "1_Square_matrix_multiplication_.py"

# The body of the mutant's forward(self, *args).
MUTANTS: dict[str, str] = {
    "syntax_error": "return super().forward(*args",  # unclosed parenthesis: the module does not parse
    "runtime_error": 'raise RuntimeError("fidelity mutant: forward raises")',
    "shape_mismatch": "return super().forward(*args).unsqueeze(0)",
    "dtype_mismatch": "return super().forward(*args).double()",
    "wrong_values": "return super().forward(*args) + 1e-2",
    # at most 2e-5 off, where atol + rtol * |out| >= 1e-4
    "within_tolerance": "out = super().forward(*args)\n        return out + 2e-5 * out.abs().clamp(max=1.0)",
    "nan_output": 'return super().forward(*args) * float("nan")',
    "timeout": "while True:\n            pass",
}

# Every input under 1 GiB. L2_66 and L2_83: dropout in training mode; L1_95: integer targets.
DEFAULT_PROBLEMS = [f"L1_{i}" for i in (1, 12, 40, 88, 95, 2, 10, 13, 16, 50, 54, 81, 58, 72)] + \
    [f"L2_{i}" for i in (1, 6, 11, 12, 18, 23, 40, 57, 66, 70, 71, 76, 82, 83, 99, 15, 29, 59)]
MUTANT_PLAN: dict[str, list[str]] = {  # the default list: each kind on cheap problems of both levels
    "syntax_error": ["L1_12", "L1_88", "L2_12", "L2_76", "L2_59"],
    "runtime_error": ["L1_1", "L1_95", "L2_70", "L2_99", "L2_6"],
    "shape_mismatch": ["L1_12", "L1_95", "L2_29", "L2_59", "L2_18"],
    "dtype_mismatch": ["L1_88", "L1_10", "L2_12", "L2_40", "L2_23"],
    "wrong_values": ["L1_2", "L1_13", "L2_6", "L2_76", "L2_66"],
    "within_tolerance": ["L1_1", "L1_16", "L2_71", "L2_29", "L2_83"],
    "nan_output": ["L1_40", "L1_58", "L2_59", "L2_99", "L2_18"],
    "timeout": ["L1_12", "L2_12"],
}


def kernelbench_exact_config() -> EvalConfig:
    # KernelBench's verdicts to the letter (config/kernelbench_exact.yaml): no Triton requirement, its 5 seeded
    # trials only, integer inputs cast to fp32, cheats flagged but not rejected, the answer timed alone.
    return EvalConfig.kernelbench_exact(device=DEVICE)


def mutant_source(renamed: str, kind: str) -> str:
    # Every ModelNew token, not only the class line: super(ModelNew, self) inside _Base would name the subclass.
    base = re.sub(r"\bModelNew\b", "_Base", renamed)
    return f"{base}\n\nclass ModelNew(_Base):\n    def forward(self, *args):\n        {MUTANTS[kind]}\n"


def build_answers(suite: Path, key: str, kinds: list[str], tmp: Path) -> dict[str, Path]:
    """The answers of the kinds asked for: "reference", "ours" (where there is one) and MUTANTS' kinds."""
    problem = problem_file(suite, key)
    answers = {"reference": reference_answer(problem, tmp)} if "reference" in kinds else {}
    ours = ours_answer(key, tmp) if "ours" in kinds and (suite / KERNELBENCH_MARK).exists() else None
    if ours:
        answers["ours"] = ours
    renamed = rename_reference_model(problem.read_text())
    for kind in (k for k in kinds if k in MUTANTS):
        answers[kind] = tmp / f"{key}_{kind}.py"
        answers[kind].write_text(mutant_source(renamed, kind))
    return answers


def kb_category(rec: dict) -> str:
    if rec.get("compiled") is False:
        return "compile_error"
    if rec.get("correctness"):
        return "correct"
    metadata = rec.get("metadata") or ""
    for needle, category in (("runtime_error", "runtime_error"), ("shape mismatch", "shape_mismatch"),
                             ("Output mismatch", "value_mismatch")):
        if needle in metadata:
            return category
    return "incorrect_other"


def run_kernelbench(kb_src: Path, problem: Path, answer: Path, timeout_s: float) -> dict | None:
    if DEVICE != "cuda":
        return None
    t0 = time.monotonic()
    try:
        rec = kernelbench_harness.run_in_process(kb_src, problem, answer, timeout_s)
    except subprocess.TimeoutExpired:
        return {"category": "killed_after_timeout", "compiled": None, "correctness": None, "runtime_ms": None,
                "wall_s": round(time.monotonic() - t0, 2)}
    wall = round(time.monotonic() - t0, 2)
    if rec.get("compiled") is None:
        return {"category": "harness_error", "compiled": None, "correctness": None, "runtime_ms": None,
                "returncode": rec.get("returncode"), "stderr": rec.get("error"), "wall_s": wall}
    return {"category": kb_category(rec), "compiled": rec["compiled"], "correctness": rec.get("correctness"),
            "runtime_ms": rec.get("runtime_ms"), "metadata": (rec.get("metadata") or "")[:400],
            "eval_s": round(rec.get("eval_s") or 0, 2), "wall_s": wall}


def kb_verdict(kb: dict | None) -> tuple[bool, bool] | None:
    if kb is None or kb["category"] == "harness_error":
        return None
    if kb["category"] == "killed_after_timeout":
        return (True, False)
    return (bool(kb["compiled"]), bool(kb["correctness"]))


def ours_record(r: EvalResult) -> dict:
    return {"status": r.status, "compiled": r.compiled, "correct": r.correct, "runtime_ms": r.runtime_ms,
            "flags": r.flags, "error": (r.error or "")[-300:],  # a traceback's tail names the error
            "paired_reference_ms": ((r.paired_reference or {}).get("stats") or {}).get("mean")}


def answer_record(key: str, kind: str, kb: dict | None, ours: dict[str, dict]) -> dict:
    record = {"problem": key, "level": int(key[1]), "kind": kind, "device": DEVICE, "kb": kb}
    verdict = kb_verdict(kb)
    for name, rec in ours.items():
        record[f"ours_{name}"] = rec
        record[f"agree_{name}"] = None if verdict is None else (rec["compiled"], rec["correct"]) == verdict
        both_timed = rec["correct"] and kb and kb["correctness"] and rec["runtime_ms"] and kb["runtime_ms"]
        record[f"runtime_ratio_{name}"] = rec["runtime_ms"] / kb["runtime_ms"] if both_timed else None
    return record


def judge(args: argparse.Namespace, groups: list[tuple[str, dict[str, Path]]], done: set[tuple[str, str]],
          timeout_s: float | None) -> None:
    """KernelBench's harness on each answer not yet recorded, then, problem by problem, our evaluator on all of a
    problem's answers, config by config; a line per answer once its verdicts exist."""
    groups = [(key, {k: p for k, p in answers.items() if (key, k) not in done}) for key, answers in groups]
    with ThreadPoolExecutor(args.kb_parallel) as pool:
        kb = {(key, kind): pool.submit(run_kernelbench, args.kb_src, problem_file(args.suite, key), path,
                                       args.timeout_s) for key, answers in groups for kind, path in answers.items()}
        if timeout_s is None:  # answers that get timed: ours never beside KernelBench's harness
            wait(kb.values())
        configs = {"default": EvalConfig(device=DEVICE), "exact": kernelbench_exact_config()}
        if timeout_s is not None:  # the endless loops: the default config's 1,200 s would only cost time
            configs = {name: dataclasses.replace(cfg, timeout_s=timeout_s) for name, cfg in configs.items()}
        ours_side = OursSide()
        try:
            for key, answers in (g for g in groups if g[1]):
                try:
                    results = {name: ours_side.evaluate(problem_file(args.suite, key), list(answers.values()), cfg)
                               for name, cfg in configs.items()}
                except Exception:  # noqa: BLE001 - nothing recorded for this problem: a rerun retries it
                    traceback.print_exc()
                    ours_side.close()  # the next problem in a fresh worker
                    continue
                for i, kind in enumerate(answers):
                    ours = {name: ours_record(rs[i]) for name, rs in results.items()}
                    append_record(args.out / "fidelity.jsonl",
                                  answer_record(key, kind, kb[(key, kind)].result(), ours))
        finally:
            ours_side.close()


class OursSide:
    """Our evaluator in a worker process of its own, as the pipeline judges each problem in a job of its own: a
    trusted-side CUDA error (a device assert poisons the process's context: s21's run judged every problem after
    L1/40 reference_error) costs that problem's verdicts, and the next problem starts in a fresh process. The worker
    is kept while nothing went wrong (a spawn and CUDA start cost seconds per problem)."""

    def __init__(self) -> None:
        self.pool: ProcessPoolExecutor | None = None

    def evaluate(self, problem: Path, answers: list[Path], cfg: EvalConfig) -> list[EvalResult]:
        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        results = self.pool.submit(evaluate_answers, problem, answers, cfg).result()
        if any(POISONED in (r.error or "") or "trusted_side_error" in r.flags for r in results):
            self.close()  # these verdicts stand as recorded; the next problem gets a clean CUDA context
        return results

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run(args: argparse.Namespace) -> None:
    keys = args.problems or DEFAULT_PROBLEMS
    plan = {key: list(MUTANTS) if args.problems else [k for k in MUTANTS if key in MUTANT_PLAN[k]] for key in keys}
    if args.kinds is not None:  # e.g. only the cheap kinds on a short device call
        plan = {key: [k for k in kinds if k in args.kinds] for key, kinds in plan.items()}
    done = {(r["problem"], r["kind"]) for r in read_records(args.out / "fidelity.jsonl")}
    t0 = time.monotonic()

    def over_budget(what: str) -> bool:
        if args.budget_s and time.monotonic() - t0 > args.budget_s:
            print(f"budget of {args.budget_s} s spent: stopping before {what}; rerun to resume", flush=True)
            return True
        return False

    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:  # the fast answers first, problem by problem
            if over_budget(key):
                return
            kinds = ["reference", "ours"] + [k for k in plan[key] if k != "timeout"]
            judge(args, [(key, build_answers(args.suite, key, kinds, Path(tmp)))], done, None)
        # The endless loops last, all at once: nothing is timed, and KernelBench's harness spins on the CPU beside
        # our evaluator, which then takes no longer than one of them.
        if not over_budget("the timeout answers"):
            judge(args, [(key, build_answers(args.suite, key, ["timeout"], Path(tmp)))
                         for key in keys if "timeout" in plan[key]], done, args.timeout_s)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarize(records: list[dict]) -> str:
    def kb_cat(r: dict) -> str:
        return r["kb"]["category"] if r["kb"] else "-"

    lines = ["## Disagreements", "", "| problem | kind | KernelBench | ours default | ours KernelBench-exact |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['problem']} | {r['kind']} | {kb_cat(r)} | {r['ours_default']['status']} | "
              f"{r['ours_exact']['status']} |" for r in records if False in (r["agree_default"], r["agree_exact"])]
    if len(lines) == 4:
        lines.append("| (none) | | | | |")
    problems = {r["problem"] for r in records}
    lines += ["", f"{len(records)} answers on {len(problems)} problems; "
              + "; ".join(f"level {lv}: {sum(r['level'] == lv for r in records)} answers on "
                          f"{len({p for p in problems if p.startswith(f'L{lv}_')})} problems" for lv in (1, 2)), ""]
    lines += ["| kind | answers | KernelBench | ours default | ours KernelBench-exact |", "|---|---:|---|---|---|"]
    for kind in dict.fromkeys(r["kind"] for r in records):
        rows = [r for r in records if r["kind"] == kind]

        def counts(values: list[str]) -> str:
            return ", ".join(f"{v} {n}" for v, n in Counter(values).most_common())

        lines.append(f"| {kind} | {len(rows)} | {counts([kb_cat(r) for r in rows])} | "
                     f"{counts([r['ours_default']['status'] for r in rows])} | "
                     f"{counts([r['ours_exact']['status'] for r in rows])} |")
    lines.append("")
    for name in ("default", "exact"):
        judged = [r[f"agree_{name}"] for r in records if r[f"agree_{name}"] is not None]
        off = [abs(r[f"runtime_ratio_{name}"] - 1) for r in records if r[f"runtime_ratio_{name}"] is not None]
        timing = (f"|ours/KernelBench runtime - 1| over {len(off)} answers correct in both: median "
                  f"{statistics.median(off):.2%}, p90 {quantile(off, 0.9):.2%}") if off else "no runtimes to compare"
        lines.append(f"- {name}: {sum(judged)} of {len(judged)} answers with a KernelBench verdict agree; {timing}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=ROOT / ".kb", help="a folder holding KernelBench/level<L>/")
    parser.add_argument("--problems", nargs="*", default=[], help="keys like L1_19 (every mutant kind on each)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kb-src", type=Path, default=ROOT / ".kb" / "kbsrc")
    parser.add_argument("--kb-parallel", type=int, default=3, help="KernelBench harness processes at a time")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="KernelBench harness limit per answer; our limit for the timeout answers")
    parser.add_argument("--budget-s", type=float, default=None, help="start no problem after this many seconds")
    parser.add_argument("--kinds", nargs="*", default=None, help="only these mutant kinds (the reference and our "
                        "answers always run)")
    parser.add_argument("--summarize", action="store_true", help="only summarise $OUT/fidelity.jsonl")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        run(args)
    print(summarize(read_records(args.out / "fidelity.jsonl")))


if __name__ == "__main__":
    main()
