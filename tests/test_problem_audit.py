"""The problem audit (workflow_scripts/evaluation/problem_audit.py): which problems a trivial answer passes, and the
fingerprints that show an answer ignoring its inputs. Unit checks on tensors; tests/test_cheats.py runs the audit
and the flag through the evaluator."""

from __future__ import annotations

import torch

from workflow_scripts.evaluation.problem_audit import (FINGERPRINT_SAMPLES, audit_outputs, fingerprint, ignores_input,
                                                       sample_positions)

ATOL = RTOL = 1e-4


def test_tiny_outputs_are_degenerate_and_ordinary_ones_are_not() -> None:
    tiny = [[torch.rand(4, 1000) * 5e-5] for _ in range(3)]
    audit = audit_outputs(tiny, ATOL, RTOL)
    assert audit.zeros_pass and audit.constant_pass and audit.reference_input_independent and audit.degenerate
    ordinary = [[torch.randn(4, 1000)] for _ in range(3)]
    audit = audit_outputs(ordinary, ATOL, RTOL)
    assert not (audit.zeros_pass or audit.constant_pass or audit.reference_input_independent or audit.degenerate)
    assert audit.trials == 3 and audit.output_bytes == 4 * 1000 * 4


def test_a_constant_that_is_not_zero_passes_where_the_outputs_barely_vary() -> None:
    # Every output near 0.5 (a mean of many terms): zeros fail, the midrange passes.
    near_half = [[0.5 + (torch.rand(64) - 0.5) * 1e-4] for _ in range(2)]
    audit = audit_outputs(near_half, ATOL, RTOL)
    assert not audit.zeros_pass and audit.constant_pass and audit.degenerate


def test_the_constant_is_one_for_every_trial() -> None:
    # A scalar loss per trial: each value is its own midrange, but no one constant passes on every trial (the
    # demo's cross-entropy, audited degenerate before this test); a loss whose trials agree within the tolerance does.
    losses = [[torch.tensor(2.30 + 0.01 * k)] for k in range(5)]
    assert not audit_outputs(losses, ATOL, RTOL).constant_pass
    closed_form = [[torch.tensor(2.0 + 1e-5 * k)] for k in range(5)]  # L1/94's MSE over 8 GB: a closed form passes
    assert audit_outputs(closed_form, ATOL, RTOL).constant_pass


def test_integer_boolean_nan_and_empty_outputs() -> None:
    assert audit_outputs([[torch.zeros(5, dtype=torch.int64)]] * 2, ATOL, RTOL).zeros_pass
    ints = audit_outputs([[torch.tensor([3, 3, 3])]] * 2, ATOL, RTOL)
    assert ints.constant_pass and not ints.zeros_pass
    assert not audit_outputs([[torch.tensor([1, 2])]], ATOL, RTOL).constant_pass
    assert audit_outputs([[torch.ones(4, dtype=torch.bool)]], ATOL, RTOL).constant_pass
    nan = audit_outputs([[torch.tensor([float("nan"), 0.0])]], ATOL, RTOL)
    assert not (nan.zeros_pass or nan.constant_pass)
    assert audit_outputs([[torch.empty(0)]], ATOL, RTOL).zeros_pass
    assert not audit_outputs([], ATOL, RTOL).degenerate  # nothing audited: nothing said


def test_fingerprints_tell_outputs_on_different_inputs_apart() -> None:
    a, b = torch.rand(3, 70000), torch.rand(3, 70000)
    assert fingerprint([a]) == fingerprint([a.clone()]) and fingerprint([a]) != fingerprint([b])
    assert fingerprint([torch.zeros(2, 3)]) != fingerprint([torch.zeros(3, 2)])  # the shape is part of it
    assert fingerprint([a.t()]) == fingerprint([a.t().contiguous()])  # a layout is not a different output
    zeros, refs = [fingerprint([torch.zeros(8)])] * 3, [fingerprint([torch.rand(8)]) for _ in range(3)]
    assert ignores_input(zeros, refs)
    assert not ignores_input(refs, refs)  # an honest answer
    assert not ignores_input(zeros, zeros)  # the reference too is the same on every trial: nothing to tell
    assert not ignores_input(zeros[:1], refs[:1])  # one trial says nothing


def test_samples_reach_the_last_element_of_outputs_past_float32_precision() -> None:
    """A float32 linspace rounds the last position of a 2**26 - 1 element output up past its end (the device
    assert that ended L1/40's evaluation on an H200): the positions are integers, the first and last included."""
    n = 2**26 - 1
    positions = sample_positions(n)
    assert positions[0] == 0 and positions[-1] == n - 1 and len(positions) == FINGERPRINT_SAMPLES
    assert bool((positions[1:] > positions[:-1]).all())
    big = torch.zeros(n, dtype=torch.uint8)
    big[-1] = 7
    assert fingerprint([big]) != fingerprint([torch.zeros(n, dtype=torch.uint8)])  # the last element is sampled
    assert sample_positions(1).tolist() == [0] and sample_positions(0).numel() == 0
    assert sample_positions(5).tolist() == [0, 1, 2, 3, 4]


def test_tf32_sensitivity_is_measured_at_both_extremes_and_the_run_s_flags_come_back() -> None:
    import torch

    from workflow_scripts.evaluation.problem_audit import tf32_sensitive, tf32_switches

    outputs = [torch.ones(8)]
    owner, name, on, _ = tf32_switches(torch)[0]
    read_back = [(o, n, getattr(o, n)) for o, n, _, _ in tf32_switches(torch)]
    seen = []

    def flags_dependent() -> list:  # as a matmul-heavy reference: moves by 1e-3 with TF32 on
        seen.append(getattr(owner, name) == on)
        return [torch.ones(8) + (1e-3 if seen[-1] else 0.0)]

    assert tf32_sensitive(torch, flags_dependent, outputs, atol=1e-4, rtol=1e-4)
    assert tf32_sensitive(torch, lambda: [torch.ones(8)], outputs, atol=1e-4, rtol=1e-4) is False
    assert not tf32_sensitive(torch, flags_dependent, outputs, atol=1e-2, rtol=1e-2)  # within a looser tolerance
    assert seen[:1] == [True] and False in seen  # all TF32 first, then IEEE
    assert all(getattr(o, n) == value for o, n, value in read_back)  # every switch as the run had it
    # and the legacy flags read as before (they raise while the new API's switches stand changed)
    assert isinstance(torch.backends.cuda.matmul.allow_tf32, bool) and torch.get_float32_matmul_precision()
