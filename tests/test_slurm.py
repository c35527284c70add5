"""profiles/slurm against a real Slurm: a single-node cluster (munged, slurmctld and slurmd from Debian's slurm-wlm;
`make slurm-tools` installs them) started in a temporary folder, to which the demo's per-model target is submitted
through the profile's executor plugin (snakemake-executor-plugin-slurm, pinned in requirements/lock.txt).

The cluster:
- one node with 2 CPUs and two GPUs that are gres/gpu entries whose device files are links to /dev/null: slurmctld
  schedules and allocates them, and slurmd sets CUDA_VISIBLE_DEVICES, as for real ones; nothing uses them (the demo
  runs on the CPU). The GPU rules are made to ask for one (`--set-resources <rule>:gpu=1`, what the rules declare
  themselves when evaluation.device is cuda), so the profile's GPU request goes through sbatch, slurmctld and srun;
- no accounting database (slurmdbd needs MySQL): the plugin follows jobs with squeue (MinJobAge of an hour keeps
  finished jobs listed) and slurmctld writes a line for every finished job to a job-completion file;
- slurmd runs in a private mount namespace whose /etc/slurm is this cluster's configuration: the plugin's job step
  (snakemake-executor-plugin-slurm-jobstep) removes SLURM_CONF from srun's environment, so srun on the node reads
  the default location, as it does on a real cluster. Nothing outside the temporary folder is changed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
import yaml
from cli import snakemake

from workflow_scripts.core.layout import ResultsLayout
from workflow_scripts.devtools.workspace import copy_workflow

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "slurm" / "config.yaml"
SLURM_COMMANDS = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel", "unshare"]
MODEL = "expert"
PROBLEMS = {"1": [1]}  # one problem of the demo suite: every rule of a model's branch runs once, in a few minutes
# The demo configuration's own results folder (each configuration has its own)
TARGET = ResultsLayout(yaml.safe_load((ROOT / "config.yaml").read_text())["results_dir"]).model_rows(MODEL)
PROFILE_ARGS = ["--workflow-profile", "profiles/slurm"]  # the command README gives for a cluster

SLURM_CONF = """\
ClusterName=kbtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
MailProg=/bin/true
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
# No cgroups, no affinity: plain process tracking works in containers too.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
MinJobAge=3600
# The node's CPUs and memory below count, whatever the host has (the jobs ask for 8 GB each, one CPU).
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=node1 NodeHostname={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=16000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=node1 Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    root: Path
    env: dict[str, str]  # the environment for client commands (SLURM_CONF) and for Snakemake

    def run(self, *command: str) -> str:
        return subprocess.run(command, env=self.env, capture_output=True, text=True, check=True, timeout=60).stdout

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld knows (finished ones included), as `scontrol show job` reports them."""
        return [fields(line) for line in self.run("scontrol", "show", "job", "--oneliner").splitlines() if line.strip()]

    def completed_records(self) -> dict[str, dict[str, str]]:
        """slurmctld's job-completion file: one record per finished job, by job id."""
        path = self.root / "jobcomp.txt"
        records = [fields(line) for line in path.read_text().splitlines()] if path.exists() else []
        return {record["JobId"]: record for record in records}

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{(self.root / name).read_text()[-3000:]}"
            for name in ["slurmctld.log", "slurmd.log", "munged.log"] if (self.root / name).exists()
        )


def fields(line: str) -> dict[str, str]:
    """Key=Value fields of one Slurm record line (values have no spaces in what these tests read)."""
    return dict(re.findall(r"(\w+)=(\S*)", line))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(name: str) -> str | None:
    """A command's path; the daemons live in sbin, which a CI's PATH may lack."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def missing_slurm() -> str | None:
    missing = [c for c in SLURM_COMMANDS if command(c) is None]
    if missing:
        return (f"Slurm/munge not installed ({', '.join(missing)} missing): `make slurm-tools` installs Debian's "
                "slurm-wlm and munge, as root with apt-get")
    if os.geteuid() != 0:
        return "slurmd must run as root (it starts jobs as their users)"
    return None


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    reason = missing_slurm()
    if reason:
        pytest.skip(reason)
    assert Path("/etc/slurm").is_dir(), "Debian's slurm-client creates /etc/slurm (the mount point for slurmd's view)"
    # munged wants every folder above its socket searchable by all: not under pytest's private tmp folders.
    root = Path(tempfile.mkdtemp(prefix="kb-slurm-", dir="/tmp"))
    root.chmod(0o755)
    for name in ["munge", "etc", "state", "spool", "gpus"]:
        (root / name).mkdir()
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for index in range(2):
        (root / "gpus" / f"nvidia{index}").symlink_to("/dev/null")
    host = socket.gethostname().split(".")[0]
    (root / "etc" / "slurm.conf").write_text(
        SLURM_CONF.format(host=host, root=root, ctld_port=free_port(), slurmd_port=free_port())
    )
    (root / "etc" / "gres.conf").write_text(f"NodeName=node1 Name=gpu File={root}/gpus/nvidia[0-1]\n")
    env = {**os.environ, "SLURM_CONF": str(root / "etc" / "slurm.conf"), "TRITON_INTERPRET": "1"}
    daemon_env = {k: v for k, v in env.items() if k != "SLURM_CONF"}  # slurmd reads /etc/slurm in its namespace
    munge = root / "munge"
    daemon_commands = [
        ([command("munged"), "--foreground", f"--key-file={key}", f"--socket={munge}/munge.socket", f"--pid-file={munge}/munged.pid",
          f"--seed-file={munge}/munged.seed", f"--log-file={root}/munged.log"], env),
        ([command("slurmctld"), "-D", "-f", env["SLURM_CONF"]], env),
        ([command("unshare"), "--mount", "--propagation", "private", "sh", "-c",
          'mount --bind "$1" /etc/slurm && exec "$2" -D -N node1', "sh", str(root / "etc"), command("slurmd")], daemon_env),
    ]
    daemons: list[subprocess.Popen] = []
    cluster = SlurmCluster(root, env)
    try:
        for argv, argv_env in daemon_commands:
            daemons.append(subprocess.Popen(argv, env=argv_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1)
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            listed = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%T"], env=env, capture_output=True, text=True)
            state = listed.stdout.strip()
            if state == "idle":
                break
            assert all(d.poll() is None for d in daemons), f"a Slurm daemon exited\n{cluster.logs()}"
            time.sleep(1)
        assert state == "idle", f"node state {state!r} after 60 s\n{cluster.logs()}"
        yield cluster
    finally:
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True)
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        shutil.rmtree(root, ignore_errors=True)


def planned_jobs(dry_run_output: str) -> list[tuple[str, str]]:
    """(rule, resources line) of every job a dry run lists."""
    return re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", dry_run_output, re.MULTILINE)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_profile_slurm_extra_holds_no_option_the_plugin_sets_itself() -> None:
    # The plugin rejects, at submission, a slurm_extra that sets what it manages (GPUs, memory, partition, ...).
    from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options

    profile = yaml.safe_load(PROFILE.read_text())
    assert profile["executor"] == "slurm"
    extras = [str(profile.get("default-resources", {}).get("slurm_extra", ""))]
    extras += [str(resources.get("slurm_extra", "")) for resources in (profile.get("set-resources") or {}).values()]
    for extra in extras:
        for pattern, option in get_forbidden_slurm_options().items():
            assert not re.search(pattern, extra), f"{PROFILE}: slurm_extra {extra!r} sets the {option}"


def test_the_plugin_is_the_locked_version() -> None:
    from importlib.metadata import version

    lock = (ROOT / "requirements" / "lock.txt").read_text()
    for package in ["snakemake-executor-plugin-slurm", "snakemake-executor-plugin-slurm-jobstep"]:
        assert f"{package}=={version(package)}" in lock.splitlines(), package


@pytest.mark.integration
def test_model_target_runs_through_slurm_jobs(slurm_cluster: SlurmCluster, tmp_path: Path, compile_cache: Path) -> None:
    work = copy_workflow(tmp_path / "work")
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["suite"]["only"] = PROBLEMS
    config["baselines"]["compile_cache_dir"] = str(compile_cache)  # what the session's other runs compiled
    (work / "slurm.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    config["evaluation"].update(device="cuda", memory_gb=40)
    (work / "cuda.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    # What the rules ask for: the jobs of this target on the CPU, and which of them take a GPU on CUDA.
    dry = snakemake(work, TARGET, "-n", *PROFILE_ARGS, "--configfile", "slurm.yaml", env=slurm_cluster.env)
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = Counter(rule for rule, _ in planned_jobs(dry.stdout))
    cuda = snakemake(work, TARGET, "-n", "--configfile", "cuda.yaml", env=slurm_cluster.env)
    assert cuda.returncode == 0, cuda.stderr[-3000:]
    gpu_rules = {rule for rule, resources in planned_jobs(cuda.stdout) if re.search(r"\bgpu=1\b", resources)}
    assert {"evaluate", "baseline"} <= gpu_rules <= set(planned), (gpu_rules, planned)

    # A --set-resources replaces the profile's set-resources: keep what the profile sets and add the GPU request.
    profile_resources = yaml.safe_load(PROFILE.read_text()).get("set-resources") or {}
    set_resources = [f"{rule}:{name}={value}" for rule, values in profile_resources.items() for name, value in values.items()]
    set_resources += [f"{rule}:gpu=1" for rule in sorted(gpu_rules)]
    run = snakemake(
        work, TARGET, *PROFILE_ARGS, "--configfile", "slurm.yaml", "--set-resources", *set_resources,
        # This cluster has no accounting database for sacct; squeue keeps finished jobs for MinJobAge.
        "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1",
        "--slurm-keep-successful-logs", "--latency-wait", "5",
        "--verbose",  # the plugin logs each sbatch command line at debug level
        env=slurm_cluster.env,
    )
    log = run.stdout + run.stderr
    (tmp_path / "snakemake.log").write_text(log)  # kept by pytest for a look after a failure
    assert run.returncode == 0, log[-6000:] + "\n" + slurm_cluster.logs()

    # The output is the model's rows: one per problem, as a local run gives them.
    rows = pd.read_parquet(work / TARGET)
    suite = work / "demo" / "suite" / "KernelBench"
    expected = sorted((int(level), problem) for level, ids in PROBLEMS.items() for problem in ids)
    assert sorted(zip(rows["level"], rows["problem_id"])) == expected
    for row in rows.itertuples():
        (problem_file,) = (suite / f"level{row.level}").glob(f"{row.problem_id}_*.py")
        assert row.problem_sha256 == sha256(problem_file)
        assert row.completion_sha256 == sha256(work / "demo" / "completions" / MODEL / f"level{row.level}_{row.problem_id}.txt")
        assert (row.model, row.status, row.compiled, row.correct) == (MODEL, "correct", True, True)
        assert row.runtime_ms > 0 and row.eager_ms > 0

    # Every job of the plan was a Slurm job of this run that slurmctld ran to completion.
    (run_id,) = set(re.findall(r"SLURM run ID: (\S+)", log))
    jobs = [job for job in slurm_cluster.jobs() if job["JobName"] == run_id]
    rule_of = {job["JobId"]: re.fullmatch(r"rule_([a-z_]+?)(?:_wildcards_.*)?", job["Comment"]).group(1) for job in jobs}
    assert Counter(rule_of.values()) == planned, log[-3000:]
    assert {job["JobState"] for job in jobs} == {"COMPLETED"}
    completed = slurm_cluster.completed_records()
    assert {job_id: completed[job_id]["JobState"] for job_id in rule_of} == dict.fromkeys(rule_of, "COMPLETED")

    # The GPU request: the plugin turns `gpu: 1` into `sbatch --gpus=1` (never --gres, which its slurm_extra check
    # rejects), slurmctld allocates one GPU to exactly those jobs and their job step asks srun for it.
    submitted = re.findall(r"sbatch call: (sbatch .*?) --wrap=", log)
    assert len(submitted) == len(jobs)
    for call in submitted:
        rule = re.search(r"--comment rule_([a-z_]+?)(?:_wildcards_\S*)?(?= )", call).group(1)
        assert "--gres" not in call
        assert ("--gpus=1" in call.split()) == (rule in gpu_rules), call
    for job in jobs:
        rule = rule_of[job["JobId"]]
        takes_gpu = rule in gpu_rules
        assert (job.get("TresPerJob") == "gres:gpu:1") == takes_gpu, job
        (job_log,) = (work / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob(f"{job['JobId']}.log")
        text = job_log.read_text()
        step = re.search(r"The call for this job is: (srun .*)", text).group(1)
        assert ("--gpus=1" in step.split()) == takes_gpu, step
        # slurmd names the allocated GPU in the job's environment (the job step logs its environment).
        allocated = re.search(r"'SLURM_JOB_GPUS': '(\d+)'", text)
        assert (allocated is not None and allocated.group(1) in {"0", "1"}) == takes_gpu, (rule, job_log)
