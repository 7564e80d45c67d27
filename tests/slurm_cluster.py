"""A throw-away one-node SLURM cluster on this machine, for tests/test_slurm.py.

``SlurmCluster.start()`` installs Debian's ``slurm-wlm`` and ``munge`` if they
are missing (as root, through apt-get), writes a munge key and a
``slurm.conf`` into a fresh directory under /tmp, starts ``munged``,
``slurmctld`` and ``slurmd`` in the foreground as children of this process
(on free ports, with every state, spool, pid and log file in that
directory, so nothing of the machine's own configuration is read or
changed), and waits until ``sinfo`` shows the node idle. Client commands
find the cluster through ``SLURM_CONF`` (``cluster.env``). ``stop()`` cancels
every job, ends the three daemons (TERM, then KILL) and removes the
directory. Every wait has a timeout; if anything cannot be had,
``SlurmUnavailable`` says why (the tests skip with that reason).
"""

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from helpers.env import job_env

PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "sinfo", "scancel", "squeue")
# The daemons live in /usr/sbin, which a non-login PATH may lack.
PATH = os.pathsep.join([os.environ.get("PATH", "/usr/bin:/bin"), "/usr/sbin", "/sbin"])
INSTALL_TIMEOUT = 600  # seconds for apt-get; a cached install takes ~10 s
START_TIMEOUT = 60  # seconds until the node is idle


class SlurmUnavailable(RuntimeError):
    """SLURM cannot be installed or started here; the message says why."""


def _tail(path, lines=30):
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"({path} not written)"
    return f"--- {path} (last {lines} lines)\n" + "\n".join(text.splitlines()[-lines:])


def ensure_installed():
    """Install slurm-wlm and munge with apt-get unless their programs are on PATH."""
    missing = [p for p in PROGRAMS if shutil.which(p, path=PATH) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SlurmUnavailable(
            f"SLURM programs missing ({', '.join(missing)}) and cannot install "
            f"{' '.join(PACKAGES)}: needs root and apt-get"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    for cmd in (install, ["apt-get", "update", "-q"], install):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"`{' '.join(cmd)}` took over {INSTALL_TIMEOUT} s") from None
        if proc.returncode == 0 and cmd is install and all(shutil.which(p, path=PATH) for p in PROGRAMS):
            return
    raise SlurmUnavailable(
        f"`{' '.join(install)}` failed (exit {proc.returncode}): "
        + (proc.stderr.strip().splitlines() or ["no message"])[-1]
    )


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_hardware():
    """NodeName and hardware fields as ``slurmd -C`` reports them for this host."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, PATH=PATH)).stdout
    fields = dict(re.findall(r"(\w+)=(\S+)", out.splitlines()[0] if out else ""))
    if "NodeName" not in fields or "RealMemory" not in fields:
        raise SlurmUnavailable(f"`slurmd -C` gave no node description: {out!r}")
    return fields


SLURM_CONF = """\
# One-node test cluster written by tests/slurm_cluster.py
ClusterName=mpisgdtest
# Job ids unique across test clusters: srun's MPI names its shared memory after
# the job and step, and a killed job's segments must not meet a later job's.
FirstJobId={first_job_id}
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=5
# sbatch --wait polls every 2 s while 2 >= MinJobAge/2 (else every 8, then 32 s);
# slurmctld purges a finished job only in its minute-by-minute sweep.
MinJobAge=4
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} Sockets={sockets} CoresPerSocket={cores} ThreadsPerCore={threads} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


class SlurmCluster:
    """munged + slurmctld + slurmd on this host; see the module docstring."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="mpisgd-slurm-"))
        # munged insists that every user can traverse its socket's directory.
        self.dir.chmod(0o755)
        for sub in ("state", "spool", "log", "munge"):
            (self.dir / sub).mkdir(mode=0o755)
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket.2"
        self.env = job_env(SLURM_CONF=self.conf, PATH=PATH)
        self.procs = {}

    @classmethod
    def start(cls):
        ensure_installed()
        cluster = cls()
        try:
            cluster._start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _spawn(self, name, argv):
        log = open(self.dir / "log" / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=self.env, start_new_session=True,
        )
        log.close()

    def _wait(self, what, ready, timeout, logs=()):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise SlurmUnavailable(
                        f"{name} exited ({proc.returncode}) while waiting for {what}\n"
                        + self.logs(name, *logs))
            if ready():
                return
            time.sleep(0.5)
        raise SlurmUnavailable(f"{what}: not within {timeout} s\n" + self.logs(*logs))

    def _start(self):
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        self._spawn("munged", [
            "munged", "--foreground", f"--key-file={key}", f"--socket={self.munge_socket}",
            f"--pid-file={self.dir / 'munge' / 'munged.pid'}",
            f"--log-file={self.dir / 'log' / 'munged.log'}",
            f"--seed-file={self.dir / 'munge' / 'munged.seed'}",
        ])
        self._wait("munged's socket", self._munge_works, 20, logs=("munged",))

        hw = _node_hardware()
        self.node = hw["NodeName"]
        self.cpus = int(hw.get("CPUs", os.cpu_count() or 1))
        self.conf.write_text(SLURM_CONF.format(
            node=self.node, dir=self.dir, munge_socket=self.munge_socket,
            ctld_port=_free_port(), d_port=_free_port(), cpus=self.cpus,
            first_job_id=random.randrange(1, 50_000_000),
            sockets=hw.get("SocketsPerBoard", 1), cores=hw.get("CoresPerSocket", self.cpus),
            threads=hw.get("ThreadsPerCore", 1),
            # Below what slurmd measures, or the node is drained for low memory.
            memory=int(int(hw["RealMemory"]) * 0.9),
        ))
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
        self._wait("node idle in sinfo", self._node_idle, START_TIMEOUT,
                   logs=("slurmctld", "slurmd"))

    def _munge_works(self):
        if not self.munge_socket.exists():
            return False
        cred = subprocess.run(["munge", "-n", "-S", str(self.munge_socket)],
                              capture_output=True, timeout=10)
        check = subprocess.run(["unmunge", "-S", str(self.munge_socket)], input=cred.stdout,
                               capture_output=True, timeout=10)
        return cred.returncode == 0 and check.returncode == 0

    def _node_idle(self):
        try:
            out = self.run("sinfo", "-h", "-N", "-o", "%T", timeout=10).stdout
        except subprocess.TimeoutExpired:
            return False
        return out.strip() == "idle"

    def run(self, *argv, timeout=30, **kwargs):
        """Run a SLURM client command against this cluster."""
        return subprocess.run(list(argv), env=kwargs.pop("env", self.env), capture_output=True,
                              text=True, timeout=timeout, **kwargs)

    def sbatch_wait(self, script, *args, options=(), env=None, cwd=None, timeout=180):
        """``sbatch --wait [options] script args``; returns (exit code, job id, sbatch output).

        On timeout the job is cancelled and ``TimeoutError`` names it."""
        proc = subprocess.Popen(
            ["sbatch", "--wait", "--parsable", *options, str(script), *map(str, args)],
            env=env or self.env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            job = out.strip().split(";")[0]
            if job:
                self.run("scancel", job)
            raise TimeoutError(
                f"sbatch --wait {script}: job {job or '?'} not done within {timeout} s\n"
                + self.queue() + self.logs("slurmctld", "slurmd")) from None
        job = out.strip().splitlines()[0].split(";")[0] if out.strip() else ""
        return proc.returncode, job, out + err

    def queue(self):
        return self.run("squeue", "-a", "-o", "%i %T %r %M %j").stdout

    def logs(self, *names):
        files = {"munged": ["munged.out", "munged.log"],
                 "slurmctld": ["slurmctld.out", "slurmctld.log"],
                 "slurmd": ["slurmd.out", "slurmd.log"]}
        return "\n".join(_tail(self.dir / "log" / f) for n in names for f in files[n])

    def stop(self):
        """Cancel every job, stop the daemons, remove the directory. Never raises."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                self.run("scancel", "--full", "--user", str(os.getuid()), timeout=10)
                deadline = time.monotonic() + 15
                while self.run("squeue", "-h", timeout=10).stdout.strip():
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        # Daemons started their own sessions: end what is left of those groups.
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not os.environ.get("MPISGD_KEEP_SLURM"):
            shutil.rmtree(self.dir, ignore_errors=True)
