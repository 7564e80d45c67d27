"""Predicted wall time of a run on a cluster network, from its exact message log.

A *network* is the Hockney model of a point-to-point message of m bytes,
α + m·β (latency α in seconds, inverse bandwidth β in seconds per byte), and
the cost of a collective on k ranks with MPICH's algorithms (Thakur,
Rabenseifner and Gropp 2005, docs/NETWORK.md). With p = 2^⌊log2 k⌋ and
x = 1 when k is not a power of two (the k − p extra ranks first hand their
data to a partner and get the result back: two more steps), 0 otherwise,
a step's latency α_s and inverse bandwidth β_s, and γ the reduction's
arithmetic per byte:

    allreduce(k, m) = min((log2 p + 2x)·(α_s + m·β_s) + (log2 p + x)·m·γ,           recursive doubling
                          (2 log2 p + 2x)·α_s + (2(p − 1)/p + 2x)·m·β_s
                                              + ((p − 1)/p + x)·m·γ)                  Rabenseifner
    barrier(k)      = ⌈log2 k⌉·α_s                                                    dissemination

In a step every rank sends and receives at once: on a full-duplex network
α_s = α and β_s = β (the default); on shared memory the same CPUs copy both
ways and the calibration measures the step apart. Presets: ``NETWORKS``
("shm" this machine's shared memory as bench/calibrate_network.py measured
it; "10gbe" and "ib100" from published figures, with this machine's γ).

The *clock engine* ``replay`` gives every rank a clock and applies an event
log in order. An event log is a NumPy structured array of dtype ``EVENT``:

    kind   int8    COMPUTE, SEND, WAIT, ALLREDUCE, BARRIER, IALLREDUCE,
                   IBARRIER, COMPLETE or MARK (below)
    rank   int32   the rank it acts on, or −1: the ranks of ``group``
    group  int32   with rank −1: index into ``groups``, or −1 for all ranks
    peer   int32   SEND: the destination rank
    size   int64   COMPUTE: rows; SEND, ALLREDUCE, IALLREDUCE: bytes
    id     int64   SEND/WAIT: message id; IALLREDUCE/IBARRIER/COMPLETE:
                   request id; MARK: timeline row

    COMPUTE     each rank: clock += rows·seconds_per_row[rank]
    SEND        rank → peer, non-blocking: the sender pays o; the message
                leaves when the sender's link is free and arrives α + m·β later
    WAIT        the rank blocks until message ``id`` (sent to it) arrived, and
                its bytes came in after those it received before (m·β each)
    ALLREDUCE,  blocking: every member's clock becomes max(members' clocks)
    BARRIER     + the collective's cost on len(members) ranks
    IALLREDUCE, nonblocking start: request ``id`` completes at
    IBARRIER    max(members' clocks) + cost; no clock moves
    COMPLETE    each rank blocks until request ``id`` completed
    MARK        records max(all clocks) as the time of timeline row ``id``

The log must be causal (a message sent before it is waited for, a request
started before it is completed), as a log written in the order a program
runs is; every causal order of the same ranks' events gives the same clocks.
``EventLog`` builds one call by call (a caller that writes the array itself
gets the same checks); ``merge_rank_logs`` makes one from the per-rank logs
an MPI run records. ``time_to_error`` reads the MARK times against the run's
timeline.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from mpisgd.errors import MpisgdError

COMPUTE, SEND, WAIT, ALLREDUCE, BARRIER, IALLREDUCE, IBARRIER, COMPLETE, MARK = range(9)
KINDS = ("compute", "send", "wait", "allreduce", "barrier", "iallreduce", "ibarrier", "complete", "mark")
ALL = -1  # rank −1 with group −1: every rank

EVENT = np.dtype([("kind", np.int8), ("rank", np.int32), ("group", np.int32), ("peer", np.int32),
                  ("size", np.int64), ("id", np.int64)])


@dataclass(frozen=True)
class Network:
    """α (s per message), β (s per byte), γ (s per byte reduced), o (the sender's overhead per
    message, s; α if None), a collective step's α_s and β_s (α and β if None)."""

    name: str
    alpha: float
    beta: float
    gamma: float = 0.0
    o: float | None = None
    step_alpha: float | None = None
    step_beta: float | None = None
    source: str = ""

    def __post_init__(self):
        for field in ("alpha", "beta", "gamma", "o", "step_alpha", "step_beta"):
            value = getattr(self, field)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise MpisgdError(f"network {self.name!r}: {field} must be a finite number ≥ 0, got {value!r}")

    @property
    def overhead(self):
        return self.alpha if self.o is None else self.o

    @property
    def step(self):
        """(α_s, β_s) of one step of a collective."""
        return (self.alpha if self.step_alpha is None else self.step_alpha,
                self.beta if self.step_beta is None else self.step_beta)

    def p2p(self, nbytes):
        """One message of ``nbytes``: α + m·β."""
        return self.alpha + nbytes * self.beta

    def allreduce(self, k, nbytes):
        """An Allreduce of ``nbytes`` on k ranks: the cheaper of MPICH's two algorithms."""
        return _allreduce(*self.step, self.gamma, k, nbytes)

    def barrier(self, k):
        """A barrier on k ranks: ⌈log2 k⌉ rounds of one small message."""
        return _barrier(self.step[0], k)


# The "shm" preset as bench/calibrate_network.py measured it, with its provenance (package data).
SHM = json.loads(Path(__file__).with_name("shm_network.json").read_text())
# This machine's reduction arithmetic, np.add of float64 (s per byte). A property of the CPU: every preset uses it.
GAMMA = SHM["gamma"]

NETWORKS = {
    # This machine's shared memory (2 cores, MPICH ch4 of the venv's mpich wheel, through mpi4py).
    "shm": Network("shm", SHM["alpha"], SHM["beta"], gamma=GAMMA, o=SHM["o"], step_alpha=SHM["step_alpha"],
                   step_beta=SHM["step_beta"], source="measured here, idle: bench/calibrate_network.py (docs/NETWORK.md)"),
    # 10 Gigabit Ethernet with TCP: 20 µs end-to-end (Hurwitz and Feng 2003), 10 Gb/s line rate.
    "10gbe": Network("10gbe", 20e-6, 1 / 1.25e9, gamma=GAMMA,
                     source="10 GbE, TCP: 20 µs end-to-end (Hurwitz and Feng 2003), 1.25 GB/s line rate"),
    # 100 Gb/s InfiniBand EDR (4 × 25 Gb/s, ConnectX-4): 1–2 µs MPI latency, 12.5 GB/s.
    "ib100": Network("ib100", 1.5e-6, 1 / 12.5e9, gamma=GAMMA,
                     source="100 Gb/s InfiniBand EDR: 1–2 µs MPI latency, 12.5 GB/s line rate"),
}


def network(name):
    """The preset called ``name``."""
    try:
        return NETWORKS[name]
    except KeyError:
        raise MpisgdError(f"unknown network {name!r}; presets: {', '.join(NETWORKS)}") from None


_preset = network  # for replay, whose argument is called network


@njit(cache=True)
def _log2floor(k):
    steps = 0
    while (2 << steps) <= k:
        steps += 1
    return steps


@njit(cache=True)
def _allreduce(alpha, beta, gamma, k, nbytes):
    if k <= 1:
        return 0.0
    lg = _log2floor(k)
    p = 1 << lg
    x = 0 if p == k else 1  # the extra ranks' hand-over and hand-back
    m = float(nbytes)
    # log2 p exchanges of the whole vector, each reduced
    doubling = (lg + 2 * x) * (alpha + m * beta) + (lg + x) * m * gamma
    # reduce-scatter then allgather: 2 log2 p messages, 2(p − 1)/p of the bytes, (p − 1)/p reduced
    rabenseifner = ((2 * lg + 2 * x) * alpha + (2.0 * (p - 1) / p + 2 * x) * m * beta
                    + ((p - 1.0) / p + x) * m * gamma)
    return min(doubling, rabenseifner)


@njit(cache=True)
def _barrier(alpha, k):
    if k <= 1:
        return 0.0
    lg = _log2floor(k)
    return (lg if (1 << lg) == k else lg + 1) * alpha  # ⌈log2 k⌉ rounds


class EventLog:
    """An event log built call by call (``events`` gives the array).

    ``rank`` arguments take a rank or ``ALL``; ``group(ranks)`` registers a
    set of ranks for the collectives and returns its index."""

    def __init__(self):
        self.groups = []
        self._group_index = {}
        self._rows = []

    def group(self, ranks):
        key = tuple(sorted(int(r) for r in ranks))
        if key not in self._group_index:
            self._group_index[key] = len(self.groups)
            self.groups.append(np.array(key, dtype=np.int32))
        return self._group_index[key]

    def _add(self, kind, rank=ALL, group=ALL, peer=-1, size=0, ident=-1):
        self._rows.append((kind, rank, group, peer, size, ident))

    def compute(self, rank, rows):
        self._add(COMPUTE, rank=rank, size=rows)

    def send(self, src, dst, nbytes, msg_id):
        self._add(SEND, rank=src, peer=dst, size=nbytes, ident=msg_id)

    def wait(self, rank, msg_id):
        self._add(WAIT, rank=rank, ident=msg_id)

    def allreduce(self, nbytes, group=ALL):
        self._add(ALLREDUCE, group=group, size=nbytes)

    def barrier(self, group=ALL):
        self._add(BARRIER, group=group)

    def iallreduce(self, nbytes, request, group=ALL):
        self._add(IALLREDUCE, group=group, size=nbytes, ident=request)

    def ibarrier(self, request, group=ALL):
        self._add(IBARRIER, group=group, ident=request)

    def complete(self, request, rank=ALL, group=ALL):
        self._add(COMPLETE, rank=rank, group=group, ident=request)

    def mark(self, row):
        self._add(MARK, ident=row)

    @property
    def events(self):
        return np.array(self._rows, dtype=EVENT)


@dataclass
class Prediction:
    """``wall``: max clock (s); per rank (arrays of k): ``clock``, ``compute`` (rows·seconds_per_row),
    ``mpi`` = clock − compute (time in MPI calls), ``idle`` (the part of ``mpi`` spent blocked on other
    ranks: behind the slowest at a collective, for a message or a request); ``marks``: time of each
    MARK row (NaN where none)."""

    wall: float
    clock: np.ndarray
    compute: np.ndarray
    mpi: np.ndarray
    idle: np.ndarray
    marks: np.ndarray


# Errors found while replaying, with the event that raised them.
_OK, _NEVER_SENT, _NOT_RECIPIENT, _NEVER_STARTED, _NOT_MEMBER, _SENT_TWICE, _STARTED_TWICE = range(7)
_MESSAGES = {
    _NEVER_SENT: "waits for message {id}, which was not sent before it",
    _NOT_RECIPIENT: "waits at rank {rank} for message {id}, which was sent to another rank",
    _NEVER_STARTED: "completes request {id}, which was not started before it",
    _NOT_MEMBER: "completes request {id} at rank {rank}, which did not start it",
    _SENT_TWICE: "sends message {id} a second time",
    _STARTED_TWICE: "starts request {id} a second time",
}


def replay(events, k, network, seconds_per_row, groups=()):
    """Apply ``events`` (dtype ``EVENT``) to k rank clocks on ``network`` (a ``Network`` or a preset
    name); ``seconds_per_row``: compute time per row, one number or one per rank. Returns a
    ``Prediction``; bad input raises MpisgdError naming the event."""
    net = network if isinstance(network, Network) else _preset(network)
    k = int(k)
    if k < 1:
        raise MpisgdError(f"k must be ≥ 1, got {k}")
    spr = np.broadcast_to(np.asarray(seconds_per_row, dtype=np.float64), (k,)).copy()
    if not np.all(np.isfinite(spr) & (spr >= 0)):
        raise MpisgdError(f"seconds_per_row must be finite and ≥ 0, got {seconds_per_row!r}")
    events = np.asarray(events)
    if events.dtype != EVENT:
        raise MpisgdError(f"events must have dtype netmodel.EVENT, got {events.dtype}")
    members, starts = _groups_csr(groups, k)
    _check(events, k, len(starts) - 1)
    msg_index, n_msg = _dense_ids(events, (SEND, WAIT))
    req_index, n_req = _dense_ids(events, (IALLREDUCE, IBARRIER, COMPLETE))
    marks = events["id"][events["kind"] == MARK]
    n_marks = int(marks.max()) + 1 if len(marks) else 0
    clock, compute, idle, mark_times, status, where, bad_rank = _replay(
        events["kind"], events["rank"], events["group"], events["peer"], events["size"], events["id"],
        msg_index, req_index, n_msg, n_req, n_marks, members, starts, k,
        net.alpha, net.beta, net.gamma, net.overhead, *net.step, spr)
    if status != _OK:
        e = events[where]
        raise MpisgdError(f"event {where} ({KINDS[e['kind']]}) " +
                          _MESSAGES[status].format(id=int(e["id"]), rank=int(bad_rank)))
    return Prediction(float(clock.max()), clock, compute, clock - compute, idle, mark_times)


def _groups_csr(groups, k):
    """Groups as (members, starts): group g is members[starts[g]:starts[g + 1]], sorted; the last is
    all ranks."""
    arrays = []
    for g, ranks in enumerate(groups):
        ranks = np.sort(np.asarray(ranks, dtype=np.int64).ravel())
        if len(ranks) == 0 or ranks.min() < 0 or ranks.max() >= k or len(np.unique(ranks)) != len(ranks):
            raise MpisgdError(f"group {g} must be distinct ranks in [0, {k}), got {ranks.tolist()}")
        arrays.append(ranks)
    arrays.append(np.arange(k))
    starts = np.zeros(len(arrays) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([len(a) for a in arrays])
    return np.concatenate(arrays).astype(np.int64), starts


def _check(events, k, n_groups):
    """Field ranges of every event, before any work."""
    kind, rank, group, peer, size = (events[f] for f in ("kind", "rank", "group", "peer", "size"))
    checks = [
        ((kind < 0) | (kind >= len(KINDS)), f"kind must be in [0, {len(KINDS)})"),
        ((rank < -1) | (rank >= k), f"rank must be in [0, {k}) or −1 (a group), with k = {k}"),
        ((rank == -1) & ((group < -1) | (group >= n_groups)), f"group must be in [0, {n_groups}) or −1 (all ranks)"),
        ((kind == SEND) & ((rank < 0) | (peer < 0) | (peer >= k)),
         f"a send needs a source rank and a destination peer in [0, {k})"),
        (size < 0, "size (rows or bytes) must be ≥ 0"),
        ((kind == WAIT) & (rank < 0), "a wait names one rank (a message has one recipient)"),
        ((kind == MARK) & (events["id"] < 0), "a mark's id (timeline row) must be ≥ 0"),
    ]
    for bad, what in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise MpisgdError(f"event {i} ({KINDS[kind[i]] if 0 <= kind[i] < len(KINDS) else kind[i]}): {what}; "
                              f"got {events[i].tolist()}")


def _dense_ids(events, kinds):
    """Ids of the events of ``kinds`` renumbered 0..n−1 (−1 elsewhere), and n."""
    mask = np.isin(events["kind"], kinds)
    index = np.full(len(events), -1, dtype=np.int64)
    unique, inverse = np.unique(events["id"][mask], return_inverse=True)
    index[mask] = inverse
    return index, len(unique)


@njit(cache=True)
def _in_request(r, owner, members, starts):
    """Whether rank r is one of the ranks that started a request (owner: group g ≥ 0, or −2 − rank)."""
    if owner < -1:
        return r == -2 - owner
    ranks = members[starts[owner]:starts[owner + 1]]  # sorted
    i = np.searchsorted(ranks, r)
    return i < len(ranks) and ranks[i] == r


@njit(cache=True)
def _replay(kind, rank, group, peer, size, ident, msg_index, req_index, n_msg, n_req, n_marks,
            members, starts, k, alpha, beta, gamma, o, step_alpha, step_beta, spr):
    clock = np.zeros(k)
    compute = np.zeros(k)
    idle = np.zeros(k)
    out_free = np.zeros(k)  # when each rank's link can start its next outgoing message
    in_free = np.zeros(k)  # when the last message each rank received finished coming in
    arrival = np.full(n_msg, np.nan)
    transfer = np.zeros(n_msg)
    recipient = np.full(n_msg, -1, dtype=np.int64)
    done = np.full(n_req, np.nan)
    owner = np.full(n_req, -1, dtype=np.int64)
    marks = np.full(n_marks, np.nan)
    single = np.zeros(1, dtype=np.int64)
    all_ranks = len(starts) - 2
    for e in range(len(kind)):
        kd = kind[e]
        if rank[e] >= 0:  # the ranks this event acts on
            single[0] = rank[e]
            who = single
            here = -2 - rank[e]
        else:
            here = all_ranks if group[e] < 0 else group[e]
            who = members[starts[here]:starts[here + 1]]
        if kd == COMPUTE:
            for r in who:
                t = size[e] * spr[r]
                clock[r] += t
                compute[r] += t
        elif kd == SEND:
            m = msg_index[e]
            if not np.isnan(arrival[m]):
                return clock, compute, idle, marks, _SENT_TWICE, e, -1
            src = rank[e]
            transfer[m] = size[e] * beta
            depart = max(clock[src], out_free[src])  # after this rank's earlier messages left
            out_free[src] = depart + transfer[m]
            arrival[m] = depart + alpha + transfer[m]
            recipient[m] = peer[e]
            clock[src] += o
        elif kd == WAIT:
            m = msg_index[e]
            if np.isnan(arrival[m]):
                return clock, compute, idle, marks, _NEVER_SENT, e, -1
            for r in who:
                if recipient[m] != r:
                    return clock, compute, idle, marks, _NOT_RECIPIENT, e, r
                # its bytes come in after those of the messages r received before it
                ready = max(arrival[m], in_free[r] + transfer[m])
                in_free[r] = ready
                if ready > clock[r]:
                    idle[r] += ready - clock[r]
                    clock[r] = ready
        elif kd == ALLREDUCE or kd == BARRIER or kd == IALLREDUCE or kd == IBARRIER:
            latest = 0.0  # the collective starts when its last member calls it
            for r in who:
                latest = max(latest, clock[r])
            if kd == ALLREDUCE or kd == IALLREDUCE:
                cost = _allreduce(step_alpha, step_beta, gamma, len(who), size[e])
            else:
                cost = _barrier(step_alpha, len(who))
            if kd == ALLREDUCE or kd == BARRIER:
                for r in who:
                    idle[r] += latest - clock[r]
                    clock[r] = latest + cost
            else:
                q = req_index[e]
                if not np.isnan(done[q]):
                    return clock, compute, idle, marks, _STARTED_TWICE, e, -1
                done[q] = latest + cost
                owner[q] = here
        elif kd == COMPLETE:
            q = req_index[e]
            if np.isnan(done[q]):
                return clock, compute, idle, marks, _NEVER_STARTED, e, -1
            for r in who:
                if not _in_request(r, owner[q], members, starts):
                    return clock, compute, idle, marks, _NOT_MEMBER, e, r
                if done[q] > clock[r]:
                    idle[r] += done[q] - clock[r]
                    clock[r] = done[q]
        elif kd == MARK:
            marks[ident[e]] = clock.max()
    return clock, compute, idle, marks, _OK, -1, -1


def time_to_error(marks, rounds, errors, learners, target):
    """Predicted time at which the online error rate errors/(rounds·learners) first falls to
    ``target`` or below: ``marks[i]`` is the time of timeline row i (``Prediction.marks``), ``rounds``
    and ``errors`` its columns (cumulative, summed over the learners). inf if it never does."""
    marks, rounds, errors = (np.asarray(a, dtype=np.float64) for a in (marks, rounds, errors))
    if not (len(marks) == len(rounds) == len(errors)):
        raise MpisgdError(f"marks, rounds and errors must have one entry per timeline row, "
                          f"got {len(marks)}, {len(rounds)}, {len(errors)}")
    if np.isnan(marks).any():
        raise MpisgdError(f"timeline row {int(np.flatnonzero(np.isnan(marks))[0])} has no MARK event")
    if learners < 1 or np.any(rounds <= 0):
        raise MpisgdError("learners and every timeline row's rounds must be ≥ 1")
    reached = np.flatnonzero(errors / (rounds * learners) <= target)
    return float(marks[reached[0]]) if len(reached) else math.inf


def merge_rank_logs(logs, groups=()):
    """One causal event log from per-rank logs, as an MPI run records them: ``logs[r]`` holds rank
    r's events in the order it made them (dtype ``EVENT``); a collective appears in the log of each
    of its members (rank −1 and its group), the n-th on a group at every member being the same
    call, and is kept once. The ranks advance in turn as far as they can: a wait only after its
    send, a completion after its start, a collective once all its members reached it. Raises
    MpisgdError on a log that would deadlock."""
    k = len(logs)
    collective = (ALLREDUCE, BARRIER, IALLREDUCE, IBARRIER)
    members, starts = _groups_csr(groups, k)
    logs = [np.asarray(log) for log in logs]
    for r, log in enumerate(logs):
        if log.dtype != EVENT:
            raise MpisgdError(f"log of rank {r} must have dtype netmodel.EVENT, got {log.dtype}")
        _check(log, k, len(starts) - 1)
        is_collective = np.isin(log["kind"], collective)
        bad = np.flatnonzero(np.where(is_collective, log["rank"] != -1,
                                      (log["kind"] != MARK) & (log["rank"] != r)))
        if len(bad):
            raise MpisgdError(f"log of rank {r}, event {int(bad[0])} ({KINDS[log['kind'][bad[0]]]}): a rank's "
                              f"events name that rank, its collectives rank −1 and their group")
    out, pos = [], [0] * k
    sent, started = set(), set()
    calls = {}  # (rank, group) → collectives on that group the rank has made
    arrived = {}  # (group, n) → ranks waiting in that collective
    while True:
        moved = False
        for r in range(k):
            log = logs[r]
            while pos[r] < len(log):
                e = log[pos[r]]
                kind, ident = int(e["kind"]), int(e["id"])
                if (kind == WAIT and ident not in sent) or (kind == COMPLETE and ident not in started):
                    break
                if kind in collective:
                    g = len(starts) - 2 if e["group"] < 0 else int(e["group"])
                    key = (g, calls.get((r, g), 0))
                    waiting = arrived.setdefault(key, set())
                    waiting.add(r)
                    if len(waiting) < starts[g + 1] - starts[g]:
                        break
                    for s in members[starts[g]:starts[g + 1]]:  # the call completes at every member
                        calls[(s, g)] = key[1] + 1
                        pos[s] += 1
                    del arrived[key]
                    if kind in (IALLREDUCE, IBARRIER):
                        started.add(ident)
                else:
                    if kind == SEND:
                        sent.add(ident)
                    pos[r] += 1
                out.append(e)
                moved = True
        if all(pos[r] == len(logs[r]) for r in range(k)):
            return np.array(out, dtype=EVENT)
        if not moved:
            stuck = {r: f"{KINDS[logs[r][pos[r]]['kind']]} {int(logs[r][pos[r]]['id'])} (event {pos[r]})"
                     for r in range(k) if pos[r] < len(logs[r])}
            raise MpisgdError(f"the rank logs deadlock: every unfinished rank waits: {stuck}")
