"""Each problem's memory as Snakemake resources: its tensors sized on the meta device by the problems stage
(suite/sizes.py), the estimate of an evaluate and a baseline job (evaluation/resources.py), and the workflow
declaring it per job (rules/common.smk memory_resources)."""

from __future__ import annotations

import json
import math
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from workflow_scripts.devtools.workspace import copy_workflow
from workflow_scripts.evaluation.resources import (CHILD_PROCESS_GIB, FLOOR_MEM_MB, HOST_MEMORY_SHARE, JOBS_PER_GPU,
                                                   MAX_COMPILE_THREADS,
                                                   Memory, Sizes, baseline_memory, baseline_reserved_cores,
                                                   baseline_slots, compile_threads, evaluate_memory, forward_gib,
                                                   host_memory_bytes, host_resources, job_memory, problem_gpu_gib,
                                                   sizes_bound_gib, sizes_of, table_sizes, traced_bound_gib)
from workflow_scripts.suite.sizes import problem_sizes, with_sizes
from workflow_scripts.suite.kernelbench import index_suite

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "suite"
ANCHORS = ROOT.parent / "shared" / "anchors" / "kernelbench_scan_l1_l2_h200.jsonl"
MIB, GIB = 1 << 20, 1 << 30
CUDA = {"device": "cuda", "correctness_trials": 5, "memory_gb": 40}
CPU = {"device": "cpu", "correctness_trials": 5, "memory_gb": 40}

# A 6 GiB ReLU (level 1 problem 19's input size): the meta device sizes it without allocating a byte.
HUGE_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.rand(4096, 393216)]


def get_init_inputs():
    return []
'''


# -- sizes on the meta device ---------------------------------------------------------------------------------------


def test_demo_problems_are_sized_exactly(tmp_path: Path) -> None:
    # level 1 problem 1: a, b of 16 x 256 float32 in, one 16 x 256 out; problem 5 (RMSNorm) has a 256-float weight.
    add = problem_sizes(DEMO / "KernelBench/level1/1_ScaledAdd.py")
    assert (add.input_bytes, add.param_bytes, add.output_bytes, add.error) == (2 * 16 * 256 * 4, 0, 16 * 256 * 4, None)
    # alpha * a + b: while the add runs, a, b, the product and the sum are alive.
    assert add.forward_peak_bytes == 4 * 16 * 256 * 4
    norm = problem_sizes(DEMO / "KernelBench/level1/5_RMSNorm.py")
    assert norm.param_bytes == 256 * 4 and norm.error is None
    # Integer targets stay integer (int64), as the evaluation passes them (integer_inputs: keep).
    ce = problem_sizes(DEMO / "KernelBench/level1/8_CrossEntropyIntTargets.py")
    assert ce.error is None and ce.output_bytes == 4  # a float32 scalar loss
    table = with_sizes(index_suite(DEMO, [1, 2]), DEMO)
    assert table["size_error"].isna().all() and (table["input_bytes"] > 0).all()
    assert str(table["input_bytes"].dtype) == "Int64"


def test_the_traced_peak_counts_what_lives_at_once(tmp_path: Path) -> None:
    # Each rebinding frees the previous intermediate: at most the input and two intermediates live at once (3 x 4 MiB),
    # a view adds no storage, and a parameter counts from the start.
    chain = tmp_path / "1_Chain.py"
    chain.write_text(HUGE_PROBLEM.replace("torch.rand(4096, 393216)", "torch.rand(1024, 1024)").replace(
        "        return torch.relu(x)",
        "        h = x * 2\n        h = h + 1\n        h = h.relu()\n        return h.view(-1)[:10]"))
    assert problem_sizes(chain).forward_peak_bytes == 3 * 4 * MIB
    weighted = tmp_path / "1_Weighted.py"
    weighted.write_text(chain.read_text().replace(
        "class Model(nn.Module):\n", "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.w = nn.Parameter(torch.ones(1024, 1024))\n\n"))
    assert problem_sizes(weighted).forward_peak_bytes == 4 * 4 * MIB


def test_the_trace_counts_written_outputs_nested_inputs_and_steps_aside_where_it_cannot_follow(tmp_path: Path) -> None:
    def sized(name: str, forward: str, inputs: str = "[torch.rand(1024, 1024)]") -> object:
        path = tmp_path / name
        path.write_text(HUGE_PROBLEM.replace("        return torch.relu(x)", forward).replace(
            "return [torch.rand(4096, 393216)]", f"return {inputs}"))
        return problem_sizes(path)

    # An output written into an empty tensor (out=) grows it to 4 MiB: counted at its size once written.
    written = sized("1_Out.py", "        o = torch.empty(0)\n        torch.mul(x, 2, out=o)\n        return o")
    assert written.forward_peak_bytes == 2 * 4 * MIB
    # Inputs passed inside a list count from the start, as every other input.
    nested = sized("1_Nested.py", "        return x[0] + x[1]", "[[torch.rand(1024, 1024), torch.rand(1024, 1024)]]")
    assert nested.error is None and nested.forward_peak_bytes == 3 * 4 * MIB
    # An op the trace cannot follow (a higher-order op) costs the peak alone, not the sizes.
    cond = sized("1_Cond.py", "        return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))")
    assert cond.error is None and cond.forward_peak_bytes is None and cond.output_bytes == 4 * MIB


def test_the_forward_never_declares_less_than_its_traced_peak() -> None:
    # A peak above what the sizes bound gives (level 3's attention problems: 16 GiB traced, 4 GiB by the sizes).
    attention = Sizes(GIB // 16, 0, GIB // 16, 16 * GIB)
    assert forward_gib(attention) == forward_gib(attention, use_trace=False) == 16.0
    small = Sizes(32 * MIB, 0, MIB, 64 * MIB)  # a small problem: the traced bound, lower than the sizes'
    assert forward_gib(small) < forward_gib(small, use_trace=False)
    # A baseline keeps the sizes' bound: its compile child holds more than one eager forward; where the traced peak
    # is GiBs, at least the compile child's measured relation to it (2.25 x the peak + 1 GiB, its context, outputs).
    assert baseline_memory(small, CUDA) == baseline_memory(Sizes(32 * MIB, 0, MIB), CUDA)
    convolution = Sizes(GIB // 4, 0, GIB // 8, 4 * GIB)  # intermediates dwarfing the inputs (level 2 problem 82)
    assert forward_gib(convolution, use_trace=False) == 5  # the sizes alone: 6.125 GiB with the context
    assert baseline_memory(convolution, CUDA).gpu_mem_gb == math.ceil(1 + 2.25 * 4 + 1 + 1 / 8)


def test_a_huge_problem_is_sized_without_allocating(tmp_path: Path) -> None:
    path = tmp_path / "19_HugeReLU.py"
    path.write_text(HUGE_PROBLEM)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, this process's peak so far
    sizes = problem_sizes(path)
    assert sizes.input_bytes == sizes.output_bytes == 6 * GIB and sizes.param_bytes == 0
    assert sizes.forward_peak_bytes == 12 * GIB  # the input and the output
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 512 * 1024, f"sizing a 6 GiB problem raised the peak by {grown_kib / 1024:.0f} MiB"


def test_a_by_hand_job_asks_the_gpu_for_what_the_pipeline_would_declare(tmp_path: Path) -> None:
    # The trusted side's memory admission (gpu_lock) asks for the estimate a pipeline job declares, from the problem
    # file's own sizes (no problems table by hand), and for the fallback where the meta device cannot size it.
    path = tmp_path / "19_HugeReLU.py"
    path.write_text(HUGE_PROBLEM)
    sizes = Sizes(6 * GIB, 0, 6 * GIB, 12 * GIB)  # its forward holds the input and the output
    assert problem_gpu_gib("evaluate", path, CPU, answers=3) == evaluate_memory(sizes, CUDA, 3).gpu_mem_gb
    assert problem_gpu_gib("baseline", path, CPU) == baseline_memory(sizes, CUDA).gpu_mem_gb
    assert problem_gpu_gib("evaluate", path, CPU, answers=3) > problem_gpu_gib("evaluate", path, CPU, answers=1) > 36
    broken = tmp_path / "1_Broken.py"
    broken.write_text("raise RuntimeError('no')\n")
    assert problem_gpu_gib("evaluate", broken, CUDA) == CUDA["memory_gb"]


def test_a_problem_the_meta_device_cannot_build_gets_a_reason_not_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "1_ItemOfInput.py"
    path.write_text(HUGE_PROBLEM.replace("return torch.relu(x)", "return x * float(x.sum().item())"))
    sizes = problem_sizes(path)
    assert sizes.input_bytes is None and sizes.output_bytes is None
    assert sizes.error.startswith("Model.forward on the meta device:") and "\n" not in sizes.error
    odd = tmp_path / "2_ObjectInput.py"
    odd.write_text(HUGE_PROBLEM.replace("return torch.relu(x)", "return object()"))
    assert problem_sizes(odd).error == "counting the tensors: a value of type object (not a tensor)"


def test_problems_stage_writes_described_size_columns(tmp_path: Path) -> None:
    from workflow_scripts.stages.problems import main

    out = tmp_path / "problems.parquet"
    assert main(["--params", json.dumps({"levels": [1, 2]}), "--suite", str(DEMO), "--out", str(out),
                 "--store", str(tmp_path / "store")]) == 0
    table = pd.read_parquet(out)
    assert {"input_bytes", "param_bytes", "output_bytes", "forward_peak_bytes", "size_error"} <= set(table.columns)
    assert table_sizes(out, 1, 1) == Sizes(2 * 16 * 256 * 4, 0, 16 * 256 * 4, 4 * 16 * 256 * 4)
    # A table written before the peak was traced still gives its sizes, without the peak.
    table.drop(columns="forward_peak_bytes").to_parquet(older := tmp_path / "older.parquet")
    assert table_sizes(older, 1, 1) == Sizes(2 * 16 * 256 * 4, 0, 16 * 256 * 4)
    assert table_sizes(out, 1, 99) is None and table_sizes(tmp_path / "absent.parquet", 1, 1) is None


@pytest.mark.parametrize("level, name, input_mib", [
    (1, "19_ReLU.py", 6144.0), (1, "45_Average_Pooling_2D.py", None), (1, "1_Square_matrix_multiplication_.py", 128.0),
    (2, "1_Conv2D_ReLU_BiasAdd.py", None),
])
def test_real_problems_match_the_h200_anchors(kb_dir: Path, level: int, name: str, input_mib: float | None) -> None:
    if not ANCHORS.is_file():
        pytest.skip(f"no anchors at {ANCHORS}")
    anchors = {(r["level"], r["name"]): r for r in map(json.loads, ANCHORS.read_text().splitlines()) if r}
    anchor = anchors[(level, name)]
    if input_mib is not None:
        assert anchor["input_MB"] == input_mib
    sizes = problem_sizes(kb_dir / "KernelBench" / f"level{level}" / name)
    assert sizes.error is None
    assert sizes.input_bytes / MIB == pytest.approx(anchor["input_MB"], rel=0.01)


def test_every_measured_peak_lies_within_both_bounds_of_the_forward(kb_dir: Path) -> None:
    # The estimate's forward working set (forward_gib) is the lesser of two bounds, each of which must hold the
    # reference's peak GPU memory measured on an H200 for every level-1/2 problem on its own: one from the sizes, one
    # from the traced peak.
    if not ANCHORS.is_file():
        pytest.skip(f"no anchors at {ANCHORS}")
    anchors = [r for r in map(json.loads, ANCHORS.read_text().splitlines()) if r]
    checked, tighter = 0, 0
    for anchor in anchors:
        found = problem_sizes(kb_dir / "KernelBench" / f"level{anchor['level']}" / anchor["name"])
        if found.error and anchor["name"].endswith("_test"):
            continue  # not a KernelBench problem (level 1's 95_cast_to_fp32_test has no .py)
        assert found.error is None, (anchor["name"], found.error)
        traced = sizes_of(found)
        peak = anchor["peak_GB"] * 1e9 / GIB
        assert peak <= sizes_bound_gib(traced), anchor["name"]
        assert peak <= traced_bound_gib(traced), anchor["name"]
        checked += 1
        tighter += forward_gib(traced) < forward_gib(traced, use_trace=False)
    assert checked == 200 and tighter == 159  # the trace lowers most problems' estimate


# The GPU memory a baseline's compile child held at most (NVML, by process), one baseline job at a time with a fresh
# compile cache on an H100 (bench/job_memory_probe.py --job baseline, bench/archive/h100/2026-12-07-session38/).
# Beside it, the host memory the job held: the larger of the machine's memory in use above its start and the compile
# child's resident memory with the stage process's (0.75 GiB), in GiB.
COMPILE_CHILD_GIB = {"14_Gemm_Divide_Sum_Scaling.py": (2.16, 1.9), "1_Conv2D_ReLU_BiasAdd.py": (6.31, 8.64),
                     "4_Conv2d_Mish_Mish.py": (11.29, 15.65), "59_Matmul_Swish_Scaling.py": (9.6, 5.34),
                     "82_Conv2d_Tanh_Scaling_BiasAdd_Max.py": (9.03, 2.24),
                     "93_ConvTranspose2d_Add_Min_GELU_Multiply.py": (3.3, 9.03)}


def test_a_baseline_declares_what_its_compile_child_held(kb_dir: Path) -> None:
    # The sizes' bound alone declared 7 GiB of GPU memory for problem 82 (a convolution whose intermediates dwarf its
    # inputs); without the comparison's host copies, 8.47 GiB of host memory for problem 4 (2 GiB of outputs).
    for name, (gpu_held, host_held) in COMPILE_CHILD_GIB.items():
        declared = baseline_memory(sizes_of(problem_sizes(kb_dir / "KernelBench" / "level2" / name)), CUDA)
        assert declared.gpu_mem_gb >= gpu_held, name
        assert declared.mem_mb * 1e6 / GIB >= host_held, name


# -- the estimate ----------------------------------------------------------------------------------------------------


def sizes(gib: float, out: float | None = None) -> Sizes:
    return Sizes(int(gib * GIB), 0, int((gib if out is None else out) * GIB))


def test_small_problems_keep_todays_host_floor_and_large_ones_get_more() -> None:
    for config in (CUDA, CPU):
        small = evaluate_memory(sizes(0.001), config, answers=1)
        assert small.mem_mb >= FLOOR_MEM_MB and baseline_memory(sizes(0.001), config).mem_mb >= FLOOR_MEM_MB
        relu = evaluate_memory(sizes(6), config, answers=1)
        assert relu.mem_mb > small.mem_mb + 5 * 6 * 1024  # at least its five seeded input areas on top
        assert baseline_memory(sizes(6), config).mem_mb > baseline_memory(sizes(0.001), config).mem_mb
    relu = evaluate_memory(sizes(6), CUDA, answers=1)
    assert relu.gpu_mem_gb > evaluate_memory(sizes(0.001), CUDA, answers=1).gpu_mem_gb + 30
    # 5 seeded outputs + timing inputs held, and the answer's forward (3 x 6 in + 2 x 6 out) on top.
    assert relu.gpu_mem_gb >= 5 * 6 + 6 + 30


def test_the_estimate_is_monotone_in_every_size_and_in_the_answers_judged() -> None:
    grid = [0, 0.01, 0.5, 1, 2, 6, 16]
    for config in (CUDA, CPU):
        for job in (lambda s, c=config: evaluate_memory(s, c, 15), lambda s, c=config: baseline_memory(s, c)):
            for field in ("input_bytes", "param_bytes", "output_bytes"):
                seen = [job(Sizes(**{**dict(input_bytes=GIB, param_bytes=GIB, output_bytes=GIB),
                                     field: int(g * GIB)})) for g in grid]
                assert [m.mem_mb for m in seen] == sorted(m.mem_mb for m in seen), (config, field)
                assert [m.gpu_mem_gb for m in seen] == sorted(m.gpu_mem_gb for m in seen), (config, field)
        by_answers = [evaluate_memory(sizes(1), config, n) for n in (1, 2, 5, 15)]
        assert [m.mem_mb for m in by_answers] == sorted(m.mem_mb for m in by_answers)
    # On CUDA up to 5 answer processes live at once (the one judged plus a batch of 4), capped by the answers; on the
    # CPU two. A configured batch declares its own.
    assert evaluate_memory(sizes(1), CUDA, 15) == evaluate_memory(sizes(1), CUDA, 5)
    assert evaluate_memory(sizes(1), CUDA, 5).mem_mb > evaluate_memory(sizes(1), CUDA, 4).mem_mb
    assert evaluate_memory(sizes(1), {**CUDA, "prestart": 14}, 15).mem_mb > evaluate_memory(sizes(1), CUDA, 15).mem_mb
    assert evaluate_memory(sizes(1), CPU, 15) == evaluate_memory(sizes(1), CPU, 2)


def test_the_inputs_builders_and_the_answers_areas_count_once_as_the_larger_phase() -> None:
    # A 6 GiB reduction (outputs of a few bytes): while the reference side is prepared, five helpers each hold a
    # trial's inputs (30 GiB); the answers' areas come only after that, 6 GiB each. A second answer adds its process,
    # not its areas, until the answers' areas outgrow the helpers'.
    reduction = Sizes(6 * GIB, 0, 16)
    one, two = (evaluate_memory(reduction, CUDA, n).mem_mb for n in (1, 2))
    assert (two - one) * 1e6 == pytest.approx(CHILD_PROCESS_GIB * GIB, abs=1e6)
    four, five = (evaluate_memory(reduction, CUDA, n).mem_mb for n in (4, 5))
    assert (five - four) * 1e6 == pytest.approx(CHILD_PROCESS_GIB * GIB, abs=1e6)  # 30 GiB of areas: a tie
    six = evaluate_memory(Sizes(6 * GIB, 0, 16), {**CUDA, "prestart": 5}, 6).mem_mb
    assert (six - five) * 1e6 == pytest.approx((CHILD_PROCESS_GIB + 6) * GIB, abs=1e6)  # the areas outgrow them
    # Judging holds more than the areas: where judging on the device runs out of memory it is done again on the host,
    # the reference's outputs copied there beside the buffer the answer's are read into. 6 GiB of outputs: the
    # timing outputs and 5 seeded ones kept on the host, one answer's areas, and those two copies.
    wide = evaluate_memory(Sizes(MIB, 0, 6 * GIB), CUDA, 1).mem_mb * 1e6 / GIB
    assert wide == pytest.approx(2 + 5 / 1024 + 1 / 1024 + CHILD_PROCESS_GIB + 6 + 5 * 6 + (1 / 1024 + 6) + 2 * 6,
                                 abs=0.01)


def test_nothing_is_capped_and_the_cpu_declares_no_gpu_memory() -> None:
    huge = evaluate_memory(sizes(16), CUDA, answers=15)
    assert huge.mem_mb > 256 * 1024 and huge.gpu_mem_gb > 141  # more than one H200: said, not clipped
    assert evaluate_memory(sizes(16), CPU, 15).gpu_mem_gb == 0 and baseline_memory(sizes(16), CPU).gpu_mem_gb == 0


def test_a_problem_without_sizes_falls_back_to_the_configuration(tmp_path: Path) -> None:
    assert evaluate_memory(None, {**CUDA, "memory_gb": 24}, 15) == Memory(8000, 24)
    assert baseline_memory(None, CPU) == Memory(8000, 0)
    assert job_memory("evaluate", tmp_path / "not-yet.parquet", 1, 1, {**CUDA, "memory_gb": 16}) == Memory(8000, 16)
    old = tmp_path / "old.parquet"  # a table from before the sizes: the fallback, not an error
    pd.DataFrame({"level": [1], "problem_id": [1]}).to_parquet(old)
    assert job_memory("baseline", old, 1, 1, CUDA) == Memory(8000, 40)


# -- the workflow ----------------------------------------------------------------------------------------------------


def planned_jobs(stdout: str) -> dict[tuple[str, str], str]:
    """(rule, wildcards) -> the block a dry run prints for the job."""
    jobs = {}
    for block in re.split(r"\n(?=rule \w+:)", stdout):
        rule = re.match(r"rule (\w+):", block)
        wildcards = re.search(r"^\s+wildcards: (.+)$", block, re.M)
        if rule and wildcards:
            jobs[(rule.group(1), wildcards.group(1))] = block
    return jobs


def planned_resources(stdout: str) -> dict[tuple[str, str], dict[str, str]]:
    """(rule, wildcards) -> the resources a dry run prints for the job."""
    jobs = {}
    for job, block in planned_jobs(stdout).items():
        resources = re.search(r"^\s+resources: (.+)$", block, re.M)
        if resources:
            jobs[job] = dict(item.split("=", 1) for item in resources.group(1).split(", "))
    return jobs


def test_the_first_configured_model_s_evaluate_jobs_come_first_after_the_baselines(tmp_path: Path) -> None:
    """Snakemake runs ready jobs of higher priority first: the first configured model's evaluate jobs (one per
    problem, each judging every model's answer along) before the second model's, and so on, so the evaluation slots
    judge different problems at once instead of a second job waiting on its answer's lock; all after the baselines."""
    work = copy_workflow(tmp_path / "wf")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n"], cwd=work, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    priorities: dict[str, set[float]] = {}
    for (rule, wildcards), block in planned_jobs(proc.stdout).items():
        priority = re.search(r"^\s+priority: (\S+)$", block, re.M)
        model = re.match(r"model=(\w+),", wildcards)
        if rule == "evaluate" and model:
            priorities.setdefault(model.group(1), set()).add(float(priority.group(1)) if priority else 0.0)
        elif rule == "baseline":
            assert priority and float(priority.group(1)) == 5.0
    models = list(yaml.safe_load((work / "config.yaml").read_text())["models"])
    assert list(priorities) and set(priorities) == set(models)
    assert all(len(found) == 1 for found in priorities.values())  # one priority per model, whatever the problem
    ordered = [priorities[model].pop() for model in models]
    assert ordered == sorted(ordered, reverse=True) and len(set(ordered)) == len(models)
    assert 0.0 < ordered[-1] and ordered[0] <= 1.0  # below the baselines' 5


@pytest.mark.integration
def test_jobs_of_a_large_and_a_small_problem_declare_different_memory(tmp_path: Path) -> None:
    work = copy_workflow(tmp_path / "wf")
    (work / "demo/suite/KernelBench/level1/9_HugeReLU.py").write_text(HUGE_PROBLEM)
    cuda = work / "cuda.yaml"
    cuda.write_text("evaluation:\n  device: cuda\n  memory_gb: 24\n")

    def dry(*configs: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", *configs], cwd=work,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return planned_resources(proc.stdout)

    # Before the problems stage has run there are no sizes: every job gets the fallback.
    fresh = dry("config.yaml", str(cuda))
    small, large = "model=expert, level=1, problem_id=1", "model=expert, level=1, problem_id=9"
    assert fresh[("evaluate", large)]["mem_mb"] == fresh[("evaluate", small)]["mem_mb"] == "8000"
    assert fresh[("evaluate", large)]["gpu_mem_gb"] == "24"

    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "results/demo/problems.parquet"],
                          cwd=work, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    planned = dry("config.yaml", str(cuda))
    evaluation = {"device": "cuda", "memory_gb": 24, "correctness_trials": 5}
    answers = len(yaml.safe_load((work / "config.yaml").read_text())["models"])  # each evaluate job judges all
    for rule, wildcards, level, pid in (("evaluate", small, 1, 1), ("evaluate", large, 1, 9),
                                        ("baseline", "level=1, problem_id=9", 1, 9)):
        expected = job_memory(rule, work / "results/demo/problems.parquet", level, pid, evaluation, answers)
        assert planned[(rule, wildcards)]["mem_mb"] == str(expected.mem_mb), (rule, wildcards)
        assert planned[(rule, wildcards)]["gpu_mem_gb"] == str(expected.gpu_mem_gb), (rule, wildcards)
    assert int(planned[("evaluate", large)]["mem_mb"]) > 10 * int(planned[("evaluate", small)]["mem_mb"])
    assert int(planned[("evaluate", large)]["gpu_mem_gb"]) > 5 * int(planned[("evaluate", small)]["gpu_mem_gb"])
    # On the CPU no job declares GPU memory.
    cpu = dry("config.yaml")
    assert cpu[("evaluate", large)]["gpu_mem_gb"] == "0" and int(cpu[("evaluate", large)]["mem_mb"]) > 50_000


def test_a_baseline_compiles_with_a_quarter_of_the_run_s_cores_unless_configured(monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))  # a 64-core host
    assert [compile_threads(cores) for cores in (1, 4, 7, 8, 16, 32, 64, None)] == [1, 1, 1, 2, 4, MAX_COMPILE_THREADS,
                                                                                  MAX_COMPILE_THREADS,
                                                                                  MAX_COMPILE_THREADS]
    assert compile_threads(64, configured=3) == 3 and compile_threads(2, configured=3) == 2  # never over --cores
    # A cluster job evaluates the rule again inside its allocation (here 8 CPUs of a node its --cores calls 64):
    # never more than the submitting process asked for.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert compile_threads(64) == 2 and compile_threads(None) == 2


def test_baselines_together_take_at_most_three_quarters_of_the_run_s_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(128)))  # a 128-core host
    # The H200 host's 16 cores: six baselines of 4 workers reserving 2 cores each, 4 cores left to the evaluations
    # (one per JOBS_PER_GPU).
    reserved = baseline_reserved_cores(compile_threads(16))
    assert reserved == 2 and baseline_slots(16, reserved) == 6 and 6 * reserved == 16 - JOBS_PER_GPU
    assert [baseline_slots(cores, threads) for cores, threads in ((16, 4), (128, 8), (2, 1), (1, 1), (4, 8))] == [
        3, 12, 1, 1, 1]  # always one at least, even where one baseline's workers outnumber the share
    # No --cores (Snakemake's API without them): the cores this process may run on, as compile_threads reads them.
    assert baseline_slots(None, 8) == 12
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    assert baseline_slots(None, 1) == baseline_slots(64, 1) == 3


def test_a_baseline_reserves_half_its_compile_workers_as_cores() -> None:
    assert [baseline_reserved_cores(workers) for workers in (1, 2, 3, 4, 8)] == [1, 1, 2, 2, 4]


@pytest.mark.integration
def test_the_baseline_rule_reserves_half_its_compile_workers_as_threads(tmp_path: Path) -> None:
    # The stage gets the workers (--compile-threads {resources.compile_workers}); the rule reserves half as threads.
    work = copy_workflow(tmp_path / "wf")
    (work / "three.yaml").write_text("baselines:\n  compile_threads: 3\n")

    def planned(*args: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", *args], cwd=work, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        blocks = [b for b in proc.stdout.split("rule ") if b.startswith("baseline:")]
        assert blocks, proc.stdout[-3000:]
        pairs = set()
        for block in blocks:
            threads = re.search(r"threads: (\d+)", block)  # Snakemake prints none for a job of one thread
            flag = re.search(r"--compile-threads (\d+)", block).group(1)
            pairs.add(f"{flag}/{threads.group(1) if threads else 1}")
        return pairs

    quarter = compile_threads(8)  # a quarter of this host's cores, or of 8 where it has more
    assert planned("--cores", "8") == {f"{quarter}/{baseline_reserved_cores(quarter)}"}
    three = compile_threads(8, configured=3)  # 3, or this host's cores where fewer (2 on CI's machine)
    assert planned("--cores", "8", "--configfile", "config.yaml", "three.yaml") == {
        f"{three}/{baseline_reserved_cores(three)}"}


# -- what a local run gives its jobs at once --------------------------------------------------------------------------


def test_a_local_run_is_bounded_by_the_host_s_gpus_and_memory() -> None:
    cards = {"0": 139.8, "1": 139.8}
    found = host_resources("cuda", ["0", "1"], cards.get, 128 * GIB, baselines=2)
    # Each baseline slot comes on top of the GPUs' evaluation places: a baseline takes none of them, and the
    # evaluations alone never take more than theirs (once the baselines end, too).
    assert found == {"gpu": 2 * JOBS_PER_GPU + 2, "evaluations": 2 * JOBS_PER_GPU, "gpu_mem_gb": 279, "baselines": 2,
                     "mem_mb": int(128 * GIB * HOST_MEMORY_SHARE / 1e6)}
    # What cannot be read stays unbounded: a card NVML does not answer for, the host's memory, a host with no GPU.
    assert host_resources("cuda", ["0", "1"], {"0": 139.8}.get, None) == {
        "gpu": 2 * JOBS_PER_GPU + 1, "evaluations": 2 * JOBS_PER_GPU, "baselines": 1}
    assert host_resources("cuda", [], cards.get, GIB) == {"mem_mb": int(GIB * HOST_MEMORY_SHARE / 1e6), "baselines": 1}
    # On the CPU no job declares a GPU: the host's memory and the baselines' cores are bounded.
    assert host_resources("cpu", ["0"], cards.get, GIB) == {"mem_mb": int(GIB * HOST_MEMORY_SHARE / 1e6), "baselines": 1}


@pytest.mark.integration
def test_the_readme_command_gives_each_visible_gpu_its_jobs_unless_told_otherwise(tmp_path: Path) -> None:
    work = copy_workflow(tmp_path / "wf")
    (work / "cuda.yaml").write_text("evaluation:\n  device: cuda\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}  # two GPUs, as visible_gpus reads them first

    def provided(*args: str) -> dict[str, int]:
        proc = subprocess.run([sys.executable, "-m", "snakemake", "results/demo/problems.parquet", "--cores", "1",
                               "--forcerun", "problems", "--configfile", "config.yaml", "cuda.yaml", *args],
                              cwd=work, capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return {name: int(value) for name, value in re.findall(r'Resource\("(\w+)", (\d+)\)', proc.stderr)}

    found = provided()
    # --cores 1: one baseline at a time, its place on top of the two GPUs' evaluation places.
    assert found["baselines"] == 1 and found["gpu"] == 2 * JOBS_PER_GPU + 1
    assert found["evaluations"] == 2 * JOBS_PER_GPU
    assert found["mem_mb"] == int(host_memory_bytes() * HOST_MEMORY_SHARE / 1e6)
    # The command line's bound wins, the others stay the host's.
    told = provided("--resources", "gpu=3")
    assert told["gpu"] == 3 and told["mem_mb"] == found["mem_mb"]
    # A run given --jobs (a cluster's submission, as profiles/slurm) bounds nothing by the submitting host.
    assert not {"gpu", "evaluations", "mem_mb", "gpu_mem_gb", "baselines"} & set(provided("--jobs", "2"))
