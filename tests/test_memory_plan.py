"""The trusted side's memory plan (evaluation/memory_plan.py) on the problems and cards that decide it: where each
seeded trial's reference outputs wait."""

from __future__ import annotations

from workflow_scripts.evaluation import memory_plan
from workflow_scripts.evaluation.memory_plan import GIB, OutputPlan, TrialBytes, plan_outputs

# Level-1 problem 38 (L1Norm): 8 GiB of inputs and 8 GiB of outputs per trial; its forward's peak beyond its inputs
# is its output and one input-sized intermediate (torch.abs).
L1_38 = TrialBytes(inputs=8 * GIB, outputs=8 * GIB, params=0, forward_extra=16 * GIB)
H100 = int(79.2 * GIB)  # an H100 80GB HBM3 as torch reports it
H200 = int(139.8 * GIB)
# A 128 GB host once the five seeded trials' inputs and the timing inputs are sealed (48 GiB of ~115 available).
HOST_AFTER_INPUTS = 67 * GIB


def test_l1_38_keeps_no_output_on_an_80_gb_card_and_recomputes_what_the_host_cannot_hold() -> None:
    plan = plan_outputs(L1_38, 5, True, H100, HOST_AFTER_INPUTS, slots=1)
    assert plan.on_device == 0  # the answer's forward and the trusted side's own forward fill the card
    assert 1 <= plan.on_host < 5 and plan.recomputed == 5 - plan.on_host
    host_use = 5 * 8 + 8 + plan.on_host * 8 + 16 + 8  # inputs, timing area, outputs, the answer's areas, judging
    assert host_use * GIB <= 115 * GIB * 0.9  # what the OOM killer ended in s20 (126 GB) is out of reach


def test_l1_38_keeps_every_output_on_the_device_of_an_h200() -> None:
    # s10-s11: judged there with every seeded output on the device (trusted peak 80.8 GiB).
    assert plan_outputs(L1_38, 5, True, H200, HOST_AFTER_INPUTS, slots=1) == OutputPlan(5, 5, 0)


def test_small_problems_keep_every_output_on_the_device() -> None:
    small = TrialBytes(inputs=64 << 20, outputs=16 << 20, params=1 << 20, forward_extra=48 << 20)
    assert plan_outputs(small, 5, True, H100, 100 * GIB, slots=16) == OutputPlan(5, 5, 0)
    assert plan_outputs(small, 5, True, None, 100 * GIB, slots=1) == OutputPlan(5, 5, 0)  # the CPU: kept in memory


def test_the_first_trial_is_always_kept_and_device_inputs_take_their_room() -> None:
    assert plan_outputs(L1_38, 5, True, H100, 0, slots=1) == OutputPlan(5, 0, 1)
    assert plan_outputs(L1_38, 5, True, None, 0, slots=1) == OutputPlan(5, 1, 0)
    # L1/45 (16 GiB inputs, 142 MB outputs): five trials' outputs take under 1 GiB, kept where the reference ran
    l1_45 = TrialBytes(inputs=16 * GIB, outputs=142 << 20, params=0, forward_extra=142 << 20)
    assert plan_outputs(l1_45, 5, True, H100, 0, slots=1, device_inputs=3) == OutputPlan(5, 5, 0)
    # With 2 GiB outputs: the three trials whose inputs wait on the device (48 GiB) still leave an H200 room for
    # every output; an H100 has room for one output without them and none with them
    wide = TrialBytes(inputs=16 * GIB, outputs=2 * GIB, params=0, forward_extra=2 * GIB)
    assert plan_outputs(wide, 5, True, H200, 0, slots=1, device_inputs=3).on_device == 5
    assert plan_outputs(wide, 5, True, H100, 0, slots=1, device_inputs=0).on_device == 1
    assert plan_outputs(wide, 5, True, H100, 0, slots=1, device_inputs=3) == OutputPlan(5, 0, 1)


def test_small_outputs_stay_where_the_reference_ran_whatever_the_host_has_left() -> None:
    small = TrialBytes(inputs=1 << 20, outputs=1 << 20, params=0, forward_extra=1 << 20)
    assert plan_outputs(small, 5, True, None, 3 * GIB, slots=16) == OutputPlan(5, 5, 0)
    assert plan_outputs(small, 5, True, H100, 0, slots=16) == OutputPlan(5, 5, 0)


def test_answer_slots_share_a_quarter_of_the_host() -> None:
    assert memory_plan.answer_slots(16, 1 << 20, 100 * GIB) == 16
    assert memory_plan.answer_slots(16, 16 * GIB, 115 * GIB) == 1
    assert memory_plan.answer_slots(16, 16 * GIB, 0) == 1  # always one


def test_a_placement_per_trial_in_order() -> None:
    plan = OutputPlan(5, 1, 2)
    assert [plan.place(k) for k in range(5)] == ["device", "host", "host", "recompute", "recompute"]
    assert set(memory_plan.PLACEMENTS) == {plan.place(k) for k in range(5)}
