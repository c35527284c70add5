# SANDBOX: write outside the private temporary directory through every path the in-process monitor does not see
# (C and C++ code opens the files itself: no audit event), into each place an evaluation must not change: the
# repository, the store, the host's /tmp, /var/tmp and /dev/shm, and the evaluation's folder that holds the other
# answers' folders; and overwrite an existing file of the repository in place through a shared mapping. Correct
# output only if every write failed; else the forward raises with the list of what got through. Template: the test
# fills in __DIRS__ (JSON list) and __EXISTING__.
import json
import os
import sqlite3
import _posixsubprocess

import torch
import torch.nn as nn
import triton
import triton.language as tl

DIRS = json.loads("""__DIRS__""")
EXISTING = "__EXISTING__"


def from_file(path: str) -> None:
    t = torch.from_file(path, shared=True, size=16, dtype=torch.uint8)
    t.fill_(7)


def storage_from_file(path: str) -> None:
    torch.UntypedStorage.from_file(path, shared=True, nbytes=16).fill_(7)


def cpp_writer(path: str) -> None:
    w = torch._C.PyTorchFileWriter(path)
    w.write_record("data", b"x" * 16, 16)
    w.write_end_of_file()


def sqlite(path: str) -> None:
    con = sqlite3.connect(path)
    con.execute("create table t (x)")
    con.commit()
    con.close()


def fifo(path: str) -> None:
    os.mkfifo(path)


def shell(path: str) -> None:
    r, w = os.pipe()
    args = [b"/bin/sh", b"-c", f"echo escaped > '{path}'".encode()]
    pid = _posixsubprocess.fork_exec(args, [b"/bin/sh"], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w,
                                     True, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    if not os.path.exists(path):
        raise OSError("not written")


def nested_namespace(path: str) -> None:
    # A user and mount namespace of its own, where it is root: remount / read-write, then write.
    r, w = os.pipe()
    script = f"mount -o remount,rw / 2>/dev/null; mount -o remount,rw '{os.path.dirname(path)}' 2>/dev/null; " \
             f"echo escaped > '{path}'"
    args = [b"/usr/bin/unshare", b"--user", b"--map-root-user", b"--mount", b"/bin/sh", b"-c", script.encode()]
    pid = _posixsubprocess.fork_exec(args, [args[0]], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w,
                                     True, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    if not os.path.exists(path):
        raise OSError("not written")


WAYS = {"torch.from_file": from_file, "UntypedStorage.from_file": storage_from_file,
        "PyTorchFileWriter": cpp_writer, "sqlite3": sqlite, "mkfifo": fifo, "shell": shell,
        "nested_namespace": nested_namespace}


def escapes() -> list[str]:
    got = []
    # The folder above this process's own private one holds the other answers' folders of this evaluation.
    for d in DIRS + [os.path.dirname(os.getcwd())]:
        for name, way in WAYS.items():
            path = os.path.join(d, f"kb_escape_{name.replace('.', '_')}_{os.getpid()}")
            try:
                way(path)
                got.append(f"{name} -> {path}")
            except Exception:  # noqa: BLE001 - refused: what the sandbox must do
                pass
    try:
        t = torch.from_file(EXISTING, shared=True, size=os.path.getsize(EXISTING), dtype=torch.uint8)
        t.fill_(ord("x"))
        got.append(f"overwrote {EXISTING}")
    except Exception:  # noqa: BLE001
        pass
    return got


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.escaped = escapes()

    def forward(self, a, b):
        if self.escaped:
            raise RuntimeError("escaped: " + "; ".join(self.escaped))
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
