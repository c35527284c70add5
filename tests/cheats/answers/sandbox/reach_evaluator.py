# SANDBOX: from a fresh interpreter the answer starts (no monitor in it), reach the evaluating process and the
# host: signal it and its process group, attach to it with ptrace, read its memory (process_vm_readv and
# /proc/<pid>/mem), connect to a TCP listener and an abstract unix socket the evaluator holds, and leave a SysV
# shared-memory segment behind (it would outlive the process in the host's IPC namespace). Correct output only if
# every attempt failed; else the forward raises with the list of what got through. Template: the test fills in
# __HOST_PID__, __HOST_PGID__, __PORT__, __ABSTRACT__ and __SHM_KEY__.
import json
import os
import sys
import _posixsubprocess

import torch
import torch.nn as nn
import triton
import triton.language as tl

HELPER = r"""
import ctypes, json, os, socket, sys
pid, pgid, port, abstract, key = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
libc = ctypes.CDLL(None, use_errno=True)
got = []
for what, f in (("kill", lambda: os.kill(pid, 0)), ("killpg", lambda: os.killpg(pgid, 0))):  # 0: may it signal?
    try:
        f()
        got.append(what)
    except OSError:
        pass
if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
    got.append("ptrace")
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
class IOV(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local, remote = IOV(ctypes.addressof(buf), 8), IOV(0x400000, 8)
libc.process_vm_readv.restype = ctypes.c_ssize_t
if libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) >= 0 or ctypes.get_errno() == 14:
    got.append("process_vm_readv")  # EFAULT: the process is there and readable, only the address was wrong
try:
    with open(f"/proc/{pid}/mem", "rb") as f:
        got.append("/proc/pid/mem")
except OSError:
    pass
for fam, addr in ((socket.AF_INET, ("127.0.0.1", port)), (socket.AF_UNIX, "\0" + abstract)):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        got.append(f"connect {addr!r}")
    except OSError:
        pass
    s.close()
if libc.shmget(key, 4096, 0o1000 | 0o600) >= 0:  # IPC_CREAT: the test looks for it in the host's namespace
    got.append("shmget (found on the host?)")
print(json.dumps(got))
"""


def attempts() -> list[str]:
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    args = [sys.executable.encode(), b"-I", b"-c", HELPER.encode(), b"__HOST_PID__", b"__HOST_PGID__", b"__PORT__",
            b"__ABSTRACT__", b"__SHM_KEY__"]
    pid = _posixsubprocess.fork_exec(args, [args[0]], True, (out_w,), None, None, -1, -1, -1, out_w, -1, -1, r, w,
                                     True, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.close(out_w)
    os.read(r, 64)
    os.close(r)
    data = b""
    while chunk := os.read(out_r, 65536):
        data += chunk
    os.close(out_r)
    os.waitpid(pid, 0)
    got = json.loads(data.decode().strip().splitlines()[-1])
    return [g for g in got if not g.startswith("shmget")]  # the segment itself is the test's to look for


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.escaped = attempts()

    def forward(self, a, b):
        if self.escaped:
            raise RuntimeError("escaped: " + "; ".join(self.escaped))
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
