"""Where the trusted side keeps a problem's tensors, per problem and card: the one memory plan of an evaluate job.

The trusted side holds, for every answer to a problem, the seeded trials' inputs (sealed host areas the answers read)
and the reference's outputs on them (what each answer's outputs are judged against). On a multi-GB problem these do
not all fit: level-1 problem 38 has 8 GiB of inputs and 8 GiB of outputs per trial, 80 GiB for KernelBench's five
trials. On a 141 GB H200 the outputs stayed on the GPU; on an 80 GB H100 with a 128 GB host they went to the host and
the host's out-of-memory killer ended the job, and keeping three trials' outputs on the GPU instead starved the
reference's own forward there (bench/README.md, s20). So the plan is made from measured numbers, once the first
seeded forward has run:

- ``host_input_trials``: the seeded trials whose inputs sit in sealed host areas (``HOST_INPUT_SHARE`` of the host);
  the rest wait on the device and are written into each answer's own input area when its trial starts.
- ``plan_outputs``: each seeded trial's reference outputs stay on the device while the card has room beside the
  running answer (its forward, taken as ``ANSWER_FORWARD_FACTOR`` times the reference's measured one, its inputs, the
  pristine copy and the snapshot of its outputs) and the trusted side's own working set; then on the host, while
  ``HOST_PLAN_SHARE`` of what the host has available holds them beside the answers' areas; the rest are recomputed
  when an answer is judged on that trial (the reference's forward on the trial's inputs, under the trial's seed),
  checked against a sample of the outputs kept from the first forward. Recomputing costs a forward and a copy of
  the inputs per judged trial: seconds on a multi-GB problem, where a job takes minutes.

``evaluation.resources`` derives what a job declares to Snakemake from the same constants.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
# Of a card's memory, what the plan (and the GPU's memory admission, gpu_lock) hands out: the rest is for what no
# estimate sees (the driver, fragmentation).
DEVICE_SHARE = 0.95
# Per process on the GPU: a CUDA context, the caching allocator's slack and the L2 flush buffer (256 MiB).
CUDA_CONTEXT_BYTES = 1 * GIB
# The running answer's forward, against the reference's measured one: an answer may hold more intermediates (a
# Triton kernel writing a staging buffer, an unfused composition) without finding the card full.
ANSWER_FORWARD_FACTOR = 1.5
# The sealed input areas (the timing inputs' and the seeded trials') may take this share of the host's available
# memory; the seeded trials beyond it keep their inputs on the device (on the CPU, where the device is the host, in
# this process: no saving there, the same path).
HOST_INPUT_SHARE = 0.5
# Of the host memory available once the seeded inputs are sealed, what the plan may take for reference outputs beside
# the answers' areas and the judging buffer: the rest is left to the answers' processes and whatever else the host
# runs.
HOST_PLAN_SHARE = 0.8
# Outputs at least this large: the reference's timing outputs wait on the host. Inputs or outputs at least this large:
# the memory the trusted side cached for a secret trial or for judging an answer goes back to the device after it.
LARGE_OUTPUT_BYTES = 1 * GIB
# Seeded inputs at least this large per trial are built by helper processes in parallel (reference_inputs). A
# helper's start (interpreter, torch) took about 5 s on the H200 beside the answer processes starting with it, while
# get_inputs() builds about 0.5-0.7 GB/s on one core: at 256 MiB per trial the helpers took 5.7 s for what one
# process builds in about 2 s (bench/archive/NOTES.md, eleventh session); from 1 GiB they win.
PARALLEL_INPUTS_MIN_BYTES = 1 * GIB
# An answer's child process beyond the areas it maps: Python, torch, CUDA's host side, Triton's driver (measured
# ~1-2 GiB, docs/evaluation.md).
CHILD_PROCESS_BYTES = 3 * GIB // 2

PLACEMENTS = ("device", "host", "recompute")


@dataclass(frozen=True)
class TrialBytes:
    """One seeded trial's tensors, as the trusted side measured them on its first seeded forward."""

    inputs: int
    outputs: int
    params: int
    forward_extra: int  # the forward's peak beyond its inputs (its outputs and intermediates), on its device


@dataclass(frozen=True)
class OutputPlan:
    """Where each seeded trial's reference outputs wait, in trial order: the first ``on_device`` on the device, the
    next ``on_host`` on the host, the rest recomputed when judged."""

    trials: int
    on_device: int
    on_host: int

    @property
    def recomputed(self) -> int:
        return self.trials - self.on_device - self.on_host

    def place(self, trial: int) -> str:
        if trial < self.on_device:
            return "device"
        return "host" if trial < self.on_device + self.on_host else "recompute"


def host_input_trials(trials: int, per_trial: int, timing: bool, available: int) -> int:
    """How many of a problem's seeded trials keep their inputs in sealed host areas: as many as fit
    ``HOST_INPUT_SHARE`` of the ``available`` host bytes beside the timing inputs' area. The rest wait on the
    device."""
    budget = HOST_INPUT_SHARE * available - (per_trial if timing else 0)
    return int(min(trials, max(0, budget // max(per_trial, 1))))


def answer_slots(wanted: int, area_bytes: int, available: int) -> int:
    """Answer processes with their own areas at once: the configured count, bounded so that their areas
    (``area_bytes`` each: secret inputs and outputs, page-locked on the GPU) take at most a quarter of the host's
    ``available`` memory; at least one."""
    return max(1, min(wanted, available // 4 // max(area_bytes, 1)))


def device_room(sizes: TrialBytes, timing: bool, card_bytes: int, device_inputs: int = 0) -> int:
    """Bytes of the card left for seeded reference outputs beside everything else a job holds there at once: the
    trusted side's context, parameters, the ``device_inputs`` seeded trials' inputs that wait there, and timing inputs
    (and timing outputs under ``LARGE_OUTPUT_BYTES``), its largest transient (a secret trial's forward, or an answer's outputs judged against a host-kept reference's), and
    the running answer's process (its context, its inputs and their pristine copy, the snapshot of its outputs and
    its forward). Negative where even that does not fit the card."""
    i, o = sizes.inputs, sizes.outputs
    trusted = CUDA_CONTEXT_BYTES + sizes.params + device_inputs * i
    if timing:
        trusted += i + (o if o < LARGE_OUTPUT_BYTES else 0)
    transient = max(i + sizes.forward_extra, 2 * o)
    answer = CUDA_CONTEXT_BYTES + sizes.params + 2 * i + o + int(ANSWER_FORWARD_FACTOR * sizes.forward_extra)
    return int(DEVICE_SHARE * card_bytes) - trusted - transient - answer


def plan_outputs(sizes: TrialBytes, trials: int, timing: bool, card_bytes: int | None, host_available: int,
                 slots: int, device_inputs: int = 0) -> OutputPlan:
    """Where the seeded reference outputs wait (``OutputPlan``). ``card_bytes``: the GPU's memory, None on the CPU
    (where the device is the host: outputs the host holds count as kept on the device). ``host_available``: the host
    bytes available now, the seeded inputs already sealed; ``slots``: answer processes with their own areas at once;
    ``device_inputs``: seeded trials whose inputs wait on the device.
    The first trial's outputs are always kept (the problem audit compares every trial's with them), and every
    trial's where all of them take less than ``LARGE_OUTPUT_BYTES``: a small problem keeps them where the reference
    ran, whatever the host has left."""
    o = max(sizes.outputs, 1)
    if trials * o < LARGE_OUTPUT_BYTES:
        return OutputPlan(trials, trials, 0)
    host_room = int(HOST_PLAN_SHARE * host_available) - slots * (sizes.inputs + o + CHILD_PROCESS_BYTES) - o
    if card_bytes is None:
        return OutputPlan(trials, max(1, min(trials, host_room // o)), 0)
    on_device = min(trials, max(0, device_room(sizes, timing, card_bytes, device_inputs) // o))
    on_host = min(trials - on_device, max(0, host_room // o))
    if on_device + on_host == 0 and trials:
        on_host = 1
    return OutputPlan(trials, on_device, on_host)
