"""Checkpoints of ``mpisgd train``: the format, atomic writes, finding the
newest complete checkpoint, refusing a foreign one, and resuming
(``restore``), on as many ranks or on another number (``elastic``).

Layout (docs/RUNNING.md, "Checkpoint and resume"):

    OUT/checkpoints/round-<t>/rank-<r>.h5   one per rank: written under a temporary
                                            name in the same directory, then os.replace'd
    OUT/checkpoints/round-<t>/COMPLETE      JSON manifest (format version, round, ranks,
                                            configuration), written by rank 0 once every
                                            rank's file is in place (after a barrier)

A checkpoint is taken at the end of a round t, after its protocol step and
timeline row, when nothing is in flight, so that a rank's state is what its
``Run`` holds (``Run.state_dict``: each stateful object's ``state_dict()``,
by owner). In sync mode every rank is at round t anyway; in
async mode the ranks first make a consistent cut at an agreed round t
(``AsyncRounds.cut``: every rank learns up to t, rank 0 resolves or drops every
violation sent until then and every result is taken). A rank file holds each
owner's arrays as datasets ``owner/name`` and its other values as JSON
attributes ``owner.name`` (``_flatten``).
Only the newest ``KEEP`` complete checkpoints are kept.

Graceful stop: while a ``Checkpointer`` exists, SIGTERM (what a scheduler
sends at a time limit, or ``--signal`` ahead of it) only raises a flag on
the rank that receives it. Sync mode: every ``poll`` rounds the ranks agree
(one Allreduce, ``due``) on whether any rank was signalled and, for
--checkpoint-seconds, whether rank 0 finds a checkpoint due. Async mode: a
signalled follower tells rank 0 (STOP), and rank 0, signalled, told or late
(``late``), starts a cut; at the cut the ranks agree on the stop
(``agree_stop``). On a stop every rank checkpoints at that round and the run
ends with ``Stopped`` (exit code ``EXIT_STOPPED``), so no work is lost and
``--resume`` goes on from there. A rank still alive ``grace`` seconds after
its signal (a rank stuck or gone: the agreement never comes) is ended by its
watchdog (``mpisgd.watchdog``), which ends the job instead of leaving it
hung, and leaves the newest complete checkpoint as it was.

Every rank file carries its round, the run's id (drawn when a run starts,
kept by its resumes) and the SHA-256 of the run's configuration; ``restore``
checks them against the manifest on every rank, and the ranks agree (one
gather) on the result before any goes on: a rank file of another checkpoint
or another run is refused by every rank with the same message. ``--resume``
goes on from the newest intact checkpoint, and says which ones it passed
over and why.

The collectives of checkpointing (the decision, the barriers) use the raw
communicator: they are not counted, so a resumed sync-mode run reports the
same messages and bytes as an uninterrupted one. An async cut's messages
(CUT, its round's Allreduce, STOP, DONE and FINISH) go through the transport
and are counted as control.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time
import uuid

import numpy as np

from mpisgd.atomic import atomic_path
from mpisgd.errors import MpisgdError
from mpisgd.metrics import Timeline
from mpisgd.watchdog import STOP_SIGNALS, arm

FORMAT_VERSION = 9  # 2: the agreed check awaiting its resolution (sync mode settles checks one period late);
# 3: the transport's result counts (async mode) and the time spent waiting; 4: --delta auto's record
# names its formula (rda has a rule of its own), and Δ and the --budget record as steered;
# SHA-256 digests of every dataset and of the attributes; 5: the non-zeros learned (--budget);
# 6: the run's id (manifest and rank files) and the configuration's SHA-256 (rank files);
# 7: each owner's state_dict ("owner/name" datasets, "owner.name" JSON attributes), the timeline's clock, the rows each rank's
# stream holds and has learned (elastic resume), no number of ranks in the configuration; 8: --delta auto's pilot
# is an owner of its own ("pilot/values", "pilot/counts"); 9: and the non-zeros of its rows ("pilot/entries")
KEEP = 2  # complete checkpoints kept
MARKER = "COMPLETE"
SUBDIR = "checkpoints"  # under --out
EXIT_STOPPED = 75  # stopped by a signal after a complete checkpoint: resume to go on (EX_TEMPFAIL)
STOP_GRACE = 120.0  # seconds from a stop signal to the end of the run, else its watchdog ends it (--stop-grace)

_ROUND = re.compile(r"^round-(\d+)$")


def fingerprint(config, data):
    """The settings a resumed run must share with the checkpoint: the run
    configuration (protocol, Δ, b, learner, seeds, timeline; not the async
    poll interval) and the data (shard file names, or the synthetic stream's
    parameters). Not the number of ranks: a resume on another deals the rows
    left again (``elastic``)."""
    run = config.as_dict()
    run.pop("poll_rows", None)
    run.pop("poll_seconds", None)
    data = dict(data)
    if "shards" in data:
        data["shards"] = [os.path.basename(os.fspath(p)) for p in data["shards"]]
    return json.loads(json.dumps({**run, "data": data}))


def configuration_digest(configuration):
    """SHA-256 of a configuration (``fingerprint``) as JSON, keys sorted."""
    return hashlib.sha256(json.dumps(configuration, sort_keys=True).encode()).hexdigest()


def _flat(d, prefix=""):
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


def _differences(saved, current):
    """'setting: checkpoint X, this run Y' for every setting that differs."""
    a, b = _flat(saved), _flat(current)
    return [f"{key}: checkpoint {a.get(key, '(unset)')!r}, this run {b.get(key, '(unset)')!r}"
            for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


# -- files -------------------------------------------------------------------------


def round_dir(directory, t):
    return os.path.join(directory, f"round-{int(t)}")


def rank_file(directory, rank):
    return os.path.join(directory, f"rank-{int(rank)}.h5")


def _attrs_digest(attrs):
    """SHA-256 of a rank file's attributes (all but itself; Python values), in name order."""
    text = json.dumps({k: v for k, v in attrs.items() if k != "attrs_sha256"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _array_digest(value):
    """SHA-256 of an array's type, shape and bytes."""
    value = np.ascontiguousarray(value)
    digest = hashlib.sha256(f"{value.dtype.str} {value.shape}".encode())
    digest.update(value.reshape(-1).view(np.uint8))
    return digest.hexdigest()


def write_rank(path, arrays, attrs):
    """Write one rank's state atomically: ``arrays`` {name: ndarray} and
    ``attrs`` {name: int, float or str}, with the format version, and SHA-256
    digests of every dataset and of the attributes, which ``read_rank``
    checks. (Our own digests: HDF5's Fletcher-32 needs chunked datasets, and
    flushing chunks to a full disk crashed HDF5, tests/test_full_disk.py.)"""
    import h5py

    attrs = {"format_version": FORMAT_VERSION, **attrs}
    with atomic_path(path, fsync=True) as tmp, h5py.File(tmp, "w") as f:
        for name, value in attrs.items():
            f.attrs[name] = value
        f.attrs["attrs_sha256"] = _attrs_digest(attrs)
        for name, value in arrays.items():
            value = np.asarray(value)
            f.create_dataset(name, data=value).attrs["sha256"] = _array_digest(value)


def read_rank(path):
    """(arrays, attrs) of a rank file; refuses another format version, and a
    file whose data or attributes do not match their digests."""
    import h5py

    if not os.path.exists(path):
        raise MpisgdError(f"checkpoint {path}: rank file missing")
    arrays = {}

    def take(name, obj):
        if isinstance(obj, h5py.Dataset):
            arrays[name] = np.asarray(obj[()])
            if obj.attrs.get("sha256") != _array_digest(arrays[name]):
                raise MpisgdError(f"checkpoint {path}: dataset {name!r} is corrupt (its SHA-256 does not match)")

    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}
            version = attrs.get("format_version")
            if version != FORMAT_VERSION:
                raise MpisgdError(f"checkpoint {path}: format version {version}, this mpisgd reads version "
                                  f"{FORMAT_VERSION}")
            f.visititems(take)
    except OSError as exc:
        raise MpisgdError(f"checkpoint {path}: not a readable HDF5 file ({exc})") from None
    if attrs.get("attrs_sha256") != _attrs_digest(attrs):
        raise MpisgdError(f"checkpoint {path}: its attributes do not match their checksum (corrupt)")
    return arrays, attrs


def _write_json(path, value):
    with atomic_path(path, fsync=True) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.write("\n")


def read_manifest(directory):
    """The COMPLETE manifest of a round directory; refuses another format version."""
    path = os.path.join(directory, MARKER)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        raise MpisgdError(f"checkpoint {path}: unreadable manifest ({exc})") from None
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise MpisgdError(f"checkpoint {path}: format version {version}, this mpisgd reads version "
                          f"{FORMAT_VERSION}")
    missing = [key for key in ("round", "ranks", "run", "configuration") if key not in manifest]
    if missing:
        raise MpisgdError(f"checkpoint {path}: unreadable manifest (no {', '.join(missing)})")
    return manifest


def _rounds(directory):
    """[(t, path)] of the round directories under ``directory``, by round."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), os.path.join(directory, n)) for n in names if (m := _ROUND.match(n))]
    return sorted(found)


def complete(directory):
    """[(t, path)] of the complete checkpoints under ``directory``, oldest first."""
    return [(t, p) for t, p in _rounds(directory) if os.path.exists(os.path.join(p, MARKER))]


def candidates(resume):
    """The round directories to resume from, newest first: ``resume`` is one
    round-<t> directory (then only it), a run's --out or its checkpoints/
    directory (then every complete checkpoint there; incomplete ones, without
    a manifest, are passed over)."""
    resume = os.fspath(resume)
    if os.path.exists(os.path.join(resume, MARKER)):
        return [resume]
    directory = os.path.join(resume, SUBDIR) if os.path.isdir(os.path.join(resume, SUBDIR)) else resume
    if not os.path.isdir(directory):
        raise MpisgdError(f"--resume {resume}: no such directory")
    found = complete(directory)
    if not found:
        partial = [os.path.basename(p) for _t, p in _rounds(directory)]
        detail = f" (incomplete, no {MARKER}: {', '.join(partial)})" if partial else ""
        raise MpisgdError(f"--resume {resume}: no complete checkpoint in {directory}{detail}")
    return [p for _t, p in reversed(found)]


def check_configuration(directory, manifest, current):
    """Refuse a checkpoint of another configuration (``fingerprint``)."""
    diff = _differences(manifest.get("configuration", {}), current)
    if diff:
        raise MpisgdError(f"checkpoint {os.path.join(directory, MARKER)} is of another configuration: "
                          + "; ".join(diff))


def check_rank_file(directory, manifest, rank, check):
    """The state (by owner) of rank ``rank``'s file of the checkpoint
    ``directory``; refuses it if unreadable or corrupt (``read_rank``), or if
    its round, run, configuration, rank or ranks is not the manifest's, or
    ``check(path, state, ranks)`` raises."""
    path = rank_file(directory, rank)
    arrays, attrs = read_rank(path)
    marker = os.path.join(directory, MARKER)
    if attrs.get("round") != manifest["round"]:
        raise MpisgdError(f"checkpoint {path}: of round {attrs.get('round')}, but {marker} is of round "
                          f"{manifest['round']} (a rank file of another checkpoint)")
    if (attrs.get("run") != manifest["run"]
            or attrs.get("configuration_sha256") != configuration_digest(manifest["configuration"])):
        raise MpisgdError(f"checkpoint {path}: of another run than {marker} (a rank file of another run)")
    if (attrs.get("rank"), attrs.get("ranks")) != (rank, manifest["ranks"]):
        raise MpisgdError(f"checkpoint {path}: of rank {attrs.get('rank')} of {attrs.get('ranks')}, but {marker} "
                          f"names it rank {rank} of {manifest['ranks']}")
    state = _unflatten(arrays, attrs)
    check(path, state, manifest["ranks"])
    return state


def choose(comm, resume, current, check):
    """Every rank: (round directory, manifest, states) of the newest intact
    checkpoint under ``resume`` (``candidates``), ``states`` the states of
    this rank's file, or, when the checkpoint has another number of ranks,
    of every rank's (an elastic resume). Rank 0 reads each manifest and
    checks it against ``current`` (the fingerprint: another configuration is
    an error, not a reason to try an older checkpoint); every rank checks
    the files it reads (``check_rank_file``, with ``check``); the ranks agree
    on the outcome (a broadcast, a gather) before any goes on, so that each
    raises the same error. Rank 0 says which checkpoints it passed over and
    why. ``comm``: the raw communicator (metadata, not counted)."""
    found = None
    if comm.rank == 0:
        try:
            found = candidates(resume)
        except MpisgdError as exc:
            found = str(exc)
    found = comm.bcast_meta(found)
    if isinstance(found, str):
        raise MpisgdError(found)
    passed = []  # (round directory, why)
    for directory in found:
        manifest, fatal, why = None, None, None
        if comm.rank == 0:
            try:
                manifest = read_manifest(directory)
                check_configuration(directory, manifest, current)
            except MpisgdError as exc:
                fatal, why = (str(exc), None) if manifest is not None else (None, str(exc))
        manifest, fatal, why = comm.bcast_meta((manifest, fatal, why))
        if fatal:
            raise MpisgdError(fatal)
        loaded = None
        if why is None:
            try:
                ranks = [comm.rank] if manifest["ranks"] == comm.size else range(manifest["ranks"])
                loaded = [check_rank_file(directory, manifest, r, check) for r in ranks]
            except MpisgdError as exc:
                why = str(exc)
            why = next((w for w in comm.allgather_meta(why) if w is not None), None)
        if why is None:
            if passed and comm.rank == 0:
                print(f"mpisgd: resuming from {directory}, the newest intact checkpoint; passed over: "
                      + "; ".join(f"{d} ({w})" for d, w in passed), file=sys.stderr, flush=True)
            return directory, manifest, loaded
        passed.append((directory, why))
    if len(passed) == 1:
        raise MpisgdError(passed[0][1])
    raise MpisgdError(f"--resume {resume}: no intact checkpoint: " + "; ".join(f"{d}: {w}" for d, w in passed))


# -- taking checkpoints --------------------------------------------------------------


class Stopped(SystemExit):
    """The run stopped on a signal after a complete checkpoint (every rank
    raises it at the same round); the exit code is ``EXIT_STOPPED``."""

    def __init__(self):
        super().__init__(EXIT_STOPPED)


class Checkpointer:
    """When and where a run's ranks checkpoint, and the collective write.

    ``comm``: the raw communicator; ``directory``: OUT/checkpoints;
    ``every``: rounds between checkpoints (0: off); ``seconds``: at least
    this long between checkpoints (0: off), decided by rank 0; ``poll``:
    rounds between the ranks' agreements on a time-based checkpoint or a
    stop (module docstring); ``configuration``: the fingerprint stored in
    the manifest; ``grace``: seconds from a stop signal to the end of this
    rank before its watchdog ends it (module docstring). Creating one makes
    ``STOP_SIGNALS`` request a stop and arms this rank's watchdog.
    """

    def __init__(self, comm, directory, every, seconds, poll, configuration, grace=STOP_GRACE):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.directory = os.fspath(directory)
        self.every, self.seconds, self.poll = int(every), float(seconds), int(poll)
        self.configuration = configuration
        self.run_id = comm.bcast(uuid.uuid4().hex if self.rank == 0 else None)  # a resumed run keeps its own
        self.grace = float(grace)
        self.last = time.monotonic()
        self.written = 0
        self.time = 0.0  # seconds spent deciding and writing
        self.signalled = None  # the stop signal this rank received
        self.stopping = None  # the round at which every rank agreed to stop
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._request_stop)
        arm(self.grace, self.rank, self.directory)  # ends this rank if it has not stopped in time

    def _request_stop(self, signum, frame):
        self.signalled = signal.Signals(signum).name

    def next_stop(self, t):
        """The next round after t at which every rank must stop to ask ``due``."""
        stops = [(t // self.poll + 1) * self.poll]  # a stop signal can come at any time
        if self.every:
            stops.append((t // self.every + 1) * self.every)
        return min(stops)

    def due(self, t):
        """Whether to checkpoint at the end of round t (same answer on every
        rank; a collective every ``poll`` rounds)."""
        from mpi4py import MPI

        start = time.monotonic()
        yes = bool(self.every) and t % self.every == 0
        if t % self.poll == 0:
            late = self.rank == 0 and bool(self.seconds) and time.monotonic() - self.last >= self.seconds
            flags = np.array([late, self.signalled is not None], dtype=np.int8)
            agreed = np.zeros_like(flags)
            self.comm.Allreduce(flags, agreed, op=MPI.MAX)
            if agreed[1]:
                self.stopping = t
            yes = yes or bool(agreed.any())
        self.time += time.monotonic() - start
        return yes

    def late(self):
        """Rank 0: whether --checkpoint-seconds have passed since the last checkpoint."""
        return bool(self.seconds) and time.monotonic() - self.last >= self.seconds

    def agree_stop(self, t):
        """Async mode, at a cut (every rank at round t, nothing in flight):
        whether any rank was signalled, by one Allreduce."""
        from mpi4py import MPI

        start = time.monotonic()
        flag = np.array([self.signalled is not None], dtype=np.int8)
        agreed = np.zeros_like(flag)
        self.comm.Allreduce(flag, agreed, op=MPI.MAX)
        if agreed[0]:
            self.stopping = t
        self.time += time.monotonic() - start

    def exit_if_stopping(self):
        """After ``save``: if the ranks agreed to stop, say so (rank 0) and
        raise ``Stopped`` on every rank."""
        if self.stopping is None:
            return
        if self.rank == 0:
            print(f"mpisgd: stopped by a signal ({self.signalled or 'on another rank'}) after the "
                  f"checkpoint of round {self.stopping} in {self.directory}; run again with --resume "
                  f"to go on (exit code {EXIT_STOPPED})", file=sys.stderr, flush=True)
        raise Stopped()

    def save(self, t, state):
        """Write this rank's file of round t, its ``state`` by owner (``Run.state_dict``);
        rank 0 marks the checkpoint complete once every file is in place and
        prunes old ones. Returns when the checkpoint is complete on every rank."""
        start = time.monotonic()
        directory = round_dir(self.directory, t)
        path = rank_file(directory, self.rank)
        arrays, attrs = _flatten(state)
        try:
            os.makedirs(directory, exist_ok=True)
            write_rank(path, arrays, {**attrs, "round": int(t), "run": self.run_id, "rank": self.rank,
                                      "ranks": self.comm.Get_size(),
                                      "configuration_sha256": configuration_digest(self.configuration)})
        except OSError as exc:
            raise MpisgdError(f"checkpoint {path}: cannot write ({exc.strerror or exc})") from None
        self.comm.Barrier()
        if self.rank == 0:
            marker = os.path.join(directory, MARKER)
            try:
                _write_json(marker, {
                    "format_version": FORMAT_VERSION, "round": int(t), "ranks": self.comm.Get_size(),
                    "run": self.run_id, "configuration": self.configuration,
                    "files": [os.path.basename(rank_file(directory, r)) for r in range(self.comm.Get_size())],
                })
            except OSError as exc:
                raise MpisgdError(f"checkpoint {marker}: cannot write ({exc.strerror or exc})") from None
            self._prune(t)
        self.comm.Barrier()
        self.last = time.monotonic()
        self.written += 1
        self.time += self.last - start

    def _prune(self, t):
        """Keep round t and the newest complete checkpoints before it (KEEP in
        all); remove every other round directory (older ones, and leftovers of
        an interrupted run beyond t)."""
        keep = {t} | {u for u, _p in complete(self.directory) if u < t}
        keep = set(sorted(keep)[-KEEP:])
        for u, path in _rounds(self.directory):
            if u not in keep:
                shutil.rmtree(path, ignore_errors=True)


# -- what a checkpoint holds -------------------------------------------------------


def _flatten(state):
    """(arrays, attrs) of a state by owner ({owner: {name: value}}, each
    owner's ``state_dict()``): arrays as datasets "owner/name", any other
    value as a JSON attribute "owner.name"."""
    arrays, attrs = {}, {"owners": json.dumps(list(state))}
    for owner, values in state.items():
        for name, value in values.items():
            if isinstance(value, np.ndarray):
                arrays[f"{owner}/{name}"] = value
            else:
                attrs[f"{owner}.{name}"] = json.dumps(value)
    return arrays, attrs


def _unflatten(arrays, attrs):
    """The state ``_flatten`` wrote."""
    state = {owner: {} for owner in json.loads(attrs["owners"])}
    for key, value in arrays.items():
        owner, name = key.split("/", 1)
        state[owner][name] = value
    for key, value in attrs.items():
        owner, dot, name = key.partition(".")
        if dot:
            state[owner][name] = json.loads(value)
    return state


def _check_stream(path, run, rows_of, rows_until):
    """Refuse a rank's state whose rows are not those of the data at hand
    (``rows_of(k, l)``: the rows of stream l of k as the data deals them at
    first), or that has not learned every row of its rounds
    (``rows_until(stream, t)``)."""
    stream = run["stream"]
    for k, l, _a, _b, n in stream["parts"]:
        if rows_of(k, l) != n:
            raise MpisgdError(f"checkpoint {path}: stream {l} of {k} ranks had {n} rows, this run's data gives it "
                              f"{rows_of(k, l)}")
    if int(run["rows_done"]) != rows_until(stream, int(run["round"])):
        raise MpisgdError(f"checkpoint {path}: {run['rows_done']} rows done by round {run['round']}, "
                          f"not the {rows_until(stream, int(run['round']))} rows of its rounds")


def restore(run):
    """Resume a ``Run`` from the newest intact checkpoint under
    ``run.resume`` (``choose``). On as many ranks as the checkpoint's, every
    rank loads its own file; on another number, every rank reads every file
    and takes its share (``elastic``). Returns the round to go on from."""
    k = run.size
    learning = run.rank == 0 or not run.central

    def rows_of(k, l):  # of stream l of k as the data deals them at first
        if (k, l) == (run.size, run.rank) or run.streams is None:
            return int(run.source.n_rows) if (k, l) == (run.size, run.rank) else 0
        return int(run.streams(k, l).n_rows)

    def rows_until(stream, t):  # rows of a stream's rounds [0, t)
        if stream == run.stream:
            return run.source.rows_until(t)
        return min(max(t - stream["first"], 0), sum(b - a for _k, _l, a, b, _n in stream["parts"]))

    def check(path, state, ranks):
        if ranks != k and (run.central or "pilot" in state):
            why = "with --central" if run.central else "during --delta auto's pilot"
            raise MpisgdError(f"checkpoint {path}: of {ranks} ranks, this run has {k}; a resume on another number "
                              f"of ranks is not supported {why}")
        if learning:
            _check_stream(path, state["run"], rows_of, rows_until)

    current = run.fingerprint or fingerprint(run.config, {})
    directory, manifest, states = choose(run.comm, run.resume, current, check)
    t = int(manifest["round"])
    if run.checkpointer is not None:
        run.checkpointer.run_id = manifest["run"]  # the same run, going on
    if manifest["ranks"] == k:
        run.load_state_dict(states[0])
    else:
        run.load_state_dict(elastic(states, k, run.rank, run.learners))
    run.resumed = (directory, t, int(manifest["ranks"]))
    return t


def elastic(states, size, rank, learners):
    """Rank ``rank``'s state of a run of ``size`` ranks going on from the
    states of every rank of a checkpoint of k ≠ size ranks (docs/ALGORITHMS.md,
    "Elastic resume"):

    - the rows every old learner has not learned yet, in rank order, dealt in
      ``size`` near-equal contiguous parts (``partition.deal``), from the
      checkpoint's round on: every row is learned once;
    - every learner takes the mean of the k models, which becomes the
      reference (a full sync of the old learners, not counted): the global
      mean is kept; each keeps the rest of old learner ``rank mod k``'s state
      (steps, step size, ASGD average); a pending check is settled by it;
    - the sums over learners (examples, errors, loss, messages and bytes, the
      non-zeros learned, the timeline) are kept: old learner l's go to the
      new learner l mod size; Δ, --budget's record, the coordinator's
      statistics and random generator carry over, its counter is 0 (after a
      full sync)."""
    from mpisgd.data.partition import deal, rows_left

    k, t = len(states), int(states[0]["run"]["round"])
    left = []
    for state in states:
        run = state["run"]
        left += rows_left([((k_, l, n), a, b) for k_, l, a, b, n in run["stream"]["parts"]], int(run["rows_done"]))
    mine = deal(left, size)[rank]
    total = None  # the sum of the k models
    for state in states:
        learners.load_state_dict(state["learners"])
        z = learners.models([0])[0]
        total = z if total is None else total + z
    own = states[rank % k]
    summed = [s for l, s in enumerate(states) if l % size == rank]
    new = {owner: dict(values) for owner, values in own.items()}
    for name in ("loss_sum", "errors", "examples"):
        new["learners"][name] = sum((s["learners"][name] for s in summed), np.zeros_like(own["learners"][name]))
    for name, value in own["comm"].items():  # the counters (arrays); its seconds stay this rank's
        if isinstance(value, np.ndarray):
            new["comm"][name] = sum((s["comm"][name] for s in summed), np.zeros_like(value))
    new["timeline"] = Timeline.summed([s["timeline"]["rows"] for s in summed]).state_dict()
    new["transport"] = {"last_sent": np.zeros(0), "epoch": 0, "results_sent": np.zeros(size, dtype=np.int64)}
    new["check"] = {}
    new["coordinator"] = {**states[0]["coordinator"], "counter": 0}
    new["run"] = {**own["run"], "rows_done": 0, "entries_done": sum(int(s["run"]["entries_done"]) for s in summed),
                  "stream": {"first": t, "parts": [[k_, l, a, b, n] for (k_, l, n), a, b in mine]}}
    learners.load_state_dict(new["learners"])
    learners.set_reference_sum(total, k)  # every learner at the mean of the k models, its reference
    new["learners"] = learners.state_dict()
    return new
