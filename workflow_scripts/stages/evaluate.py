"""Rule evaluate: every configured model's answer to one problem, judged and timed against one trusted reference side
for the problem (workflow_scripts.evaluation.answer.evaluate_answers; docs/evaluation.md).

Each answer's result is its own store object, keyed by the problem's and the code's sha256 (not the model's name) and
the run settings: two models with the same answer are evaluated once, a job whose answers are all stored runs
nothing (it takes no lock, reads no other table and never imports the evaluator), and when one completion changes
only that answer is evaluated again. Answers without code (no completion, no code block) get their failed verdict
without running anything. GPU jobs lock one specific GPU themselves; Snakemake only bounds how many run at once.

The rule runs one job per (model, problem), so that targeting one model plans only that model's branch. The job
still judges every model's answer to its problem at once: ``<results>/models.json`` (rule model_names) names the
configured models, and their answer tables beside this model's that are already written are evaluated along and
stored, without writing their readable files, which their own jobs then find in the store. Each answer has its own
lock (``_answer_locks``): a job waits for its own answers' locks, so it finds them stored when another job judged them
along (it waits for that job's end), and takes a companion only when no other job holds that companion's lock, so two
jobs of one problem whose answers differ judge side by side.
The list is read, not passed: a parameter naming the models changed every evaluate job's parameters when a model was
added, and Snakemake ran them all again. A problem's reference side is built
once whenever the answers of several models are ready before its first job runs; the rules that write completions
and answer tables run before any evaluation (priority ``ANSWERS_FIRST``, rules/common.smk), so they usually are.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_scripts.core.hashing import sha256_file, sha256_text
from workflow_scripts.core.io import locked_file
from workflow_scripts.core.layout import ResultsLayout
from workflow_scripts.core.params import parse_params, parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version
from workflow_scripts.evaluation.config import EvalConfig
from workflow_scripts.evaluation.jobs import (
    environment_key, failed_without_running, key_params, load_answer, run_settings, store_measurement,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from workflow_scripts.evaluation.records import EvalResult

STAGE = "evaluate"
# The log line that says how long the job waited for its own answers' locks (another job judging them along), in
# seconds: time its evaluation slot stood idle (rules/common.smk evaluation_priority keeps it short).
ANSWER_LOCK_WAIT = "answer locks waited s"
# The log line of a job whose answers were all in the store as it began: it took no lock and read no other table.
ALL_STORED = "every answer already stored"


def logged_lock_waits(log_text: str) -> list[float]:
    """The waits for its answers' locks an evaluate job's log records (its ``ANSWER_LOCK_WAIT`` lines), in seconds."""
    return [float(seconds) for seconds in
            re.findall(rf"^{re.escape(ANSWER_LOCK_WAIT)}: (\d+\.\d+)$", log_text, re.MULTILINE)]


@dataclass(frozen=True)
class Params:
    level: int
    problem_id: int
    evaluation: dict[str, Any]  # config["evaluation"]


@dataclass
class Answer:
    """One model's answer to the problem and the store key its result lives under."""

    model: str
    row: dict[str, Any]
    out: Path
    config: EvalConfig
    inputs: dict[str, str]

    @property
    def key(self) -> tuple[str, str]:
        return repr(sorted(key_params(self.config).items())), repr(sorted(self.inputs.items()))


def _model_paths(values: list[str], flag: str) -> dict[str, Path]:
    pairs = {}
    for value in values:
        model, sep, path = value.partition("=")
        if not sep or not model or not path:
            raise SystemExit(f"error: {flag} takes MODEL=PATH, got {value!r}")
        pairs[model] = Path(path)
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.evaluate", Params)
    parser.add_argument("--answers", nargs="+", required=True, metavar="MODEL=PATH",
                        help="each model's <results>/answers/<model>.parquet")
    parser.add_argument("--out", nargs="+", required=True, metavar="MODEL=PATH",
                        help="each model's <results>/evaluations/<model>/level<L>_<id>.json")
    parser.add_argument("--problem", type=Path, required=True, help="the problem's source file")
    parser.add_argument("--environment", type=Path, required=True, help="<results>/environment/<device>.json")
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True,
                        help="the configuration's results folder (hidden from answers, as the store is: the prompts "
                             "there hold every problem's reference code)")
    parser.add_argument("--lock-dir", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    answers_files, outputs = _model_paths(args.answers, "--answers"), _model_paths(args.out, "--out")
    if set(answers_files) != set(outputs):
        raise SystemExit(f"error: --answers names models {sorted(answers_files)}, --out names {sorted(outputs)}")
    config = parse_params(EvalConfig, run_settings(params.evaluation, args.lock_dir), source="--params evaluation")
    config = dataclasses.replace(config, hidden_paths=[str(args.results), str(args.store)])
    problem_sha = sha256_file(args.problem)
    environment = environment_key(args.environment)
    store = Store(args.store)
    for path in answers_files.values():
        store.check_result(path)  # an edited answers table stops the job, naming it
    answers = [_answer(model, load_answer(path, params.level, params.problem_id), outputs[model], config,
                       problem_sha, environment) for model, path in answers_files.items()]
    code = code_version(__spec__.name)  # once: it hashes the source of every module the stage uses

    def is_stored(answer: Answer) -> bool:
        return store.holds(STAGE, code, key_params(answer.config), answer.inputs)

    if all(is_stored(answer) for answer in answers):
        # Judged already (along with another model's job, or by an earlier run): no other model's table to read, no
        # lock to wait for. Most of a study's evaluate jobs end here (one job per problem judges its answers).
        print(f"{ALL_STORED}: no answer to judge, no lock taken", flush=True)
        _store(answers, [], {}, args, code)
        return 0
    find_companions = functools.partial(_companions, store, is_stored, ResultsLayout(str(args.results)),
                                        answers_files, params, config, problem_sha, environment)
    with _answer_locks(Path(config.lock_dir), params, answers, find_companions, is_stored) as companions:
        _store(answers, companions, _evaluate_missing(answers + companions, args, config, code), args, code)
    return 0


@contextlib.contextmanager
def _answer_locks(lock_dir: Path, params: Params, own: list[Answer], find_companions: Callable[[], list[Answer]],
                  is_stored: Callable[[Answer], bool]) -> Iterator[list[Answer]]:
    """Hold the locks of the job's own answers, waiting for them, then those of the companions no other job holds,
    without waiting; yields the companions held, all released when the job has stored its results. A job that waited
    finds in the store what the holder judged (it waits for the holder's whole job, as it did for the problem's lock
    before). Two jobs of one problem whose answers differ judge side by side: a model whose table came after a
    problem's first job began no longer idles its slot until that job ends (s34: 206 s of slots in all)."""
    with contextlib.ExitStack() as held:
        own_paths = _wait_for_own_locks(held, lock_dir, params, own)
        # Looked for after the wait: tables written meanwhile count, and what the holder judged is stored by now.
        yield _take_free_companions(held, lock_dir, params, own_paths, find_companions(), is_stored)


def _wait_for_own_locks(held: contextlib.ExitStack, lock_dir: Path, params: Params, own: list[Answer]) -> set[Path]:
    """Wait for the locks of the job's own answers, in one order (two jobs never wait on each other: a job waits only
    here, before it holds any companion's lock), and log how long the job waited."""
    waiting_since = time.monotonic()
    paths = sorted({_answer_lock_path(lock_dir, params, answer) for answer in own})
    for path in paths:
        held.enter_context(locked_file(path))
    print(f"{ANSWER_LOCK_WAIT}: {time.monotonic() - waiting_since:.2f}", flush=True)
    return set(paths)


def _take_free_companions(held: contextlib.ExitStack, lock_dir: Path, params: Params, own_paths: set[Path],
                          companions: list[Answer], is_stored: Callable[[Answer], bool]) -> list[Answer]:
    """The companions whose locks this job holds now (held until ``held`` closes): those equal to an answer it holds,
    and those no other job holds and the store still lacks (one stored just before is let go at once, so its own
    job, waiting for it, ends)."""
    taken, held_paths = [], set(own_paths)
    for answer in companions:
        path = _answer_lock_path(lock_dir, params, answer)
        if path not in held_paths:
            with contextlib.ExitStack() as attempt:
                if not attempt.enter_context(locked_file(path, wait=False)):
                    print(f"note: {answer.model}'s answer is being judged by another job; not judged along", flush=True)
                    continue
                if is_stored(answer):
                    continue
                held.enter_context(attempt.pop_all())
            held_paths.add(path)
        taken.append(answer)
    return taken


def _answer_lock_path(lock_dir: Path, params: Params, answer: Answer) -> Path:
    """The lock of one distinct answer to the problem on this host, named by a hash of ``Answer.key`` (its run
    settings and inputs: two models' equal answers share it). Waiting is not part of any answer's time: the
    evaluation starts after it."""
    return lock_dir / "answers" / f"level{params.level}_{params.problem_id}" / f"{sha256_text(repr(answer.key))}.lock"


def _companions(store: Store, is_stored: Callable[[Answer], bool], layout: ResultsLayout, own: dict[str, Path],
                params: Params, config: EvalConfig, problem_sha: str, environment: str) -> list[Answer]:
    """The other configured models' answers to the problem whose tables are written and whose results the store does
    not hold yet, to be judged along."""
    companions = []
    for model in _configured_models(Path(layout.model_names())):
        row = None if model in own else _ready_answer(store, Path(layout.answers(model)), params)
        if row is not None:
            companions.append(_answer(model, row, Path(f"{model}.json"), config, problem_sha, environment))
    return [answer for answer in companions if not is_stored(answer)]


def _store(answers: list[Answer], companions: list[Answer], results: dict[Any, dict], args: argparse.Namespace,
           code: str) -> None:
    """Each of the job's answers through the store (computed now, or reused), each companion judged now stored for
    its own job."""
    for answer in answers:
        computed = store_measurement(args.store, answer.out, STAGE, code, answer.config, answer.inputs,
                                     args.environment, lambda answer=answer: results[answer.key])
        print(f"{answer.model}: evaluation {'computed' if computed else 'reused from the store'}: {answer.out}"
              + ("" if computed else f" (to evaluate it anew: python -m workflow_scripts forget {answer.out})"))
    for answer in companions:
        if answer.key in results:
            store_measurement(args.store, answer.out, STAGE, code, answer.config, answer.inputs,
                              args.environment, lambda answer=answer: results[answer.key], materialize=False)
            print(f"{answer.model}: evaluated along, stored for its own job")


def _configured_models(names_file: Path) -> list[str]:
    """The configured models (rule model_names), whose answers are judged along; none where the list is not written
    (a run that targets one model's branch): this job then judges its own."""
    try:
        return [str(name) for name in json.loads(names_file.read_text(encoding="utf-8"))]
    except FileNotFoundError:
        return []


def _ready_answer(store: Store, path: Path, params: Params) -> dict[str, Any] | None:
    """A companion's answer when its table is already written, readable and as the store wrote it, else None (its
    own job evaluates it, or refuses it)."""
    if not path.is_file():
        return None
    try:
        store.check_result(path)
        return load_answer(path, params.level, params.problem_id)
    except (SystemExit, OSError, ValueError) as e:  # e.g. a table still being written, edited, or without this problem
        print(f"note: {path} not evaluated along: {e}", file=sys.stderr)
        return None


def _answer(model: str, row: dict[str, Any], out: Path, config: EvalConfig, problem_sha: str,
            environment: str) -> Answer:
    if not row["require_triton"]:
        config = replace(config, require_triton=False)
    inputs = {
        "problem": problem_sha,
        # Without code, why there is none determines the verdict (and its message, which may name the file).
        "code": row["code_sha256"] or f"none:{row['extract_status']}:{row['completion_status']}"
        + (f":{sha256_text(row['completion_error'])}" if row.get("completion_error") else ""),
        "environment": environment,
    }
    return Answer(model, row, out, config, inputs)


def _evaluate_missing(answers: list[Answer], args: argparse.Namespace, config: EvalConfig,
                      code: str) -> dict[Any, dict]:
    """Results for the distinct answers the store does not hold yet: those with code through one trusted reference
    side (all at once: each answer's own ``require_triton``, the one setting that differs between models, goes
    with it), those without code by their failed verdict."""
    store = Store(args.store)
    missing: dict[Any, Answer] = {}
    for answer in answers:
        if answer.key not in missing and not store.holds(STAGE, code, key_params(answer.config), answer.inputs):
            missing[answer.key] = answer
    results: dict[Any, dict] = {}
    runnable: dict[Any, Answer] = {}
    for key, answer in missing.items():
        if answer.row["extract_status"] != "ok":
            results[key] = failed_without_running(answer.row, config.device)
            # The progress line of an answer with nothing to run: every answer a job records shows in its log.
            print(f"recorded {answer.model} without running it: {results[key]['status']}", flush=True)
        else:
            runnable[key] = answer
    if not runnable:
        return results
    # Imported only here: a job whose answers are stored never loads the evaluator (sandbox, GPU lock, reference side).
    from workflow_scripts.evaluation.answer import evaluate_answers

    # The answer files live outside the children's working directories, which copy what they load.
    with tempfile.TemporaryDirectory(prefix="answers-") as tmp:
        files = []
        for number, answer in enumerate(runnable.values()):
            files.append(Path(tmp) / f"answer{number}" / "answer.py")
            files[-1].parent.mkdir()
            files[-1].write_text(answer.row["code"], encoding="utf-8")
        models = [answer.model for answer in runnable.values()]
        started, judged_so_far = time.monotonic(), []

        def progress(i: int, result: EvalResult) -> None:
            # A line as each answer is judged: a long job's log shows where it is.
            judged_so_far.append(i)
            print(f"judged {models[i]} ({len(judged_so_far)} of {len(models)}): {result.status}, "
                  f"{time.monotonic() - started:.1f} s into the job's evaluations", flush=True)

        judged = evaluate_answers(args.problem, files, config,
                                  require_triton=[answer.config.require_triton for answer in runnable.values()],
                                  on_result=progress)
        results.update((key, result.to_dict()) for key, result in zip(runnable, judged, strict=True))
    return results


if __name__ == "__main__":
    raise SystemExit(main())
