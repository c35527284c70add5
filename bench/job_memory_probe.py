"""What one evaluate or baseline job holds in memory on a GPU host, against what it declares (issue 34, done-when 4:
the jobs a host admits at the study's shape follow the declared memory, whose per-process terms, ``CHILD_PROCESS_GIB``
and ``CUDA_CONTEXT_GIB`` in workflow_scripts/evaluation/resources.py, were never measured; on an 80 GB H100 the
whole-DAG bench's jobs declared 71-78 of its 79 GiB for most of the run, s38).

For each problem, one evaluation as an evaluate job runs it (``evaluate_answers``, the CUDA defaults: timed, the
default batch of answer processes started ahead) on ``--answers`` copies of the problem's reference as answers (the
calibration answer), sampled every ``--every`` seconds:

* host: the machine's memory in use (``total - available``: anonymous memory and the answers' shared areas, which
  page cache would hide) above what it was before the evaluation, and the job's process tree's summed resident
  memory (each area counted in every process that maps it); the most answer processes alive at once (and, apart, the
  reference side's input builders of a multi-GB problem), and the largest one's resident memory;
* GPU: the device's memory in use above what it was before (NVML), and per process where NVML names our processes.

Beside each: what the job declares for that many answers (``resources.evaluate_memory``: ``mem_mb``, ``gpu_mem_gb``).
With ``--job baseline``, one baseline job instead (``measure_baselines``: eager, then torch.compile max-autotune in
its child, a fresh compile cache), beside ``resources.baseline_memory``; its child counts as a child.
One JSON line per problem in ``--out``, written as each ends.

    python3 bench/job_memory_probe.py --suite .kb --problems L2_14 L1_19 --answers 8 --out $OUT/job_memory.jsonl
    python3 bench/job_memory_probe.py --job baseline --suite .kb --problems L2_14 L2_4 --out $OUT/job_memory.jsonl
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_problem_worker import reference_answer  # noqa: E402
from bench.gpu_watchdog import append_record, problem_file  # noqa: E402
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answers  # noqa: E402
from workflow_scripts.evaluation.baseline import measure_baselines  # noqa: E402
from workflow_scripts.evaluation.config import BaselineConfig  # noqa: E402
from workflow_scripts.evaluation.memory_plan import GIB  # noqa: E402
from workflow_scripts.evaluation.resources import Memory, baseline_memory, evaluate_memory, sizes_of  # noqa: E402
from workflow_scripts.suite.sizes import problem_sizes  # noqa: E402

# The reference side's input builders (reference._start_builders, multi-GB problems): children of the job's process
# beside its answers' sandboxes, told apart by the module they run.
BUILDER_MODULE = "workflow_scripts.evaluation.reference_inputs"


@dataclass
class Peaks:
    """The largest values sampled during one evaluation (bytes, or a count)."""

    host_in_use: int = 0
    tree_resident: int = 0
    trusted_resident: int = 0
    child_resident: int = 0
    answers_alive: int = 0
    builders_alive: int = 0
    gpu_in_use: int = 0
    gpu_by_process: dict[str, int] = field(default_factory=dict)
    samples: int = 0


class Sampler:
    """Samples the host and the GPU until stopped, keeping the peaks above the levels found at its start."""

    def __init__(self, every_s: float, gpu: bool) -> None:
        self.nvml, self.every_s = None, every_s
        if gpu:
            import pynvml

            pynvml.nvmlInit()
            self.nvml, self.device = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.me = psutil.Process()
        self.host_before, self.gpu_before = self._host_in_use(), self._gpu_in_use()
        self.peaks, self._stop = Peaks(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _host_in_use(self) -> int:
        memory = psutil.virtual_memory()
        return memory.total - memory.available

    def _gpu_in_use(self) -> int:
        return 0 if self.nvml is None else int(self.nvml.nvmlDeviceGetMemoryInfo(self.device).used)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def _sample(self) -> None:
        peaks = self.peaks
        peaks.samples += 1
        peaks.host_in_use = max(peaks.host_in_use, self._host_in_use() - self.host_before)
        peaks.gpu_in_use = max(peaks.gpu_in_use, self._gpu_in_use() - self.gpu_before)
        resident, builders, alive = {}, set(), []
        for process in [self.me, *self.me.children(recursive=True)]:
            try:
                resident[process.pid] = process.memory_info().rss
                if BUILDER_MODULE in process.cmdline():
                    builders.add(process.pid)
                if process.ppid() == self.me.pid:
                    alive.append(process.pid)  # a direct child: an answer's sandbox or a builder
            except psutil.Error:
                continue  # ended between the listing and the read
        peaks.tree_resident = max(peaks.tree_resident, sum(resident.values()))
        peaks.trusted_resident = max(peaks.trusted_resident, resident.get(self.me.pid, 0))
        child_rss = [rss for pid, rss in resident.items() if pid != self.me.pid and pid not in builders]
        peaks.child_resident = max([peaks.child_resident, *child_rss])
        peaks.answers_alive = max(peaks.answers_alive, sum(pid not in builders for pid in alive))
        peaks.builders_alive = max(peaks.builders_alive, len(builders))
        if self.nvml is None:
            return
        try:
            running = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.device)
        except self.nvml.NVMLError:
            return
        for process in running:
            # A child: an answer process, or a baseline's eager or compile child.
            name = "trusted" if process.pid == self.me.pid else ("child" if process.pid in resident else "unmatched")
            used = int(process.usedGpuMemory or 0)
            peaks.gpu_by_process[name] = max(peaks.gpu_by_process.get(name, 0), used)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def probe(problem: Path, answers: int, every_s: float, device: str, tmp: Path) -> dict:
    """One evaluation of ``answers`` reference answers to ``problem``: its peaks beside what its job declares."""
    paths = [reference_answer(problem, tmp, f"_{n}") for n in range(answers)]
    config = EvalConfig(device=device, require_triton=False, lock_dir=str(tmp / "locks"))
    started = time.monotonic()
    with Sampler(every_s, gpu=device == "cuda") as sampler:
        results = evaluate_answers(problem, paths, config)
    declared = evaluate_memory(sizes_of(problem_sizes(problem)), {"device": device}, answers)
    return {"job": "evaluate", **_record(problem, time.monotonic() - started, declared, sampler.peaks),
            "answers": answers, "statuses": sorted({result.status for result in results}),
            "children_batch": results[0].phases_s.get("children_batch") if results else None,
            "answers_alive_at_most": sampler.peaks.answers_alive,
            "builders_alive_at_most": sampler.peaks.builders_alive}


def probe_baseline(problem: Path, every_s: float, device: str, tmp: Path) -> dict:
    """One baseline job on ``problem`` (a fresh compile cache: what a first run compiles): its peaks beside what its
    job declares."""
    config = BaselineConfig(device=device, lock_dir=str(tmp / "locks"), compile_cache=str(tmp / "compile-cache"))
    started = time.monotonic()
    with Sampler(every_s, gpu=device == "cuda") as sampler:
        result = measure_baselines(problem, config)
    declared = baseline_memory(sizes_of(problem_sizes(problem)), {"device": device})
    return {"job": "baseline", **_record(problem, time.monotonic() - started, declared, sampler.peaks),
            "statuses": [result.eager_status, result.compile_status]}


def _record(problem: Path, wall_s: float, declared: Memory, peaks: Peaks) -> dict:
    """What both kinds of job record: the problem, the wall, the declared memory and the peaks (GiB)."""

    def gib(value: int) -> float:
        return round(value / GIB, 2)

    return {
        "problem": problem.name, "wall_s": round(wall_s, 1),
        "declared": {"mem_gib": round(declared.mem_mb * 1e6 / GIB, 2), "gpu_gib": declared.gpu_mem_gb},
        "measured_gib": {"host_in_use": gib(peaks.host_in_use), "tree_resident": gib(peaks.tree_resident),
                         "trusted_resident": gib(peaks.trusted_resident),
                         "largest_child_resident": gib(peaks.child_resident),
                         "gpu_in_use": gib(peaks.gpu_in_use),
                         "gpu_by_process": {k: gib(v) for k, v in peaks.gpu_by_process.items()}},
        "samples": peaks.samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", choices=("evaluate", "baseline"), default="evaluate")
    parser.add_argument("--suite", type=Path, required=True, help="a KernelBench checkout (e.g. .kb)")
    parser.add_argument("--problems", nargs="+", required=True, help="keys such as L2_14 L1_19")
    parser.add_argument("--answers", type=int, default=8, help="evaluate: the reference's copies judged")
    parser.add_argument("--every", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a check of the probe itself")
    parser.add_argument("--out", type=Path, required=True, help="a JSON-lines file (appended)")
    args = parser.parse_args()
    for key in args.problems:
        with tempfile.TemporaryDirectory(prefix="job-memory-") as tmp:
            problem = problem_file(args.suite, key)
            record = (probe_baseline(problem, args.every, args.device, Path(tmp)) if args.job == "baseline"
                      else probe(problem, args.answers, args.every, args.device, Path(tmp)))
        append_record(args.out, record)


if __name__ == "__main__":
    main()
