"""Two "nodes" on this machine joined by a real network, for tests/test_netns.py.

``NetnsCluster.start()`` (as root) creates two network namespaces joined by a
veth pair, 10.99.0.1/24 in the first and 10.99.0.2/24 in the second (private
addresses that exist only inside these namespaces), optionally limits each
direction's rate with ``tc qdisc ... tbf``, and writes into a fresh directory
an rsh agent (``rsh HOST COMMAND``: runs COMMAND in HOST's namespace through
``ip netns exec``) and an Open MPI hostfile naming the two addresses.
``mpirun(...)`` gives the argv of an Open MPI ``mpirun`` started in the first
namespace: rank 0 there, rank 1 started through the agent in the second, their
TCP BTL and out-of-band channel restricted to the veth subnet, so every byte
between the ranks crosses the link. ``stop()`` ends what the cluster started
and deletes both namespaces (and with them the veth pair); it never raises.

Open MPI comes from Debian (``openmpi-bin``), mpi4py built against it in the
virtual environment that .ci/system_mpi.sh makes (the README's "Using a
cluster's MPI"). If anything is missing, ``NetnsUnavailable`` says why.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from helpers.system_mpi import SystemMpiUnavailable, system_mpi_python

SUBNET = "10.99.0.0/24"
HOSTS = ("10.99.0.1", "10.99.0.2")
DEVICE = "veth0"  # the veth end's name inside each namespace
IP_PATH = os.pathsep.join([os.environ.get("PATH", "/usr/bin:/bin"), "/usr/sbin", "/sbin"])

RSH_AGENT = """\
#!/bin/sh
# Open MPI's rsh agent for tests/netns_cluster.py: "rsh [-x] HOST COMMAND..."
# runs COMMAND in HOST's network namespace.
[ "$1" = "-x" ] && shift
host=$1; shift
case $host in
{cases}
  *) echo "rsh agent: unknown host $host" >&2; exit 255 ;;
esac
exec {ip} netns exec "$ns" /bin/sh -c "$*"
"""


class NetnsUnavailable(RuntimeError):
    """The two-namespace network cannot be had here; the message says why."""


def _run(*argv, check=True, timeout=30):
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PATH=IP_PATH))
    if check and proc.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(argv)}` failed (exit {proc.returncode}): "
                               + (proc.stderr.strip() or proc.stdout.strip() or "no message"))
    return proc


class NetnsCluster:
    """Two namespaces and a veth pair; see the module docstring."""

    def __init__(self, rate=None):
        self.rate = rate
        tag = f"mpisgd-{os.getpid()}-{os.urandom(2).hex()}"
        self.namespaces = (f"{tag}-a", f"{tag}-b")
        self.created = []
        self.dir = Path(tempfile.mkdtemp(prefix="mpisgd-netns-"))
        self.ip = shutil.which("ip", path=IP_PATH)
        self.tc = shutil.which("tc", path=IP_PATH)
        self.mpirun_path = shutil.which("mpirun")
        self.agent = self.dir / "rsh"
        self.hostfile = self.dir / "hosts"

    @classmethod
    def start(cls, rate=None):
        """rate: a tc rate such as "100mbit" for each direction, or None for the bare link."""
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root")
        cluster = cls(rate)
        if cluster.ip is None or cluster.tc is None:
            cluster.stop()
            raise NetnsUnavailable("`ip` or `tc` not found (Debian package iproute2)")
        try:
            cluster.python = system_mpi_python()
        except SystemMpiUnavailable as exc:
            cluster.stop()
            raise NetnsUnavailable(str(exc)) from None
        try:
            cluster._start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _remove_stale(self):
        """Namespaces of an earlier test process that died before its cleanup."""
        for name in _run(self.ip, "netns", "list", check=False).stdout.split():
            parts = name.split("-")
            if len(parts) == 4 and parts[0] == "mpisgd" and parts[1].isdigit():
                try:
                    os.kill(int(parts[1]), 0)
                except ProcessLookupError:
                    _run(self.ip, "netns", "del", name, check=False)

    def _start(self):
        self._remove_stale()
        a, b = self.namespaces
        for ns in self.namespaces:
            _run(self.ip, "netns", "add", ns)
            self.created.append(ns)
        # Both ends are born inside the namespaces: nothing appears in the host's own.
        _run(self.ip, "link", "add", DEVICE, "netns", a, "type", "veth", "peer", "name", DEVICE,
             "netns", b)
        for ns, host in zip(self.namespaces, HOSTS):
            _run(self.ip, "-n", ns, "addr", "add", f"{host}/24", "dev", DEVICE)
            _run(self.ip, "-n", ns, "link", "set", "lo", "up")
            _run(self.ip, "-n", ns, "link", "set", DEVICE, "up")
        if self.rate:
            self.set_rate(self.rate)
        cases = "\n".join(f"  {host}) ns={ns} ;;" for host, ns in zip(HOSTS, self.namespaces))
        self.agent.write_text(RSH_AGENT.format(cases=cases, ip=self.ip))
        self.agent.chmod(0o755)
        self.hostfile.write_text("".join(f"{host} slots=1\n" for host in HOSTS))

    def set_rate(self, rate, burst="64kb", latency="50ms"):
        """Token bucket on each end's egress: ``rate`` per direction; None removes it."""
        for ns in self.namespaces:
            tc = [self.ip, "netns", "exec", ns, self.tc, "qdisc"]
            if rate is None:
                _run(*tc, "del", "dev", DEVICE, "root", check=False)
            else:
                _run(*tc, "replace", "dev", DEVICE, "root", "tbf", "rate", rate, "burst", burst,
                     "latency", latency)
        self.rate = rate

    def qdisc(self):
        """``tc qdisc show`` of the first end, for messages."""
        return _run(self.ip, "netns", "exec", self.namespaces[0], self.tc, "-s", "qdisc", "show",
                    "dev", DEVICE, check=False).stdout.strip()

    def mpirun(self, *command, ranks=2, env_names=(), busy_poll=False, bind_to="none"):
        """argv of ``mpirun`` in the first namespace, ranks placed alternately on the two nodes.

        Both "nodes" share this machine's cores. No rank is bound to a core:
        each node's daemon would bind its first rank to core 0, both ranks to
        the same core, and then every message across the veth took whole
        scheduler ticks (an Allreduce of one double 8 ms with Open MPI's
        spinning wait, 11-16 µs unbound; bench/bench_network.py). A waiting rank
        also yields its core (mpi_yield_when_idle) for the machine's other
        processes; ``busy_poll=True`` keeps Open MPI's spinning wait and
        ``bind_to="core"`` its binding."""
        exports = [arg for name in env_names for arg in ("-x", name)]
        waiting = [] if busy_poll else ["--mca", "mpi_yield_when_idle", "1"]
        return [
            self.ip, "netns", "exec", self.namespaces[0], self.mpirun_path, "-n", str(ranks),
            "--hostfile", str(self.hostfile), "--map-by", "node", "--oversubscribe", "--bind-to", bind_to,
            "--mca", "plm_rsh_agent", str(self.agent),
            "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", SUBNET,
            "--mca", "oob_tcp_if_include", SUBNET,
            *waiting, *exports, *map(str, command),
        ]

    def stop(self):
        """Delete the namespaces (the veth pair goes with them) and the directory. Never raises."""
        for ns in self.created:
            # Whatever still runs inside (a rank left behind by a failed test) is ended first.
            try:
                pids = _run(self.ip, "netns", "pids", ns, check=False).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), 9)
                    except (ProcessLookupError, ValueError):
                        pass
                _run(self.ip, "netns", "del", ns, check=False)
            except (OSError, subprocess.SubprocessError):
                pass
        self.created = []
        shutil.rmtree(self.dir, ignore_errors=True)

    def exists(self):
        """Names of this cluster's namespaces that the system still lists."""
        listed = _run(self.ip, "netns", "list", check=False).stdout.split()
        return [ns for ns in self.namespaces if ns in listed]
