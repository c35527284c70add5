"""A problem file as Python code: how it is loaded, the seed KernelBench builds it under, and its inputs as the
protocol passes them to a model. The trusted side of an evaluation (``evaluation.reference``), its input helpers and
the problem sizer (``suite.sizes``) share these, so the sizes describe the tensors the evaluation holds.

Only the problem's own code runs here (KernelBench's, trusted), never an answer's."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

# KernelBench seeds torch with 42 before building a problem's model and its timing inputs, and derives its
# correctness trials' seeds from it (evaluation.protocol.kernelbench_trial_seeds).
KERNELBENCH_SEED = 42


def load_problem(path: Path | str) -> Any:
    """The problem file imported as a module of its own (``Model``, ``get_inputs``, ``get_init_inputs``), under a
    name unique to its path, registered in ``sys.modules`` (dataclasses and Triton look modules up by name)."""
    name = f"kb_problem_{abs(hash(str(path))):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def as_input(x: Any, device: Any, cast_integers: bool = False) -> Any:
    """An input as the protocol passes it: KernelBench casts every input tensor to float32; we cast only floating
    ones (integer targets stay integer) unless ``cast_integers`` (EvalConfig.integer_inputs="cast", KernelBench's
    way), and move tensors to ``device``."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.is_floating_point() or cast_integers:
            x = x.to(dtype=torch.float32)
        return x.to(device=device)
    return x


# Module-level statements an input builder keeps (imports, constants, helper functions); classes (the ``Model``
# among them) and a ``__main__`` block are left out.
_BUILDER_STATEMENTS = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.FunctionDef)


def input_builder_source(source: str) -> str:
    """The part of a problem file that builds its inputs: every import, module-level assignment and function
    (``get_inputs`` and what it uses), without any class. An answer's process runs it (``input_builder``) to draw
    fresh timing inputs, once ``evaluation.reference.ReferenceSide._check_input_builder`` has seen it run alone and
    draw the timing inputs' shapes and dtypes: no ``Model`` exists there to be found and called. Raises
    ``ValueError`` when the file defines no ``get_inputs``."""
    tree = ast.parse(source)
    kept = [node for node in tree.body if isinstance(node, _BUILDER_STATEMENTS)]
    if not any(isinstance(n, ast.FunctionDef) and n.name == "get_inputs" for n in kept):
        raise ValueError("the problem defines no module-level get_inputs()")
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def input_builder(source: str) -> Any:
    """``get_inputs`` of an input builder's source (``input_builder_source``), run in a namespace of its own."""
    namespace: dict[str, Any] = {"__name__": "kb_problem_inputs"}
    exec(compile(source, "<problem inputs>", "exec"), namespace)  # noqa: S102 - the problem's own code
    return namespace["get_inputs"]
