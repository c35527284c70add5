"""A helper of the trusted side: build one seeded trial's inputs exactly as KernelBench does (seed, ``get_inputs()`` on
the CPU, floating tensors cast to float32) and write them into the memory area it inherited. Several run side by
side for multi-GB problems, where ``get_inputs()`` on the CPU takes about ten seconds per trial.

``python -m workflow_scripts.evaluation.reference_inputs`` takes one JSON argument (problem, seed, fd, size) and
prints the area's entries as one JSON line. It runs only the problem's own code, never an answer's.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    job = json.loads(sys.argv[1])
    import torch

    from workflow_scripts.evaluation.transport import Area
    from workflow_scripts.suite.problem_module import as_input, load_problem

    problem = load_problem(job["problem"])
    torch.manual_seed(int(job["seed"]))
    inputs = [as_input(x, "cpu", bool(job.get("cast_integers"))) for x in problem.get_inputs()]
    area = Area("seeded", int(job["size"]), fd=int(job["fd"]), writable=True)
    entries = area.write(inputs)
    area.close()
    print(json.dumps(entries))


if __name__ == "__main__":
    main()
