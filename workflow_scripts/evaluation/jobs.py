"""What a pipeline job adds around an evaluation: the answer's row, the run settings from the workflow config,
where the job may run, the verdict of an answer without code, and the check that a timing was measured in the
environment it is stored under. The stages evaluate, baseline and environment are thin CLIs over this."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq

from workflow_scripts.core.io import write_json
from workflow_scripts.core.statuses import Status
from workflow_scripts.core.store import Store
from workflow_scripts.evaluation.environment import fingerprint_key
from workflow_scripts.evaluation.gpu_lock import host_locks

# Config keys that say where or how a job runs but cannot change its result: never part of a key.
NOT_IN_KEY = {"gpu_index", "gpus", "lock_dir", "keep_workdir", "hidden_seeds", "timing_seed", "post_timing_seed",
              "hidden_paths", "compile_cache", "compile_threads", "yield_gpu", "compile_beside_timing", "prestart"}
# Config keys that are Snakemake resources, not run settings.
RESOURCE_KEYS = {"memory_gb"}


def load_answer(answers_parquet: Path, level: int, problem_id: int) -> dict[str, Any]:
    """One model's answer to one problem, a row of its answers table as plain Python values (read with pyarrow's
    ``ParquetFile``: ``read_table`` goes through ``pyarrow.dataset``, which imports pandas, a quarter of a second of
    every evaluate job that finds its result in the store)."""
    match = [row for row in pq.ParquetFile(answers_parquet).read().to_pylist()
             if row["level"] == level and row["problem_id"] == problem_id]
    if len(match) != 1:
        raise SystemExit(f"error: {answers_parquet} has {len(match)} rows for level {level} problem {problem_id}")
    # Parquet nulls come back as None; a float NaN (a null as pandas wrote it) too, so "no code" is never a value.
    return {k: None if isinstance(v, float) and v != v else v for k, v in match[0].items()}


def failed_without_running(answer: dict[str, Any], device: str) -> dict[str, Any]:
    """The verdict of an answer that has no code to run."""
    status = Status.MISSING_COMPLETION if answer["extract_status"] == "missing_completion" else Status.NO_CODE
    if status is Status.MISSING_COMPLETION:
        error = f"completion status: {answer['completion_status']}"
        if answer.get("completion_error"):  # e.g. the cached file that is not UTF-8 text
            error += f" ({answer['completion_error']})"
    else:
        error = "no fenced code block in the completion"
    return {
        "status": status.value, "compiled": False, "correct": False, "runtime_ms": None, "runtime_stats": None,
        "max_abs_diff": None, "triton_launches": None, "flags": [], "device": device, "timing_mode": None,
        "error": error,
    }


def key_params(config: Any) -> dict[str, Any]:
    """The run settings that determine a result (the store key's params)."""
    return {k: v for k, v in asdict(config).items() if k not in NOT_IN_KEY}


def run_settings(evaluation: dict[str, Any], lock_dir: Path) -> dict[str, Any]:
    """config["evaluation"] as run-configuration fields: resources dropped, the GPUs a job may lock (default:
    every visible one) and the lock folder added. Locks name GPUs as the host sees them: one folder per host, so
    cluster nodes never contend for "gpu0"."""
    settings = {k: v for k, v in evaluation.items() if k not in RESOURCE_KEYS}
    gpus = settings.pop("gpus", None)
    settings["gpus"] = [str(g) for g in gpus] if gpus else None
    settings["lock_dir"] = str(host_locks(lock_dir))
    return settings


def environment_key(environment_file: Path) -> str:
    return fingerprint_key(json.loads(Path(environment_file).read_text()))


def check_environment(result: dict[str, Any], expected_key: str, environment_file: Path) -> None:
    """A timing is stored under the recorded environment's key only if it was measured in that environment
    (e.g. a job that landed on another GPU type, or a changed driver, fails here instead of mixing timings)."""
    measured = result.get("fingerprint")
    if measured and fingerprint_key(measured) != expected_key:
        raise SystemExit(
            f"error: this job ran in another environment than {environment_file} records "
            f"(measured {fingerprint_key(measured)[:12]}, recorded {expected_key[:12]}); delete {environment_file} "
            "to re-key the timings for this environment, or run the job where that environment is"
        )


def store_measurement(store: Path, out: Path, stage: str, code: str, config: Any, inputs: dict[str, str],
                      environment_file: Path, measure: Callable[[], dict[str, Any]], materialize: bool = True) -> bool:
    """Reuse or compute one measured result (an evaluation, a baseline) under its store key: the stage, the
    stage's code version (``store.code_version`` of the stage module), the run settings that determine it and its
    inputs (``inputs["environment"]`` is the environment key). A result measured in another environment is refused,
    not stored. True if computed. ``materialize=False`` stores it without writing ``out`` (another job's result,
    computed along)."""

    def compute(paths: dict[str, Path]) -> None:
        result = measure()
        check_environment(result, inputs["environment"], environment_file)
        write_json(paths["json"], result)

    return Store(store).build({"json": out}, stage, code, key_params(config), inputs, compute,
                              materialize=materialize)
