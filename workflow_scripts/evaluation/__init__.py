"""Running answers and baselines: the run configuration, the timing protocol, the isolated child processes and
their channel, the environment fingerprint and the GPU locks.

Two sides
=========

**The trusted side** is the evaluating process (a pipeline job, or ``python -m workflow_scripts evaluate``) and the
helpers it starts that run only the problem's own code. Everything that decides a verdict or a time runs here:

* ``answer`` (``evaluate_answers``: every answer to one problem, ``ProblemEvaluator``), ``session`` (one answer's
  conversation with its process: what is asked, when, under which deadline), ``verdict`` (the result record and
  the status), ``evidence`` (every value the answer's process sends, validated as untrusted), ``protocol`` (seeds,
  output comparison, status precedence, the watchdog's limits), ``reference`` (the problem's model, its inputs and
  its outputs, kept here; ``reference_inputs``: helper processes that build multi-GB seeded inputs), ``timing``
  (statistics over raw times), ``config`` and ``records``;
* the confinement of the children: ``sandbox`` (starting and driving one), ``isolation`` (the OS sandbox and its
  probe), ``confinement`` (what an answer's process finds empty: all but the system, the interpreter, the harness and
  its own folder), ``freezer`` (stopping an answer's process tree while it is not asked to run), ``limits``,
  ``memory_cap`` (the host-memory cap of a child's process tree), ``start_gate`` (when a child's device part may
  start), ``triton_stub_cache``;
* the job around it: ``gpu_lock`` (which GPU, shared or exclusive, once the problem's expected memory fits there),
  ``resources`` (what a job declares, and asks its GPU for), ``jobs``,
  ``environment`` (the fingerprint); ``baseline`` (the baselines' trusted side) and the parent half of
  ``baseline_windows`` (a baseline's exclusive windows on its GPU).

**The answer's process** runs ``child`` and, for an answer, ``child_answer`` with the checks it runs in that
process, ``integrity`` (the audit-hook monitor and the launch counter) and ``tamper`` (the identity snapshot), with
the child halves of ``channel`` (``Sender``, ``read_command``), ``transport`` (the memory areas), ``timing``
(``Clock``), ``limits`` (``apply_rlimits``) and ``environment`` (the TF32 flags). Once the answer is imported,
everything in that process is the answer's to read and rewrite: what it reports is evidence, never a verdict.

**A baseline's process** runs ``child``'s baseline role: the problem's own code (trusted), isolated the same way so
that a crash or a hang costs only that baseline, with the child half of ``baseline_windows`` (Inductor's autotuning
benchmarks wrapped to ask the trusted side for a window on the GPU).

Trust model
===========

The answer is untrusted Python running with the child's full privileges. Anything inside the answer's process can
be read or rewritten by it: the harness's variables, ``torch`` itself, the bytes the process sends (no secret is ever
sent there: no message key, no seed of a trial still to come; a timed call's input seed arrives with the reply that
starts that call, and tells nothing its inputs do not).
So the design never asks the answer's process for a verdict; it asks it only for raw data and makes that data
useless to forge:

* **Reference outputs are computed on the trusted side** (``workflow_scripts.evaluation.reference``, in the
  evaluating process), once per problem, and never leave it. The answer's process receives only the inputs, through
  memory areas (``transport``): the seeded ones sealed (nobody can write them once built, so one answer cannot
  change another's inputs), its secret ones written into its own area only when the trial starts. Nothing of the
  reference exists in the answer's process: reading "the expected output" (``gc.get_objects``, frame walking,
  ``torch.empty`` returning freed memory) finds nothing, and mutating inputs cannot change the reference.
* **The trusted side computes every verdict** (shape, dtype, ``torch.allclose(ref, out, atol, rtol)``, NaN,
  statistics) on its own device, from a copy of the bytes the answer's process wrote into its output area. The
  answer's process can write any bytes it likes; to be judged correct they must equal the reference's on every
  trial, including **hidden trials whose input seed the parent draws at random per answer** (recorded for replay)
  and whose inputs are written only after the answer is loaded, so no output can be precomputed. Timing runs on
  inputs from another secret seed, redrawn before every timed call from a fresh seed (outside the window, in place)
  where the problem's input builder runs without its classes, so no values come back for a cache keyed on them; a
  secret sample of timed calls is judged on the trusted side against the reference on the same draw. After timing
  the same input tensors are overwritten in place with inputs from a third secret seed and the answer must produce
  their outputs (``post_timing_mismatch``), so caches keyed on tensor identity, address or shape are caught. Each timed output is scrubbed (NaN) after the call, outside the timed region, so handing
  back old memory yields NaN.
* **What the answer can still influence** (and what guards it): the timing numbers and the Triton launch count
  it reports are measured inside its process. The harness captures the timer and checker functions before the
  answer is imported and calls only the captured references; the methods of its own objects (guard, launch counter,
  tamper check, sender, this child, the clock) are bound into their instance dicts, so replacing them on a class
  (reachable through ``sys.modules`` without any instance) changes nothing the harness calls. After loading, after
  every call and at the end it checks that torch/time/triton globals, the TF32 flags, its own module globals, every
  class entry and function code (defaults, closure cells) of its modules, its objects' attributes, the launch hooks
  and the process state that hands out frames (signal handlers, timers, the frame-evaluation callback, ``gc``'s
  debug flags) are what they were (``harness_tampered:<name>``); replacing a harness function's code is refused by
  the audit hook. Launches are counted from audit events the wrappers installed into Triton raise and only the audit
  hook receives (while timing, from a list the wrappers hold, read only then); a launch counts only when Triton's own
  launcher made it over a non-empty grid. An answer that reaches the harness's frames through a route the monitor does not see, or writes
  raw memory, could still forge timings or launch counts; it cannot make wrong outputs pass. Speedups above 10x are
  flagged at summary level.
* **Run-time monitors** in the answer's process (a ``sys.addaudithook`` hook, which Python code cannot remove):
  writes outside the child's temporary directory, spawning processes (except Triton's own compiler calls),
  sockets, ``gc`` object enumeration, frame access from answer code (directly, through inspect, or through a standard
  function that hands the frame to its caller: ``traceback.walk_stack``/``walk_tb``, ``logging.currentframe``,
  asyncio's task stacks), ``sys.settrace``/``setprofile``, ``ctypes`` from answer code, signals sent by answer code,
  ``/proc/<other pid>`` access (the path normalised: ``/proc/self/../<pid>`` and symlinks included), code compiled
  under a standard, library or harness file's name (unless it is that file's own text) and a harness function's code
  replaced are blocked and reported to the parent at once, before the answer can interfere. Code of any file that is
  not the standard library's, a library's or the harness's counts as the answer's. They are evidence: a spawn
  through ``_posixsubprocess.fork_exec`` or a write through ``sqlite3`` or ``torch.from_file`` raises no watched
  event, nor do frames a library function hands out or raw memory writes; the OS sandbox bounds what such code can
  reach. Reads are not restricted (nothing secret is on disk; the problem's sources are hidden). Changing
  ``cudnn.benchmark``/``deterministic`` is only reported (``global_state_changed:*``).
  Inputs are compared bitwise after each call with what the trusted side wrote (on the CPU the input area itself,
  mapped read-only here; on the GPU a device copy taken before the call) (``inputs_mutated``); outputs must be
  exactly ``torch.Tensor`` (not a subclass: ``output_not_plain_tensor``), on the right device, not sharing storage with an input
  (``output_aliases_input``); on CUDA the output is snapshotted on the current stream right after the call
  returns and compared with its value after a device-wide synchronize (``unsynchronized_stream``).
* **OS sandbox** (enforced by the kernel; ``sandbox``, docs/evaluation.md "Isolation"): each child is a fresh
  interpreter with a scrubbed environment inside bubblewrap (or, on hosts without it, ``unshare``, a weaker level):
  its own PID namespace (nothing it starts outlives it; no host process, the evaluator included, is visible), user
  namespace (uid 65534 without capabilities under bubblewrap), IPC and UTS namespaces, network namespace (loopback
  only), a read-only file system in which every folder but the system's, the interpreter's, the harness's and its
  own is covered (``confinement``: no other answer, no reference source, no result; the answer comes with the
  command that loads it, written into its own folder), a minimal
  ``/dev`` (plus ``/dev/nvidia*`` on CUDA), and a private tmpfs as its working directory (``HOME``, ``TMPDIR``,
  ``TRITON_CACHE_DIR``) with size and inode caps. ``RLIMIT_CORE=0``, ``RLIMIT_NOFILE``, ``RLIMIT_FSIZE``,
  ``RLIMIT_CPU`` (and ``RLIMIT_AS`` on CPU, ``RLIMIT_NPROC`` in a user namespace) are set before torch is imported.
  What was in force is measured by a probe and recorded in every result (``protocol.isolation``,
  ``protocol.hidden_from_answer``); a host that cannot provide it says so (a warning and the record). A timeout
  kills the child's process group, which ends its PID namespace. A child that dies or
  exits early (``os._exit``, ``sys.exit``) never produces the final ``done`` message, which the parent requires, so it
  is a crash, never a pass; an exception after which even ``torch.cuda.synchronize()``
  fails (a sticky CUDA error) is reported as ``cuda_error`` and is a crash too. Every answer gets a fresh process,
  so no CUDA error outlives it. The memory areas' sizes are sealed: shrinking one under the evaluator's mapping
  (a SIGBUS there) is refused.
* **Result channel**: the parent passes a pipe fd on stdin; no key authenticates a message (one held in the
  answer's process would be the answer's), so every message is the answer's word: validated here (``evidence``),
  bounded (a report beyond its block's calls, an output whose shape is not the reference's is never built), and a
  message with bad framing, inconsistent sizes or out of the protocol's order is treated as forged
  (``result_channel_forged``). Every command written to the child is bounded by the evaluation's deadline. Writes to
  stdout/stderr are logs only, never results.
* **Stopped while not asked to run** (``freezer``): the answer's whole process tree gets SIGSTOP while the trusted
  side times the reference between its blocks and while its job waits for the GPU, so it cannot slow either; where
  the driver can (``cuda_lock``), its CUDA processes are locked first, which completes the GPU work they queued.
* **One catch-all** (``session``): whatever this side meets while judging one answer is that answer's ``crash``
  (``trusted_side_error``), never the job's failure: the answers judged beside it keep their verdicts.

Limits (documented, not solved): an answer can compute the right function with PyTorch instead of Triton while
also launching a token Triton kernel; ``keeps_torch_op`` (static analysis) reports that. In-process monitors can
be evaded by code that rewrites interpreter state (numpy's ``__array_interface__`` over a raw address reads and
writes any memory without an audit event; they are evidence, not a sandbox; the OS sandbox is what holds), and a
GPU kernel can address any memory of its own process; what such code can corrupt is in-process (launch counts,
timings, input snapshots, flags not yet sent), never the reference or the verdict on outputs. GPU children have no
host-memory cap (docs/evaluation.md, "What is not guaranteed"). Without a sandbox
(``isolation="none"`` or a host where neither bubblewrap nor unshare works, recorded as such) the child runs as the
parent's user in the parent's namespaces and could, in principle, read the parent's memory or write its files.
"""
