"""Does a never-returning kernel in another process change what a KernelBench problem's eager forward computes?

The spin bench (gpu_problem_worker.py spin) once judged L2/71's reference-as-answer a mismatch (max |diff| 0.105)
while a spinning kernel held the GPU (session 12), correct in every earlier run. This computes the problem's seeded
forward (seed 42, KernelBench's order) in fresh processes: alone, then while another process's kernel spins, then
after it is killed, and reports each against the first (max |diff|, mismatched share at 1e-4) with the cuDNN
settings, so an evaluator bug can be told from the neighbour changing the library's choice of algorithm.

    python bench/archive/scripts/spin_neighbour_check.py --problem .kb/KernelBench/level2/71_Conv2d_Divide_LeakyReLU.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

SPIN = r'''
import torch, triton, triton.language as tl, time
@triton.jit
def spin(flag_ptr, out_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        pass
    tl.store(out_ptr + tl.program_id(0), 1)
flag = torch.zeros(1, dtype=torch.int32, device="cuda"); out = torch.zeros(4096, dtype=torch.int32, device="cuda")
spin[(4096,)](flag, out)
print("spinning", flush=True)
time.sleep(600)
'''

# The problem at sys.argv[1] built in a fresh process as KernelBench builds it (seed 42): `model`, `inputs` on the GPU.
BUILD_PROBLEM = r'''
import importlib.util, sys, torch, json
spec = importlib.util.spec_from_file_location("problem", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
torch.manual_seed(42); model = m.Model(*m.get_init_inputs()).cuda()
torch.manual_seed(42); inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in m.get_inputs()]
'''

FORWARD = BUILD_PROBLEM + r'''
with torch.no_grad():
    out = model(*inputs)
torch.cuda.synchronize()
torch.save(out.cpu(), sys.argv[2])
print(json.dumps({"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32, "cudnn_benchmark": torch.backends.cudnn.benchmark,
                  "matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.version()}))
'''


def run_script(code: str, *argv: str) -> dict:
    """``code`` in a fresh interpreter: the JSON object its last line prints (or its error), with its wall time."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    info = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-2000:]}
    return dict(info, wall_s=round(time.monotonic() - t0, 2))


def forward(problem: Path, dest: Path) -> dict:
    return run_script(FORWARD, str(problem), str(dest))


def compare(a: Path, b: Path) -> dict:
    import torch

    x, y = torch.load(a), torch.load(b)
    d = (x - y).abs()
    bad = ~torch.isclose(y, x, atol=1e-4, rtol=1e-4)
    return {"max_abs_diff": float(d.max()), "mismatched_share": float(bad.float().mean()),
            "bitwise_equal": bool(torch.equal(x, y))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "spin_neighbour_check.jsonl"

    def record(**kw) -> None:
        with log.open("a") as f:
            f.write(json.dumps(dict(kw, problem=args.problem.name)) + "\n")
        print(json.dumps(kw), flush=True)

    with tempfile.TemporaryDirectory() as scratch:  # outputs and the spinner's source: only the log comes back
        check(args.problem, Path(scratch), args.repeats, record)


def check(problem: Path, scratch: Path, repeats: int, record: Callable[..., None]) -> None:
    first = scratch / "alone0.pt"
    record(phase="alone", run=0, **forward(problem, first))
    for i in range(1, repeats + 1):
        f = scratch / f"alone{i}.pt"
        record(phase="alone", run=i, **forward(problem, f), **compare(first, f))
    spin_file = scratch / "spin_kernel.py"  # Triton reads a kernel's source from its file
    spin_file.write_text(SPIN)
    spinner = subprocess.Popen([sys.executable, str(spin_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert spinner.stdout is not None and spinner.stdout.readline().strip() == "spinning"
        time.sleep(1.0)
        for i in range(repeats):
            f = scratch / f"beside{i}.pt"
            record(phase="beside_spinner", run=i, **forward(problem, f), **compare(first, f))
    finally:
        spinner.kill()
        spinner.wait()
    f = scratch / "after.pt"
    record(phase="after", run=0, **forward(problem, f), **compare(first, f))


if __name__ == "__main__":
    main()
