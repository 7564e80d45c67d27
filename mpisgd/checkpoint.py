"""Checkpoints of ``mpisgd train``: the format, what a rank's file holds
(``state``, ``restore``), atomic writes, finding the newest complete
checkpoint, and refusing a foreign one.

Layout (docs/RUNNING.md, "Checkpoint and resume"):

    OUT/checkpoints/round-<t>/rank-<r>.h5   one per rank: written under a temporary
                                            name in the same directory, then os.replace'd
    OUT/checkpoints/round-<t>/COMPLETE      JSON manifest (format version, round, ranks,
                                            configuration), written by rank 0 once every
                                            rank's file is in place (after a barrier)

A checkpoint is taken at the end of a round t, after its protocol step and
timeline row, when nothing is in flight, so that a rank's state is what its
``Run`` holds (``state``). In sync mode every rank is at round t anyway; in
async mode the ranks first make a consistent cut at an agreed round t
(``Run._cut``: every rank learns up to t, rank 0 resolves or drops every
violation sent until then and every result is taken). A rank file holds named
float/int arrays (``/``-separated groups) and scalar or JSON attributes.
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

FORMAT_VERSION = 7  # 2: the agreed check awaiting its resolution (sync mode settles checks one period late);
# 3: the transport's result counts (async mode) and the time spent waiting; 4: --delta auto's record
# names its formula (rda has a rule of its own), and Δ and the --budget record as steered;
# SHA-256 digests of every dataset and of the attributes; 5: the non-zeros learned (--budget);
# 6: the run's id (manifest and rank files) and the configuration's SHA-256 (rank files);
# 7: the timeline's clock (its last column, seconds)
KEEP = 2  # complete checkpoints kept
MARKER = "COMPLETE"
SUBDIR = "checkpoints"  # under --out
EXIT_STOPPED = 75  # stopped by a signal after a complete checkpoint: resume to go on (EX_TEMPFAIL)
STOP_GRACE = 120.0  # seconds from a stop signal to the end of the run, else its watchdog ends it (--stop-grace)

_ROUND = re.compile(r"^round-(\d+)$")


def fingerprint(config, ranks, data):
    """The settings a resumed run must share with the checkpoint: the run
    configuration (protocol, Δ, b, learner, seeds, timeline; not the async
    poll interval), the number of ranks and the data (shard file names, or
    the synthetic stream's parameters)."""
    run = config.as_dict()
    run.pop("poll_rows", None)
    run.pop("poll_seconds", None)
    data = dict(data)
    if "shards" in data:
        data["shards"] = [os.path.basename(os.fspath(p)) for p in data["shards"]]
    return json.loads(json.dumps({**run, "ranks": int(ranks), "data": data}))


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


def check_rank_file(directory, manifest, rank, expected):
    """(arrays, attrs) of this rank's file of the checkpoint ``directory``;
    refuses it if unreadable or corrupt (``read_rank``), or if its round, run
    or configuration is not the manifest's, or its ``expected`` attributes
    ({name: value}) differ."""
    path = rank_file(directory, rank)
    arrays, attrs = read_rank(path)
    marker = os.path.join(directory, MARKER)
    if attrs.get("round") != manifest["round"]:
        raise MpisgdError(f"checkpoint {path}: of round {attrs.get('round')}, but {marker} is of round "
                          f"{manifest['round']} (a rank file of another checkpoint)")
    if (attrs.get("run") != manifest["run"]
            or attrs.get("configuration_sha256") != configuration_digest(manifest["configuration"])):
        raise MpisgdError(f"checkpoint {path}: of another run than {marker} (a rank file of another run)")
    for key, want in expected.items():
        if int(attrs[key]) != want:
            raise MpisgdError(f"checkpoint {path}: {key} is {int(attrs[key])}, this run has {want}")
    return arrays, attrs


def choose(comm, resume, current, expected):
    """Every rank: (round directory, manifest, arrays, attrs) of the newest
    intact checkpoint under ``resume`` (``candidates``), with this rank's
    file. Rank 0 reads each manifest and checks it against ``current`` (the
    fingerprint: another configuration is an error, not a reason to try an
    older checkpoint); every rank checks its file (``check_rank_file``, with
    ``expected(round)``); the ranks agree on the outcome (a broadcast, a
    gather) before any goes on, so that each raises the same error. Rank 0
    says which checkpoints it passed over and why. ``comm``: the raw
    communicator (metadata, not counted)."""
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
                loaded = check_rank_file(directory, manifest, comm.rank, expected(manifest["round"]))
            except MpisgdError as exc:
                why = str(exc)
            why = next((w for w in comm.allgather_meta(why) if w is not None), None)
        if why is None:
            if passed and comm.rank == 0:
                print(f"mpisgd: resuming from {directory}, the newest intact checkpoint; passed over: "
                      + "; ".join(f"{d} ({w})" for d, w in passed), file=sys.stderr, flush=True)
            return (directory, manifest, *loaded)
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

    def save(self, t, arrays, attrs):
        """Write this rank's file of round t; rank 0 marks the checkpoint
        complete once every file is in place and prunes old ones. Returns
        when the checkpoint is complete on every rank."""
        start = time.monotonic()
        directory = round_dir(self.directory, t)
        path = rank_file(directory, self.rank)
        try:
            os.makedirs(directory, exist_ok=True)
            write_rank(path, arrays, {**attrs, "round": int(t), "run": self.run_id,
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


def state(run, t):
    """(arrays, attrs) of a ``mpisgd.runner.Run``'s rank after round t:
    everything the rest of the run depends on. Sync mode: the check begun
    last is agreed on first, so that nothing is in flight; its resolution
    still waits for its check point. Async mode: taken at a cut, after every
    violation was resolved or dropped and every result taken."""
    c, tr = run.comm, run.transport
    agreed = run.checkpoints.agree(tr)
    tr.complete_sends()
    arrays = {f"learners/{k}": v for k, v in run.learners.state_dict().items()}
    arrays["check/last_sent"] = np.zeros(0) if tr.last_sent is None else tr.last_sent
    if agreed is not None:
        check_t, count, violators, models = agreed
        arrays["check/pending"] = np.array([check_t, count], dtype=np.int64)
        if violators is not None:  # rank 0, where violations carry models
            arrays["check/violators"] = np.asarray(violators, dtype=np.int64)
            arrays["check/models"] = np.asarray(models, dtype=np.float64).reshape(len(violators), run.learners.dim)
    arrays.update({"comm/sent_messages": c.sent_messages, "comm/sent_bytes": c.sent_bytes,
                   "comm/recv_messages": c.recv_messages, "comm/recv_bytes": c.recv_bytes,
                   "transport/epoch": np.array([tr.epoch], dtype=np.int64),
                   "transport/results_sent": tr.results_sent,
                   "timeline": run.timeline.as_array()})
    now = time.perf_counter()
    before = run.times_before
    times = {"compute": run.compute_seconds, "communication": c.seconds, "waiting": run.waiting_seconds,
             "io": run.source.io_seconds + before["io"],
             "wall": now - run._wall_start + before["wall"],
             "loop": now - run._loop_start + before["loop"],
             "checkpoint": run.checkpointer.time + before["checkpoint"]}
    attrs = {"rank": run.rank, "ranks": run.size, "rounds": run.T, "rows_done": run.rows_done,
             "entries_done": run.entries_done,
             "source": run.source.describe, "source_rows": int(run.source.n_rows),
             "times": json.dumps(times), "delta_auto": json.dumps(run.coordinator.auto),
             "delta": json.dumps(run.coordinator.delta), "budget": json.dumps(run.coordinator.budget)}
    if run.pilot is not None:  # --delta auto, the pilot not over yet
        parts = run.pilot.parts[0]
        arrays["pilot/values"] = np.concatenate(parts) if parts else np.zeros(0)
    if run.rank == 0:
        co = run.coordinator
        attrs["coordinator"] = json.dumps({"counter": co.counter, "stats": co.stats.as_dict(),
                                           "rng": co.rng.bit_generator.state})
    return arrays, attrs


def restore(run, T):
    """Resume a ``Run`` from the newest intact checkpoint under
    ``run.resume`` (``choose``): every rank loads its own file. Returns the
    round to go on from."""
    from mpisgd.protocol import ProtocolStats

    c, tr = run.comm, run.transport
    learning = run.rank == 0 or not run.central

    def expected(t):  # what this rank's file must say of this run
        return {"rank": run.rank, "ranks": run.size, "rounds": T, "source_rows": int(run.source.n_rows),
                "rows_done": run.source.rows_until(t) if learning else 0}

    current = run.fingerprint or fingerprint(run.config, run.size, {})
    directory, manifest, arrays, attrs = choose(c, run.resume, current, expected)
    t = int(attrs["round"])
    if run.checkpointer is not None:
        run.checkpointer.run_id = manifest["run"]  # the same run, going on
    run.learners.load_state_dict({k[len("learners/"):]: v for k, v in arrays.items() if k.startswith("learners/")})
    last_sent = arrays["check/last_sent"]
    tr.last_sent = np.array(last_sent) if len(last_sent) else None
    tr.epoch = int(arrays["transport/epoch"][0])
    tr.results_sent[...] = arrays["transport/results_sent"]
    if "check/pending" in arrays:
        check_t, count = (int(v) for v in arrays["check/pending"])
        violators = [int(v) for v in arrays["check/violators"]] if "check/violators" in arrays else None
        models = list(arrays["check/models"]) if "check/models" in arrays else None
        run.checkpoints.restore(check_t, count, violators, models)
    for name in ("sent_messages", "sent_bytes", "recv_messages", "recv_bytes"):
        getattr(c, name)[...] = arrays[f"comm/{name}"]
    run.timeline.rows = Timeline.from_array(arrays["timeline"]).rows
    times = json.loads(attrs["times"])
    run.compute_seconds, c.seconds, run.waiting_seconds = times["compute"], times["communication"], times["waiting"]
    run.times_before = {k: times[k] for k in run.times_before}
    if run.rank == 0:
        saved = json.loads(attrs["coordinator"])
        run.coordinator.counter = saved["counter"]
        run.coordinator.stats = ProtocolStats(**saved["stats"])
        run.coordinator.rng.bit_generator.state = saved["rng"]
    run.coordinator.auto = json.loads(attrs["delta_auto"])  # --delta auto: the pilot's record, once it is over
    run.coordinator.delta = json.loads(attrs["delta"])  # as measured, or as --budget has steered it since
    run.coordinator.budget = json.loads(attrs["budget"])  # --budget: the last steering step
    run._pilot_values = arrays.get("pilot/values")
    run.rows_done = int(attrs["rows_done"])
    run.entries_done = int(attrs["entries_done"])
    if learning:
        run.source.seek(t)
    run.resumed = (directory, t)
    return t
