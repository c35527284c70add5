"""How large a problem's tensors are, computed without allocating them: the problem is built on PyTorch's meta
device (shapes and dtypes only), so a level-1 problem with 16 GiB of inputs is sized in milliseconds on a machine
with no GPU and little memory.

The sizes are those of the tensors the evaluation holds (``evaluation.reference``): each input as the protocol
passes it (floating tensors cast to float32, ``problem_module.as_input``), the model moved to float32 as KernelBench
moves it, and its outputs on those inputs; and the forward's peak, the most bytes its live tensors (inputs,
parameters, intermediates, outputs) held at once, traced op by op (``LiveBytes``). They feed the scheduling estimate
(``evaluation.resources``).

A problem the meta device cannot build (an op without a meta kernel, a data-dependent shape, an input that is
not a tensor, number or sequence of them) gets no sizes and a one-line reason instead; the problem itself may
still run (the evaluation decides that, not this).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from workflow_scripts.suite.problem_module import KERNELBENCH_SEED, as_input, load_problem

# Values that hold no tensor memory: counted as 0 bytes (init inputs are mostly ints; some outputs are scalars).
_PLAIN = (int, float, bool, complex, str, bytes, type(None))


class _Unsized(Exception):
    """A value whose size cannot be counted (neither a tensor, a plain value nor a sequence or dict of them)."""


@dataclass(frozen=True)
class ProblemSizes:
    """Bytes of one problem's tensors; all None with ``error`` set where the meta device could not build it."""

    input_bytes: int | None
    param_bytes: int | None
    output_bytes: int | None
    flops: int | None = None  # the forward's matrix-multiply, convolution and attention FLOPs (0: none)
    forward_peak_bytes: int | None = None  # the most bytes the forward's live tensors held at once (LiveBytes)
    error: str | None = None

    @classmethod
    def failed(cls, reason: str) -> "ProblemSizes":
        return cls(None, None, None, error=reason)


def tensor_nbytes(value: Any) -> int:
    """The bytes of every tensor in ``value`` (a tensor, or lists, tuples and dicts of them, nested); plain values
    count 0; anything else raises ``_Unsized``."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_nbytes(v) for v in value.values())
    if isinstance(value, _PLAIN):
        return 0
    raise _Unsized(f"a value of type {type(value).__name__}")


@functools.cache
def _live_bytes_class() -> type:
    """The ``LiveBytes`` dispatch mode, defined on first use: torch is imported only where a problem is sized."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class LiveBytes(TorchDispatchMode):
        """The peak of the bytes held by live tensor storages while a forward runs (``peak``): the tensors given
        (``resident``: inputs, parameters, buffers, nested in lists or dicts) and every storage an op returns or
        writes (``out=``, a resize in place), at its latest size, until it is freed. On the meta device this is the
        eager forward's own allocation, without what a kernel allocates inside itself (a convolution's workspace, a
        fused loss's temporaries), which the estimate's margin covers (evaluation/resources.py)."""

        def __init__(self, resident: Iterable[Any]) -> None:
            super().__init__()
            # By the storage's address: the weak reference keeps the storage object (not its memory) alive, so no
            # other storage takes the address while its entry is here.
            self._live: dict[int, tuple[StorageWeakRef, int]] = {}
            self._see(resident)
            self.peak = self._held_now()

        def _see(self, values: Any) -> None:
            for value in tree_leaves(values):
                if isinstance(value, torch.Tensor) and value.layout == torch.strided:
                    storage = value.untyped_storage()
                    known = self._live.get(storage._cdata)
                    self._live[storage._cdata] = (known[0] if known else StorageWeakRef(storage), storage.nbytes())

        def _held_now(self) -> int:
            self._live = {key: entry for key, entry in self._live.items() if not entry[0].expired()}
            return sum(nbytes for _, nbytes in self._live.values())

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            self._see((out, args, kwargs))  # the arguments too: an op may have written (and grown) one
            self.peak = max(self.peak, self._held_now())
            return out

    return LiveBytes


def _forward(model: Any, inputs: list, resident: list, trace: bool) -> tuple[Any, int, int | None]:
    """The forward's outputs, FLOPs and (``trace``) its peak of live tensor bytes (``LiveBytes``)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        if not trace:
            return model(*inputs), int(counter.get_total_flops()), None
        with _live_bytes_class()(resident) as live:
            out = model(*inputs)
    return out, int(counter.get_total_flops()), live.peak


def problem_sizes(path: Path | str, seed: int = KERNELBENCH_SEED) -> ProblemSizes:
    """The problem's input, parameter-and-buffer and output bytes, on the meta device after seeding as the
    reference does (``with torch.device("meta"): Model(*get_init_inputs())(*get_inputs())``), the forward's
    FLOPs and its peak of live tensor bytes."""
    try:
        import torch
    except ImportError:
        return ProblemSizes.failed("torch is not installed in this environment")
    what = "loading the problem"
    try:
        problem = load_problem(path)
        with torch.device("meta"), torch.no_grad():
            what = "get_init_inputs()"
            torch.manual_seed(seed)
            init = list(problem.get_init_inputs())
            what = "building Model"
            torch.manual_seed(seed)
            model = problem.Model(*[as_input(x, "meta") for x in init]).to(dtype=torch.float32)
            what = "get_inputs()"
            torch.manual_seed(seed)
            inputs = [as_input(x, "meta") for x in problem.get_inputs()]
            what = "Model.forward"
            weights = [*model.parameters(), *model.buffers()]
            try:
                out, flops, peak = _forward(model, inputs, [inputs, weights], trace=True)
            except Exception:  # noqa: BLE001 - an op the trace cannot follow (a higher-order op): sizes without it
                out, flops, peak = _forward(model, inputs, [inputs, weights], trace=False)
        what = "counting the tensors"
        params = sum(tensor_nbytes(t) for t in weights)
        return ProblemSizes(tensor_nbytes(inputs), params, tensor_nbytes(out), flops, peak)
    except _Unsized as e:
        return ProblemSizes.failed(f"{what}: {e} (not a tensor)")
    except Exception as e:  # noqa: BLE001 - the problem's own code, on a device it was not written for
        message = " ".join(str(e).split())
        return ProblemSizes.failed(f"{what} on the meta device: {type(e).__name__}: {message}"[:300])


def with_sizes(table: Any, suite: Path | str) -> Any:
    """The problems table (``kernelbench.problems_dataframe``) with each problem's sizes: ``input_bytes``,
    ``param_bytes``, ``output_bytes``, ``flops``, ``forward_peak_bytes`` (null where unknown) and ``size_error`` (why;
    null where known)."""
    import pandas as pd

    sizes = [problem_sizes(Path(suite) / path) for path in table["path"]]
    table = table.copy()
    for column in ("input_bytes", "param_bytes", "output_bytes", "flops", "forward_peak_bytes"):
        table[column] = pd.Series([getattr(s, column) for s in sizes], dtype="Int64", index=table.index)
    table["size_error"] = pd.Series([s.error for s in sizes], dtype="string", index=table.index)
    return table
