"""Unit tests of the evaluator's pure parts: verdicts, status mapping, seeds, statistics, the result channel."""

from __future__ import annotations

import math
import os
import threading
import time

import pytest
import torch

from workflow_scripts.evaluation import timing
from workflow_scripts.evaluation.answer import EvalConfig
from workflow_scripts.evaluation.channel import (
    ChannelReader,
    ChildDied,
    ChildTimeout,
    ProtocolError,
    Sender,
)
from workflow_scripts.evaluation.protocol import (COMPARE_CHUNK, allclose_and_max_diff, compare_outputs, decide_status,
                                                  kernelbench_trial_seeds, max_abs_diff)
from workflow_scripts.core.statuses import COMPILED_STATUSES, FLAGS, Status, is_compiled, is_integrity_flag

# -- seeds ---------------------------------------------------------------------------------------------------


def test_kernelbench_seed_derivation() -> None:
    # KernelBench: torch.manual_seed(42); [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    torch.manual_seed(42)
    expected = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    assert kernelbench_trial_seeds(42, 5) == expected == [734796314, 576165995, 2197670066, 839703249, 2584932063]


def test_seed_derivation_leaves_global_rng_alone() -> None:
    torch.manual_seed(7)
    a = torch.rand(3)
    torch.manual_seed(7)
    kernelbench_trial_seeds(42, 5)
    assert torch.equal(torch.rand(3), a)


# -- comparisons ---------------------------------------------------------------------------------------------


def test_compare_ok_and_tolerance() -> None:
    r = torch.ones(4, 4)
    assert compare_outputs([r], [r + 5e-5], 1e-4, 1e-4)[0] == "ok"
    v, d, _ = compare_outputs([r], [r + 1e-3], 1e-4, 1e-4)
    assert v == "value_mismatch" and d == pytest.approx(1e-3, rel=1e-3)


def test_nan_never_passes() -> None:
    r = torch.tensor([1.0, float("nan")])
    v, d, detail = compare_outputs([r], [r.clone()], 1e-4, 1e-4)
    assert v == "value_mismatch" and d is None and "NaN" in detail
    assert compare_outputs([torch.ones(2)], [torch.tensor([1.0, float("nan")])], 1e-4, 1e-4)[0] == "value_mismatch"


def test_chunked_comparison_matches_allclose_and_max_diff() -> None:
    """The one-pass chunked check gives torch.allclose's verdict and max_abs_diff's number on every case, across
    chunk boundaries: exact copies, tolerances either side, NaN and inf in one chunk, other dtypes."""
    torch.manual_seed(0)
    cases = []
    for n in (1, 7, COMPARE_CHUNK + 3, 3 * COMPARE_CHUNK):
        a = torch.randn(n)
        cases += [(a, a.clone()), (a, a + 1e-5), (a, a + 1e-3), (a, a * (1 + 1e-5))]
        far = a.clone()
        far[-1] += 1.0  # only the last chunk differs
        nan, inf = a.clone(), a.clone()
        nan[n // 2], inf[-1] = float("nan"), float("inf")
        inf_off = inf.clone()
        inf_off[0] += 1.0
        zeros = torch.zeros(n)
        complex_a = torch.complex(a, a)
        complex_nan = complex_a.clone()
        complex_nan[-1] = complex(0.0, float("nan"))
        cases += [(a, far), (a, nan), (nan, nan.clone()), (inf, inf.clone()), (inf, inf_off),
                  (a.double(), a.double() + 1e-9), (a.half(), a.half().clone()), (complex_a, complex_a + 1e-6),
                  (zeros, -zeros),  # equal values in other bits
                  (a.bfloat16(), a.bfloat16().clone()), (complex_a, complex_a.clone()), (complex_nan, complex_nan)]
    for ref, new in cases:
        expected_ok = bool(torch.allclose(ref, new, atol=1e-4, rtol=1e-4))
        expected_d = max_abs_diff(ref, new)
        ok, d = allclose_and_max_diff(ref, new, 1e-4, 1e-4)
        assert ok == expected_ok, (ref.numel(), ref.dtype)
        assert (d != d and expected_d != expected_d) or d == expected_d, (ref.numel(), ref.dtype, d, expected_d)


def test_same_bits_compares_bytes_in_any_layout() -> None:
    from workflow_scripts.evaluation.protocol import same_bits

    a = torch.randn(1001)
    assert same_bits(a, a.clone()) and not same_bits(a, torch.where(a == a[500], -a, a))
    assert not same_bits(torch.zeros(8), -torch.zeros(8))  # equal values, other bits
    assert same_bits(a[1:], a.clone()[1:])  # an offset that no wide integer view allows
    assert same_bits(a.half()[3:6], a.half()[3:6].clone()) and same_bits(a[::2], a[::2].clone())


def test_inf_matches_itself() -> None:
    r = torch.tensor([1.0, float("inf")])
    assert compare_outputs([r], [r.clone()], 1e-4, 1e-4)[0] == "ok"


def test_shape_dtype_and_structure() -> None:
    r = torch.ones(4, 4)
    assert compare_outputs([r], [torch.ones(16)], 1e-4, 1e-4)[0] == "shape_mismatch"
    assert compare_outputs([r], [r.double()], 1e-4, 1e-4)[0] == "dtype_mismatch"
    assert compare_outputs([r, r], [r], 1e-4, 1e-4)[0] == "shape_mismatch"


def test_integer_and_bool_outputs_must_be_equal() -> None:
    a = torch.arange(10)
    assert compare_outputs([a], [a.clone()], 1e-4, 1e-4)[0] == "ok"
    b = a.clone()
    b[3] += 1
    assert compare_outputs([a], [b], 1e-4, 1e-4)[0] == "value_mismatch"
    m = torch.tensor([True, False])
    assert compare_outputs([m], [m.clone()], 1e-4, 1e-4)[0] == "ok"
    assert compare_outputs([m], [~m], 1e-4, 1e-4)[0] == "value_mismatch"


def test_allclose_direction_is_kernelbench() -> None:
    # KernelBench calls torch.allclose(ref, new): rtol scales |new|.
    ref, new = torch.tensor([1.0]), torch.tensor([1.00019])
    assert compare_outputs([ref], [new], 1e-4, 1e-4)[0] == ("ok" if torch.allclose(ref, new, 1e-4, 1e-4)
                                                             else "value_mismatch")


# -- status mapping ------------------------------------------------------------------------------------------


def _st(**kw) -> Status:
    base = dict(imported=True, pre_import_status=None, failure=None, trial_verdicts=["ok"] * 6, flags=[],
                require_triton=True, all_calls_launched=True)
    base.update(kw)
    return decide_status(**base)


def test_status_precedence() -> None:
    assert _st() == Status.CORRECT
    assert _st(imported=False, pre_import_status=Status.NO_MODEL_NEW) == Status.NO_MODEL_NEW
    assert _st(imported=False) == Status.LOAD_ERROR
    assert _st(imported=False, flags=["network_access"]) == Status.LOAD_ERROR  # compiled stays False
    assert _st(flags=["inputs_mutated"], trial_verdicts=["value_mismatch"]) == Status.REJECTED_RUNTIME
    assert _st(flags=["harness_tampered:torch.allclose"], failure=Status.TIMEOUT) == Status.REJECTED_RUNTIME
    assert _st(failure=Status.TIMEOUT) == Status.TIMEOUT
    assert _st(failure=Status.CRASH, trial_verdicts=["ok"]) == Status.CRASH
    assert _st(trial_verdicts=["ok", "shape_mismatch"]) == Status.SHAPE_MISMATCH
    assert _st(trial_verdicts=["dtype_mismatch"]) == Status.DTYPE_MISMATCH
    assert _st(trial_verdicts=["value_mismatch"], all_calls_launched=False) == Status.MISMATCH
    assert _st(all_calls_launched=False) == Status.NO_TRITON_LAUNCH
    assert _st(all_calls_launched=False, require_triton=False) == Status.CORRECT
    assert _st(trial_verdicts=[]) == Status.CRASH  # no verdict is never a pass
    assert _st(failure=Status.REFERENCE_ERROR, imported=False) == Status.REFERENCE_ERROR
    assert _st(flags=["static:keeps_torch_op", "python_threads_started"]) == Status.CORRECT  # informational


def test_compiled_follows_kernelbench() -> None:
    for s in (Status.LOAD_ERROR, Status.NO_MODEL_NEW, Status.REJECTED_STATIC, Status.NO_CODE,
              Status.MISSING_COMPLETION, Status.REFERENCE_ERROR):
        assert not is_compiled(s)
    for s in (Status.CORRECT, Status.CRASH, Status.TIMEOUT, Status.REJECTED_RUNTIME, Status.NO_TRITON_LAUNCH):
        assert is_compiled(s) and s in COMPILED_STATUSES


def test_integrity_flags() -> None:
    assert is_integrity_flag("harness_tampered:torch.allclose")
    assert is_integrity_flag("hidden_input_mismatch") and FLAGS["post_timing_mismatch"].rejects
    assert not is_integrity_flag("static:keeps_torch_op")
    assert not is_integrity_flag("python_threads_started")


# -- statistics ----------------------------------------------------------------------------------------------


def test_stats() -> None:
    s = timing.stats([1.0, 2.0, 3.0, 10.0])
    assert s["mean"] == 4.0 and s["median"] == 2.5 and s["min"] == 1.0 and s["max"] == 10.0 and s["n"] == 4
    assert s["std"] == pytest.approx(math.sqrt(((3**2) + 2**2 + 1 + 6**2) / 4))  # population (np.std)
    assert timing.stats([2.0, 1.0, 3.0])["median"] == 2.0
    assert timing.stats([]) is None
    assert timing.stats([1.0, float("nan")]) is None
    assert s["trials"] == [1.0, 2.0, 3.0, 10.0]


def test_timing_protocol_defaults() -> None:
    g = EvalConfig(device="cuda").timing_protocol()
    assert (g.warmup, g.trials, g.discard_first, g.l2_flush_mib, g.no_grad) == (3, 100, 1, 256, True)
    c = EvalConfig(device="cpu").timing_protocol()
    assert (c.warmup, c.trials) == (1, 10)
    assert EvalConfig(device="cpu", timing_trials=4).timing_protocol().trials == 4


def test_cpu_clock_discards_and_scrubs() -> None:
    clock = timing.Clock("cpu")
    seen = []

    def fn(x):
        return x * 2

    def after(out, phase, ms):
        seen.append((phase, ms))
        timing.scrub(out)
        assert torch.isnan(out).all()

    raw = clock.time_callable(fn, [torch.ones(3)], timing.TimingProtocol(warmup=2, trials=4, discard_first=1, l2_flush_mib=256, launch_headroom_us=0.0), after)
    assert len(raw.trials_ms) == 4 and len(raw.discarded_ms) == 1 and len(raw.warmup_ms) == 2
    assert [phase for phase, _ in seen] == ["warmup"] * 2 + ["trial"] * 5
    # the hook gets each trial's own time (the answer's child reports it to the trusted side), none for a warm-up
    assert [ms for _, ms in seen] == [None, None] + raw.discarded_ms + raw.trials_ms


def test_scrub_kinds() -> None:
    f, i, b = torch.ones(3), torch.ones(3, dtype=torch.int64), torch.ones(3, dtype=torch.bool)
    timing.scrub((f, i, b))
    assert torch.isnan(f).all() and (i == -7).all() and not b.any()


# -- the result channel --------------------------------------------------------------------------------------


def _pipe():
    r, w = os.pipe()
    return ChannelReader(r), Sender(w), r, w


def test_channel_roundtrip() -> None:
    reader, sender, r, w = _pipe()
    sender.send({"type": "output", "a": 1})
    sender.send({"type": "done"})
    m = reader.recv(time.monotonic() + 5)
    assert m.type == "output" and m.header["a"] == 1
    assert reader.recv(time.monotonic() + 5).type == "done"
    os.close(r), os.close(w)


def _frame(header: bytes) -> bytes:
    from workflow_scripts.evaluation.channel import MAGIC

    return MAGIC + len(header).to_bytes(4, "big") + header


@pytest.mark.parametrize("header", [
    b"[" * 100_000 + b"]" * 100_000,  # well framed, but too deeply nested for the JSON parser
    b'["not", "an", "object"]',
    b"\xff\xfe not json",
])
def test_channel_malformed_headers_are_the_senders_fault(header: bytes) -> None:
    """The answer's process writes its own frames (it holds the channel) with a malformed header: a ProtocolError
    (the answer's failure), never an exception of the evaluator's own."""
    reader, _, r, w = _pipe()
    frame = _frame(header)
    writer = threading.Thread(target=os.write, args=(w, frame))
    writer.start()
    with pytest.raises(ProtocolError):
        reader.recv(time.monotonic() + 5)
    writer.join()
    os.close(r), os.close(w)


@pytest.mark.parametrize("report", [None, "3", [1, 1], [1, 1, 1, 1], [1, True, 1], [1, -1, 1], [1, 1.0, 1]])
def test_a_block_reports_one_launch_count_per_call_or_the_message_is_forged(report: object) -> None:
    """The trusted side decides triton_launch_skipped_in_timing from these counts: a report that is not one
    non-negative integer per call (warm-up, discarded and timed) is the answer's failure, not "no zero seen"."""
    from workflow_scripts.evaluation.evidence import launch_counts

    assert launch_counts([2, 0, 1], 3) == [2, 0, 1]
    with pytest.raises(ProtocolError, match="launches_per_call is not 3 counts"):
        launch_counts(report, 3)


def test_channel_refuses_an_oversized_header_before_reading_it() -> None:
    from workflow_scripts.evaluation.channel import MAGIC, MAX_HEADER

    reader, _, r, w = _pipe()
    os.write(w, MAGIC + (MAX_HEADER + 1).to_bytes(4, "big"))
    t0 = time.monotonic()
    with pytest.raises(ProtocolError, match="oversized"):
        reader.recv(time.monotonic() + 5)
    assert time.monotonic() - t0 < 1  # refused at once, nothing allocated or awaited
    os.close(r), os.close(w)


def test_channel_holds_no_secret_and_refuses_what_is_not_a_frame() -> None:
    """No key exists on either side (a key in the answer's process would be the answer's): a frame written by any
    writer of the pipe is read as the child's message, to be validated as the answer's word; what is not a whole
    frame is refused."""
    import inspect

    from workflow_scripts.evaluation import channel

    assert list(inspect.signature(Sender).parameters) == ["fd"]
    assert list(inspect.signature(ChannelReader).parameters) == ["fd"]
    assert "hmac" not in vars(channel) and "_mac" not in vars(channel)
    reader, _, r, w = _pipe()
    os.write(w, _frame(b'{"type": "done"}'))
    assert reader.recv(time.monotonic() + 5).type == "done"
    # Garbage.
    reader3, _, r3, w3 = _pipe()
    os.write(w3, b'{"type": "done", "status": "correct"}\n')
    with pytest.raises(ProtocolError):
        reader3.recv(time.monotonic() + 5)
    for fd in (r, w, r3, w3):
        os.close(fd)


def test_channel_eof_timeout_and_header_cap() -> None:
    reader, sender, r, w = _pipe()
    with pytest.raises(ChildTimeout):
        reader.recv(time.monotonic() + 0.2)
    t = threading.Thread(target=lambda: _ignore_broken_pipe(
        lambda: sender.send({"type": "x", "pad": "y" * (2 << 20)})), daemon=True)  # over the 1 MiB header cap
    t.start()
    with pytest.raises(ProtocolError):
        reader.recv(time.monotonic() + 5)
    os.close(r)  # the writer gets EPIPE and stops
    t.join(5)
    os.close(w)
    reader2, _, r2, w2 = _pipe()
    os.close(w2)
    with pytest.raises(ChildDied):
        reader2.recv(time.monotonic() + 5)
    os.close(r2)


def test_a_receive_whose_deadline_moves_waits_while_it_moves_and_keeps_events() -> None:
    """``ChildProcess.recv_moving`` (an answer's process stopped by its job's lease: those seconds move its
    deadline): a message sent after the first deadline, but before the moved one, is received; an event before it
    is kept, not returned; a deadline that stops moving ends the wait."""
    from workflow_scripts.evaluation.sandbox import ChildProcess

    reader, sender, r, w = _pipe()
    child = ChildProcess.__new__(ChildProcess)  # only its channel: no process behind it
    child.reader, child.events = reader, []
    start = time.monotonic()
    moved = {"s": 0.0}

    def later() -> None:
        time.sleep(0.2)
        moved["s"] = 1.0  # the process stood stopped meanwhile: its deadline moves a second later
        time.sleep(0.4)
        sender.send({"type": "event", "n": 1})
        sender.send({"type": "output"})

    writer = threading.Thread(target=later)
    writer.start()
    m = child.recv_moving(lambda: start + 0.4 + moved["s"])
    writer.join()
    assert m.type == "output" and child.events == [{"type": "event", "n": 1}]
    assert time.monotonic() - start > 0.4  # past the first deadline
    with pytest.raises(ChildTimeout):
        child.recv_moving(lambda: time.monotonic() + 0.2 if time.monotonic() - start < 1.0 else start + 1.0)
    os.close(r), os.close(w)


def _ignore_broken_pipe(f) -> None:
    try:
        f()
    except OSError:
        pass


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        EvalConfig(device="tpu")
    with pytest.raises(ValueError):
        EvalConfig(tf32="fast")
    assert EvalConfig(device="cpu").effective_timeout() == 300.0
    assert EvalConfig(device="cpu").limits().as_bytes == 16 << 30
    assert EvalConfig(device="cuda").limits().as_bytes is None  # RLIMIT_AS would break CUDA


def test_max_abs_diff_in_chunks_equals_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from workflow_scripts.evaluation import protocol

    torch.manual_seed(0)
    a, b = torch.rand(1000, 7), torch.rand(1000, 7)
    whole = (a.double() - b.double()).abs().max().item()
    monkeypatch.setattr(protocol, "DIFF_CHUNK", 64)  # many chunks, the last one partial
    assert protocol.max_abs_diff(a, b) == whole
    b[999, 6] = float("nan")
    assert protocol.max_abs_diff(a, b) != protocol.max_abs_diff(a, b)  # NaN stays NaN
    ints = torch.tensor([1, 5, -3]), torch.tensor([1, 2, 4])
    assert protocol.max_abs_diff(*ints) == 7.0
    verdict, diff, _ = protocol.compare_outputs([a], [a.clone()], 1e-4, 1e-4)
    assert verdict == "ok" and diff == 0.0


# -- memory areas handed to an answer's process ------------------------------------------------------------------


def test_an_answers_writable_area_cannot_be_resized_or_sealed_by_its_process() -> None:
    """The answer's process holds the descriptors of its writable areas (secret inputs, outputs): it may write them,
    but not shrink them under the trusted side's mapping (a SIGBUS in the evaluator), grow them, or seal them."""
    import fcntl

    from workflow_scripts.evaluation.transport import Area

    area = Area("output", 4096)
    area.fix_seals()
    os.pwrite(area.fd, b"written by the answer", 0)  # still writable
    for size in (0, 1 << 20):
        with pytest.raises(PermissionError):
            os.ftruncate(area.fd, size)
    with pytest.raises(PermissionError):
        fcntl.fcntl(area.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
    assert os.fstat(area.fd).st_size == 4096
    area.close()


# -- launch counting in compiled mode (the GPU's path), on the CPU ---------------------------------------------

_COMPILED_COUNTING = r'''
import json, os, sys
import triton.knobs as knobs
knobs.runtime.interpret = False  # the compiled-mode branch: Triton's launcher calls the launch-enter hook chain
from triton.compiler.compiler import CompiledKernel
from workflow_scripts.evaluation.channel import Sender
from workflow_scripts.evaluation.integrity import Guard, LaunchCounter
r, w = os.pipe()
os.set_blocking(w, False)
launch = LaunchCounter()
assert not launch.interpret
# What Triton's jit.py does per launch (metadata from the grid, then the launcher calls the hook chain), compiled
# under Triton's own file name before the monitor runs.
src = """
def triton_launch(grid):
    try:
        CompiledKernel.launch_metadata(object(), grid, None)
    except Exception:
        pass  # no real kernel behind it: only the grid matters here
    knobs.runtime.launch_enter_hook(None)
"""
ns = {"CompiledKernel": CompiledKernel, "knobs": knobs}
exec(compile(src, os.path.join(launch.triton_dir, "runtime", "jit.py"), "exec"), ns)
guard = Guard(Sender(w), os.getcwd(), "/nonexistent/answer.py", ("triton",))
launch.attach(guard)
sys.addaudithook(guard.hook)
guard.enforcing = True
counts = {}
ns["triton_launch"]((4,)); counts["launch"] = launch.take()
ns["triton_launch"]((0,)); counts["empty_grid"] = launch.take()
knobs.runtime.launch_enter_hook(None); counts["hook_called_directly"] = launch.take()
launch.bare = True
ns["triton_launch"]((2, 1, 1)); knobs.runtime.launch_enter_hook(None); counts["bare"] = launch.take()
ns["triton_launch"]((1, 0, 1)); counts["bare_empty_grid"] = launch.take()
launch.bare = False
ns["triton_launch"]((4,)); counts["after_timing"] = launch.take()
cells = [c.cell_contents for h in knobs.runtime.launch_enter_hook.calls for c in (h.__closure__ or ())]
cells += [c.cell_contents for c in (CompiledKernel.launch_metadata.__closure__ or ())]
counts["counter_in_closures"] = any(isinstance(x, LaunchCounter) for x in cells)
counts["intact"] = launch.intact()
# The forge: the answer flips the wrappers' fast-path switch from a closure and calls the hook chain itself in a
# correctness call (it counted 1, unflagged, before take() read the list only while timing).
switch = next(x for x in cells if isinstance(x, list) and len(x) == 3 and isinstance(x[0], bool))
switch[0] = True
knobs.runtime.launch_enter_hook(None); counts["forged_switch"] = launch.take()
counts["intact_after_forge"] = launch.intact()
print(json.dumps(counts))
'''


@pytest.mark.integration
def test_compiled_mode_launches_are_counted_from_audit_events_only_when_triton_launches(tmp_path) -> None:
    """The GPU's counting path, run on the CPU: a launch counts when Triton's own code made it over a non-empty grid,
    not over an empty grid, not when the answer calls the hook chain itself; while timing (bare) every hook call over a
    non-empty grid counts, without an audit event; and no wrapper installed into Triton holds the counter."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-c", _COMPILED_COUNTING], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(repo), TRITON_INTERPRET="0"))
    assert p.returncode == 0, p.stderr[-3000:]
    counts = json.loads(p.stdout.strip().splitlines()[-1])
    assert counts == {"launch": 1, "empty_grid": 0, "hook_called_directly": 0, "bare": 2, "bare_empty_grid": 0,
                      "after_timing": 1, "counter_in_closures": False, "intact": True,
                      "forged_switch": 0, "intact_after_forge": False}, counts
