"""Tensors between the trusted side of an evaluation and an answer's process, without pipes: memory areas.

An ``Area`` is one anonymous in-memory file (``memfd_create``) that both processes map. The trusted side writes a
list of values into it and hands the answer's process the file descriptor (over a socket, ``SCM_RIGHTS``:
``sandbox.ChildProcess.deliver_areas``) and, per message, where each tensor lies (``Slot``: offset, shape, dtype).
Two kinds:

* **sealed** areas (a problem's seeded correctness inputs, its timing inputs, init inputs): written once by the
  trusted side, then sealed (``F_SEAL_WRITE``, ``F_SEAL_SHRINK``, ``F_SEAL_GROW``): no process, the answer's included,
  can change a byte of them afterwards, so every answer to the problem reads the same inputs.
* **writable** areas, one set per answer: its secret inputs (hidden and post-timing trials, written by the trusted
  side only when the trial starts) and its outputs (written by the answer's process; the trusted side copies them
  out before judging, so later writes by the answer change nothing that was judged).

Every area's size is fixed when it is made (``F_SEAL_SHRINK``, ``F_SEAL_GROW``; writable areas also
``F_SEAL_SEAL``, ``fix_seals``): the answer's process holds the descriptors of its writable areas, and a file it
could shrink would make the trusted side's next access of its mapping a ``SIGBUS`` that kills the evaluator.

Every slot a message names is validated against the area's size and the dtype whitelist before it is read: a
forged slot is a ``TransportError``, never an out-of-bounds read.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import warnings
from dataclasses import dataclass
from typing import Any

# The dtypes a slot may name (torch attribute names).
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64", "complex128")
_CUDA_HOST_REGISTER_READ_ONLY = 0x08  # cudaHostRegisterReadOnly
_SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
_SEALS = fcntl.F_SEAL_SEAL | _SIZE_SEALS | fcntl.F_SEAL_WRITE


class TransportError(Exception):
    """A slot or value that does not describe a tensor inside its area."""


def torch_dtype(name: Any) -> Any:
    import torch

    if name not in DTYPES:
        raise TransportError(f"dtype {name!r} is not one of {DTYPES}")
    return getattr(torch, name)


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Slot:
    """Where one tensor lies in an area."""

    offset: int
    shape: tuple[int, ...]
    dtype: str
    nbytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"offset": self.offset, "shape": list(self.shape), "dtype": self.dtype, "nbytes": self.nbytes}

    @classmethod
    def from_dict(cls, d: Any, area_size: int) -> Slot:
        """A slot from an untrusted message, checked: known dtype, non-negative ints, size = numel x itemsize,
        inside the area."""
        if not isinstance(d, dict):
            raise TransportError("a slot is not an object")
        shape, offset, nbytes = d.get("shape"), d.get("offset"), d.get("nbytes")
        if not isinstance(shape, list) or len(shape) > 16 or not all(_nat(s) for s in shape):
            raise TransportError(f"bad shape {str(shape)[:80]}")
        if not _nat(offset) or not _nat(nbytes):
            raise TransportError("bad offset or size")
        numel = extent = 1
        for s in shape:
            numel *= s
            extent *= max(s, 1)  # a contiguous layout's largest stride, times the first dimension
        if extent >= MAX_EXTENT:
            # No element, yet strides that overflow: (0, 2**40, 2**40) takes no byte, and its tensor cannot be made.
            raise TransportError(f"shape {str(shape)[:80]} has strides beyond any tensor")
        itemsize = torch_dtype(d.get("dtype")).itemsize
        if numel * itemsize != nbytes:
            raise TransportError(f"slot size {nbytes} is not {numel} x {itemsize} bytes")
        if offset + nbytes > area_size:
            raise TransportError(f"slot [{offset}, {offset + nbytes}) outside an area of {area_size} bytes")
        return cls(offset, tuple(shape), d["dtype"], nbytes)


# The bound on a shape's extent (the product of its dimensions, a zero counted as one): its strides must be int64
# as element counts and as byte counts (16-byte dtypes).
MAX_EXTENT = 1 << 58


def _nat(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 48


# Offsets are aligned so every tensor view is aligned for its dtype.
_ALIGN = 64


def aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def tensor_bytes(values: list[Any]) -> int:
    """Bytes an area needs for the tensors among ``values``."""
    import torch

    return sum(aligned(v.numel() * v.element_size()) for v in values if isinstance(v, torch.Tensor))


class Area:
    """One memfd and this process's mapping of it."""

    def __init__(self, name: str, size: int, fd: int | None = None, writable: bool = True) -> None:
        self.name = name
        self.size = max(int(size), 1)
        self.owner = fd is None
        if fd is None:
            fd = os.memfd_create(f"kb-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, self.size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SIZE_SEALS)  # nobody shrinks it under a mapping (SIGBUS)
        self.fd = fd
        self.writable = writable
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        self.map: mmap.mmap | None = mmap.mmap(fd, self.size, mmap.MAP_SHARED, prot)
        self.sealed = False
        self.pinned_ptr: int | None = None

    def pin(self) -> bool:
        """Page-lock this process's mapping for the GPU (``cudaHostRegister``; read-only for sealed areas), so copies
        between it and the device run at DMA speed (tens of GB/s instead of a few through pageable staging). A
        no-op without CUDA; False where the driver refuses (the copies still work, slower)."""
        import torch

        if self.map is None or self.pinned_ptr is not None or not torch.cuda.is_available():
            return False
        ptr = self.view(Slot(0, (self.size,), "uint8", self.size)).data_ptr()
        cudart = torch.cuda.cudart()
        rc = cudart.cudaHostRegister(ptr, self.size, 0 if self.writable else _CUDA_HOST_REGISTER_READ_ONLY)
        if int(getattr(rc, "value", rc)) != 0:
            return False
        self.pinned_ptr = ptr
        return True

    def _unpin(self) -> None:
        if self.pinned_ptr is not None:
            import torch

            torch.cuda.cudart().cudaHostUnregister(self.pinned_ptr)
            self.pinned_ptr = None

    # -- writing (the trusted side; the answer's process for its output area) ------------------------------------
    def write(self, values: list[Any], start: int = 0) -> list[dict[str, Any]]:
        """Store ``values`` from ``start``: tensors as bytes (entries ``{"tensor": slot}``), everything else as
        JSON values (``{"value": v}``; ints, floats, bools, strings, None and lists of them)."""
        import torch

        entries: list[dict[str, Any]] = []
        offset = aligned(start)
        for v in values:
            if isinstance(v, torch.Tensor):
                v = v.detach()
                n = v.numel() * v.element_size()
                if offset + n > self.size:
                    raise TransportError(f"area {self.name}: {offset + n} bytes needed, {self.size} available")
                slot = Slot(offset, tuple(v.shape), dtype_name(v.dtype), n)
                if n:
                    self.view(slot).copy_(v.contiguous().reshape(-1).view(torch.uint8))
                entries.append({"tensor": slot.to_dict()})
                offset = aligned(offset + n)
            else:
                entries.append({"value": _plain(v)})
        return entries

    def view(self, slot: Slot) -> Any:
        """The slot's bytes as a flat uint8 tensor over the mapping (no copy)."""
        import torch

        if self.map is None:
            raise TransportError(f"area {self.name} is not mapped")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only mappings: torch warns that the buffer is not writable
            return torch.frombuffer(self.map, dtype=torch.uint8, count=slot.nbytes, offset=slot.offset)

    def seal(self) -> None:
        """Unmap and seal: from now on nobody can write, shrink or grow the file. Maps it back read-only."""
        self._unpin()
        if self.map is not None:
            self.map.close()  # F_SEAL_WRITE is refused while a writable shared mapping exists
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS)
        self.sealed = True
        self.writable = False
        self.map = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ)

    def fix_seals(self) -> None:
        """A writable area handed to an answer's process: no seal can be added any more (its size is already
        fixed), so that process cannot seal it against the trusted side's writes either."""
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL)

    # -- reading -------------------------------------------------------------------------------------------------
    def read(self, entries: Any, device: Any) -> list[Any]:
        """Copies of the values ``entries`` describe, tensors on ``device`` (never views of the mapping)."""
        return [v.to(device=device, copy=True) if isinstance(v, _torch().Tensor) else v for v in self.views(entries)]

    def views(self, entries: Any) -> list[Any]:
        """The values ``entries`` describe, tensors as typed views of the mapping (no copy; read-only where the
        mapping is): what the trusted side wrote, for comparing against without a copy of one's own."""
        torch = _torch()
        if not isinstance(entries, list) or len(entries) > 4096:
            raise TransportError("entries are not a list")
        out = []
        for e in entries:
            if isinstance(e, dict) and "tensor" in e:
                slot = Slot.from_dict(e["tensor"], self.size)
                dtype = torch_dtype(slot.dtype)
                flat = self.view(slot) if slot.nbytes else torch.empty(0, dtype=torch.uint8, device="cpu")
                out.append(flat.view(dtype).reshape(slot.shape))
            elif isinstance(e, dict) and "value" in e:
                out.append(_unplain(e["value"]))
            else:
                raise TransportError("an entry is neither a tensor nor a value")
        return out

    def close(self) -> None:
        self._unpin()
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:
                pass  # a tensor still views it; the mapping goes with the process
            self.map = None
        if self.owner and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def spec(self) -> dict[str, Any]:
        """What the answer's process needs to map the area (its fd goes with it: ``ChildProcess.deliver_areas``)."""
        return {"fd": self.fd, "size": self.size, "writable": not self.sealed}


def _plain(v: Any) -> Any:
    """A JSON form of a non-tensor value that keeps lists and tuples apart (``nn`` modules treat them alike, answer
    code may not)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return {type(v).__name__: [_plain(x) for x in v]}
    raise TransportError(f"a value of type {type(v).__name__} cannot be sent to the answer's process")


def _unplain(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"list"} and isinstance(v["list"], list):
            return [_unplain(x) for x in v["list"]]
        if set(v) == {"tuple"} and isinstance(v["tuple"], list):
            return tuple(_unplain(x) for x in v["tuple"])
        raise TransportError("a value is neither a scalar, a list nor a tuple")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TransportError("a value is neither a scalar, a list nor a tuple")


def open_areas(specs: dict[str, Any]) -> dict[str, Area]:
    """The answer's process: map the areas the trusted side passed; only ``output`` writable (the process only
    reads its inputs, so its mapping of them stays what the trusted side wrote)."""
    return {name: Area(name, int(s["size"]), fd=int(s["fd"]), writable=bool(s["writable"]) and name == "output")
            for name, s in specs.items()}


def _torch() -> Any:
    import torch

    return torch
