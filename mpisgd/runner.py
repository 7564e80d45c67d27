"""One rank's training loop: distributed online learning over MPI.

Every rank is one learner (an ``OnlineLearners(k=1)``) that streams its own
rows; rank 0 is also the coordinator (``mpisgd.protocol.Coordinator``). Round
t of learner l is row t of l's stream; every row is predicted first, its
loss and error charged, then learned from. The run lasts T rounds, T the
longest stream; a shorter stream stops learning after its last row but its
learner keeps taking part in every check and sync (docs/WIRE.md).

Every mode runs the engine loop (``Run._rounds``, ``mpisgd.engine.run_rounds``,
the simulator's too): learn up to the next stop, the pilot's end, the mode's
step there, a timeline row, a checkpoint; how each goes is the mode's
(``mpisgd.protocol.rounds``: ``Lockstep``, ``AsyncRounds``).
Modes of the dynamic protocol (docs/RUNNING.md; the other protocols have one):

- ``async``, the default: only violations and their resolutions
  communicate. A learner checks its local condition at every b-th round; a
  violator sends its model to rank 0 without waiting for it to arrive,
  learns at most ``staleness`` rounds on (0 by default: it waits for the
  result at the round it violated, answering rank 0 meanwhile), skips its
  own checks while its resolution is pending and, when the balanced model
  arrives, keeps the progress it made meanwhile. A quiet
  check sends nothing. Followers answer rank 0 whenever they poll (every
  ``poll_rows`` rounds, or a multiple of it where rows are cheap, sooner when
  that many rows would take a slow rank over ``poll_seconds``, and after a
  violation: ``AsyncRounds.next_stop``); rank 0 resolves the
  violations that have arrived between its own blocks of rows, never
  waiting (``mpisgd.protocol.AsyncCoordinator``), and full syncs are
  nonblocking Allreduces.
- ``sync``: deterministic. The check of round t is begun at t and settled
  at the next check point (``mpisgd.protocol.CheckPoints``): the agreement
  on the number of violators (a nonblocking Allreduce) travels while the
  learners learn; a resolution, if any, runs to completion before anyone
  goes on. The same seeds give the same messages and the same final model,
  and the simulator counts exactly these messages.

Hierarchical synchronization (``--node-size``, sync mode for dynamic): the
ranks form nodes (``comm.node_communicators``); every node average, the
leaders' protocol and the sharing of its results is
``mpisgd.protocol.NodeCheckPoints``, over this rank's ``NodeTransport`` and,
on a leader, an ``MPITransport`` over the leaders' communicator.

``central``: rank 0 alone is the one learner of the serial reference, which
processes round t of every stream in stream order; the other ranks idle.

The run ends with a full sync of every learner's final model (the averaged
one with ``average=True``); rank 0 returns the report, and writes model.h5,
report.json and timeline.csv when given an output directory.

A run can checkpoint at the end of a round (``mpisgd.checkpoint``) and
resume from one: the learners' state, the stream position, the counters and
timers, the timeline, (sync mode) the agreed check awaiting its resolution
and, on rank 0, the coordinator's counter, statistics and random generator
(``Run.state_dict``, each object's own ``state_dict``). In sync mode the
resumed run ends exactly as the uninterrupted one. On another number of
ranks the rows left are dealt again (``checkpoint.elastic``). In async
mode the ranks first make a consistent cut at one round (``AsyncRounds.cut``):
every rank learns up to it, stops there, and rank 0 resolves or drops every
violation sent until then (``AsyncRounds.quiesce``, as at the end of the run); rounds of
--checkpoint-every are known to all, a time-based or signalled checkpoint's
round is agreed on when rank 0 asks (the largest round any rank has done).
"""

import os
import time
from dataclasses import dataclass, field

import numpy as np

from mpisgd import checkpoint
from mpisgd.errors import MpisgdError
from mpisgd.metrics import Timeline
from mpisgd.engine import Engine, rounds_of, run_rounds
from mpisgd.protocol import SHARED, Pilot, ProtocolConfig, Schedule, check_hierarchy_learner, warm_up_protocol



# -- configuration --------------------------------------------------------------------


@dataclass
class RunConfig:
    """Everything a run needs besides its rows and its communicator."""

    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    mode: str = None  # the protocol's mode when given (None: its own); afterwards the protocol's
    learner: dict = field(default_factory=dict)  # keyword arguments of OnlineLearners
    timeline_every: int = 0  # rounds between timeline rows (0: only at the end)
    poll_rows: int = 256  # async: rounds between polls for rank 0's messages (cheap rows: a multiple of it)
    poll_seconds: float = 0.01  # async: and at most about this much of the rank's learning between them
    staleness: int = 0  # async: rounds a violator learns on before it waits for its resolution

    def __post_init__(self):
        self.protocol = self.protocol.with_mode(self.mode)
        self.mode = self.protocol.mode
        if self.timeline_every < 0:
            raise MpisgdError(f"timeline_every: must be >= 0, got {self.timeline_every}")
        if self.poll_rows < 1:
            raise MpisgdError(f"poll_rows: must be >= 1, got {self.poll_rows}")
        if not self.poll_seconds > 0:
            raise MpisgdError(f"poll_seconds: must be > 0, got {self.poll_seconds}")
        if self.staleness < 0:
            raise MpisgdError(f"staleness: must be >= 0, got {self.staleness}")
        if self.protocol.hierarchical:
            check_hierarchy_learner(self.learner)
        if self.protocol.fda_estimate == "exact":
            raise MpisgdError("protocol: fda_estimate (--fda-estimate) 'exact' is the simulator's oracle (it would "
                              "cost a dense Allreduce per check); train uses 'linear'")

    def as_dict(self):
        return {"protocol": self.protocol.as_dict(), "mode": self.protocol.mode, "learner": dict(self.learner),
                "timeline_every": self.timeline_every, "poll_rows": self.poll_rows, "poll_seconds": self.poll_seconds,
                "staleness": self.staleness}


# -- the run --------------------------------------------------------------------------


class Run:
    """One rank's part of a distributed run over communicator ``comm``.

    ``source``: this rank's RowSource (rank 0's is the round-major stream of
    every learner for ``central``; the other ranks' are then ignored).
    ``progress(t, T)``: called on rank 0 after each block of rounds.
    ``observer``: tests' hook (sync mode), an object whose ``before(t, run)``
    and ``after(t, run, members)`` are called around every check point on
    every rank (members: the balancing set, on rank 0; else None).
    ``checkpointer``: a ``mpisgd.checkpoint.Checkpointer`` (either mode);
    ``resume``: a directory to resume from (``checkpoint.choose``), checked
    against ``fingerprint`` (``checkpoint.fingerprint``); ``streams(k, l)``:
    the RowSource of learner l of k as the run's data deals them at first,
    from which a resume on another number of ranks deals the rows left
    (``stream``, ``mpisgd.data.rows.DealtSource``).
    """

    def __init__(self, comm, source, config, progress=None, observer=None, checkpointer=None, resume=None,
                 fingerprint=None, streams=None):
        from mpisgd.comm import CountingComm, MPITransport, NodeTransport, node_communicators
        from mpisgd.learners import OnlineLearners

        self.comm = CountingComm(comm)
        self.rank, self.size = self.comm.rank, self.comm.size
        self.source = source
        self.config = config
        self.progress = progress
        self.observer = observer
        self.central = config.protocol.central
        self.asynchronous = config.protocol.asynchronous(self.size)
        if config.protocol.monitoring and (checkpointer is not None or resume is not None):
            raise MpisgdError("protocol: checkpoints (--checkpoint-every, --checkpoint-seconds, --resume) "
                              "do not support fda yet")
        self.checkpointer = checkpointer
        self.resume, self.fingerprint = resume, fingerprint
        self.resumed = None  # (round directory, t, the checkpoint's ranks) when resumed
        self.streams = streams
        # this rank's rows: from round `first` on, rows [a, b) of the streams [k, l, a, b, n] of `parts`,
        # stream l of k (with n rows) as the data deals them at first
        self.stream = {"first": 0, "parts": [[self.size, self.rank, 0, int(source.n_rows), int(source.n_rows)]]}
        self._check_inputs()
        self.learners = OnlineLearners(1, source.n_features, **config.learner,
                                       directions=config.protocol.directions)
        self.nodes = None  # hierarchical: this rank's NodeTransport
        if config.protocol.hierarchical:
            if checkpointer is not None or resume is not None:
                raise MpisgdError("protocol: checkpoints (--checkpoint-every, --checkpoint-seconds, --resume) "
                                  "do not support hierarchical synchronization (--node-size) yet")
            if config.protocol.node_size != SHARED:
                config.protocol.check_nodes(self.size, config.protocol.node_size)
            node, leaders, m = node_communicators(self.comm, config.protocol.node_size)
            config.protocol.check_nodes(self.size, m)
            self.node_comm = node
            # the start, pilot and final collectives over every rank; the protocol between node leaders
            models = not config.protocol.syncs_every_violation(self.size // m)  # violations carry them
            self.world = MPITransport(self.comm, self.learners)
            self.transport = None if leaders is None else MPITransport(leaders, self.learners,
                                                                        violation_models=models)
            self.nodes = NodeTransport(node, self.learners, self.transport)
            self.engine = Engine(config.protocol, self.size // m, self.transport, self.nodes)
        else:
            models = not config.protocol.syncs_every_violation(self.size)  # violations carry them
            self.transport = MPITransport(self.comm, self.learners, asynchronous=self.asynchronous,
                                          violation_models=models)
            self.world = self.transport
            self.engine = Engine(config.protocol, self.size, self.transport)
        self.coordinator, self.checkpoints = self.engine.coordinator, self.engine.points
        self.timeline = Timeline()
        self.members = None
        self.pilot = None  # --delta auto: the pilot of the first P rounds, until Δ is set (run)
        self._pilot_state = None  # a resumed pilot's rows so far (Pilot.state_dict)
        self._owner = np.zeros(0, dtype=np.int64)
        self._ends = np.zeros(0, dtype=np.int64)  # 1, 2, …: the check points' rows (``learn_until_violation``)
        self.rows_done = 0
        self.entries_done = 0  # the non-zeros of those rows (--budget)
        self.compute_seconds = 0.0
        self.waiting_seconds = 0.0  # async: a violator waiting for its resolution
        # times spent before the checkpoint a run resumed from
        self.times_before = {"io": 0.0, "wall": 0.0, "loop": 0.0, "checkpoint": 0.0}

    def _check_inputs(self):
        """Every rank has the same n_features (metadata before the run, not counted)."""
        mine = (int(self.source.n_features), self.source.describe)
        everyone = self.comm.allgather_meta(mine)
        counts = {n for n, _ in everyone}
        if len(counts) > 1:
            first = everyone[0][0]
            odd = [f"rank {r} ({d}): {n}" for r, (n, d) in enumerate(everyone) if n != first]
            raise MpisgdError(
                f"n_features differs across shards: rank 0 ({everyone[0][1]}) has {first}, but "
                + "; ".join(odd)
            )
        if mine[0] < 1:
            raise MpisgdError(f"rank {self.rank} ({mine[1]}): n_features must be >= 1")

    # -- learning ---------------------------------------------------------------

    def learn(self, stop):
        """Learn this rank's rows up to round ``stop`` (those that exist; with
        ``central`` rank 0 alone learns)."""
        if self.central and self.rank != 0:
            return
        start = time.perf_counter()
        io_before = self.source.io_seconds
        want = self.source.rows_until(stop) - self.rows_done
        while want > 0:
            rows = self.source.take(want)
            if rows is None:
                raise MpisgdError(
                    f"rank {self.rank} ({self.source.describe}): stream ended after "
                    f"{self.rows_done} rows, {self.source.n_rows} announced"
                )
            indptr, indices, data, y = rows
            m = len(y)
            if len(self._owner) < m:
                self._owner = np.zeros(m, dtype=np.int64)
            try:
                self.learners.learn(indptr, indices, data, y, self._owner[:m])
            except MpisgdError as exc:  # name the data
                raise MpisgdError(f"{self.source.describe}, rows from {self.rows_done}: {exc}") from None
            self._measure(indptr, data, y, m)
            self.rows_done += m
            self.entries_done += int(indptr[m] - indptr[0])
            want -= m
        self.compute_seconds += time.perf_counter() - start - (self.source.io_seconds - io_before)

    def learn_until_violation(self, t, stop):
        """Async: learn rounds (t, stop] through the check points at which this
        learner meets its local condition, one kernel call per block of rows
        (``OnlineLearners.learn_until_violation``): a quiet check costs no
        Python. Stops right after the first violating check. Returns
        (round reached, violated)."""
        b = self.config.protocol.period
        threshold = self.coordinator.threshold
        start = time.perf_counter()
        io_before = self.source.io_seconds
        violated = False
        while t < stop and not violated:
            want = self.source.rows_until(stop) - self.rows_done
            rows = self.source.take(want) if want > 0 else None
            if rows is None:  # this stream has ended: its model no longer moves
                if want > 0:
                    raise MpisgdError(f"rank {self.rank} ({self.source.describe}): stream ended after "
                                      f"{self.rows_done} rows, {self.source.n_rows} announced")
                first = (t // b + 1) * b  # its next check point
                if first <= stop and self.learners.distances()[0] > threshold(first):
                    return first, True
                t = stop
                break
            indptr, indices, data, y = rows
            m = len(y)
            if len(self._owner) < m:
                self._owner = np.zeros(m, dtype=np.int64)
            if len(self._ends) < m:
                self._ends = np.arange(1, m + 1)
            # the check points in (t, t + m] as rows of this piece (round t + i is done after row i − 1)
            ends = self._ends[b - 1 - t % b : m : b]
            try:
                made, violated = self.learners.learn_until_violation(indptr, indices, data, y, self._owner[:m],
                                                                     ends, threshold(t + ends))
            except MpisgdError as exc:  # name the data
                raise MpisgdError(f"{self.source.describe}, rows from {self.rows_done}: {exc}") from None
            learned = int(ends[made - 1]) if violated else m
            self.source.put_back(m - learned)
            self._measure(indptr, data, y, learned)
            self.rows_done += learned
            self.entries_done += int(indptr[learned] - indptr[0])
            t += learned
        self.compute_seconds += time.perf_counter() - start - (self.source.io_seconds - io_before)
        return t, violated

    def _measure(self, indptr, data, y, m):
        """--delta auto: the pilot's share of the m rows just learned (those of rounds < P)."""
        if self.pilot is not None:
            j = min(m, self.source.rows_until(self.pilot.end) - self.rows_done)
            if j > 0:
                self.pilot.add(indptr[: j + 1], data, y[:j], self._owner[:j])

    def end_pilot(self, t):
        """--delta auto, after round P on every rank: the pilot's statistics to
        every rank (an Allgather), and Δ from them (``Coordinator.set_auto_delta``)."""
        if self.pilot is not None and t == self.pilot.end:
            self.engine.end_pilot(self.world, self.pilot.statistics()[0], self.config.learner,
                                 self.learners.n_features)
            self.pilot = None

    def tell_progress(self, t):
        """What this rank has done, for the agreements that use it: its rounds
        (an async cut's round, --budget) and the non-zeros it learned (--budget)."""
        self.transport.at, self.transport.entries = t, self.entries_done

    # -- protocol steps (sync mode) -----------------------------------------------------

    def check(self, t):
        """The check point after round t (sync mode)."""
        if self.observer is not None:
            self.observer.before(t, self)
        if self.transport is not None:
            self.tell_progress(t)
        self.members = self.engine.check(t)
        if self.observer is not None:
            self.observer.after(t, self, self.members if self.rank == 0 else None)

    def _final_sync(self):
        """Every learner's final model (averaged with ASGD), averaged over learners."""
        if self.learners.average:
            coef, intercept = self.learners.averaged_weights(0)
        else:
            coef, intercept = self.learners.weights(0)
        z = np.append(coef, [intercept, 0.0])  # z with α = 0: u = w
        if self.central:
            return coef, intercept
        mean = self.coordinator.final_sync(self.world, z)  # its statistics count on rank 0's
        n = self.learners.n_features
        return mean[:n].copy(), float(mean[n])

    def record(self, t):
        seconds = time.perf_counter() - self._loop_start + self.times_before["loop"]  # wall, since the loop began
        self.timeline.record(t, int(self.learners.errors[0]), float(self.learners.loss_sum[0]),
                             self.comm.bytes_by_category(), seconds)

    # -- main loops -----------------------------------------------------------------

    def run(self):
        """Train; returns (coef, intercept) of the final model on every rank."""
        self.learners.warm_up()  # no rank starts late
        self.source.warm_up()
        warm_up_protocol(self.config.protocol, self.config.learner)
        wall = self._wall_start = time.perf_counter()
        learning = self.rank == 0 or not self.central
        t = 0
        if self.resume is None:
            T = self.world.rows_allreduce(self.source.rounds if learning else 0)
        else:  # T counted once, by the interrupted run; its rows perhaps dealt again
            t = checkpoint.restore(self)
            T = self.comm.max_meta(self.source.rounds if learning else 0)
        self.T = T
        self.coordinator.horizon = T * self.size  # --budget: every learner's rounds
        if self.config.protocol.auto and self.coordinator.delta is None and T > 0:
            self.pilot = Pilot(self.config.protocol, self.config.learner, 1, T)
            if self._pilot_state is not None:
                self.pilot.load_state_dict(self._pilot_state)
        loop = self._loop_start = time.perf_counter()
        self._rounds(T, t)
        self.loop_seconds = time.perf_counter() - loop + self.times_before["loop"]
        self.coef, self.intercept = self._final_sync()
        self.wall_seconds = time.perf_counter() - wall + self.times_before["wall"]
        return self.coef, self.intercept

    def _rounds(self, T, t=0):
        """The rounds from t to T, through the engine loop (``engine.run_rounds``)
        in the run's mode (``mpisgd.protocol.rounds``); at the end the mode settles."""
        schedule = Schedule(self.config.protocol, self.size, T, self.config.timeline_every)
        rounds = self.rounds = rounds_of(self.config.protocol, self.size)(self, schedule)
        run_rounds(rounds, t, T)
        if T == 0:
            self.record(0)
        rounds.end(T)

    def wait(self, done, answer, t):
        """Async: answer rank 0 (on rank 0: resolve) until ``done()``; counted as waiting."""
        start = time.perf_counter()
        while not done():
            answer(t)
            os.sched_yield()  # a waiting rank leaves its core to the ranks that must progress
        self.waiting_seconds += time.perf_counter() - start

    # -- checkpoints (mpisgd.checkpoint) ------------------------------------------------

    def state_dict(self, t):
        """This rank's state after round t, by owner: everything the rest of
        the run depends on. Sync mode: the check begun last is agreed on
        first, so that nothing is in flight; its resolution still waits for
        its check point. Async mode: taken at a cut, after every violation
        was resolved or dropped and every result taken."""
        self.checkpoints.agree(self.transport)
        self.transport.complete_sends()
        now, before = time.perf_counter(), self.times_before
        run = {"round": int(t), "rows_done": self.rows_done, "entries_done": self.entries_done, "stream": self.stream,
               "times": {"compute": self.compute_seconds, "waiting": self.waiting_seconds,
                         "io": self.source.io_seconds + before["io"], "wall": now - self._wall_start + before["wall"],
                         "loop": now - self._loop_start + before["loop"],
                         "checkpoint": self.checkpointer.time + before["checkpoint"]}}
        state = {"run": run, "learners": self.learners.state_dict(), "comm": self.comm.state_dict(),
                 "transport": self.transport.state_dict(), "check": self.checkpoints.state_dict(),
                 "coordinator": self.coordinator.state_dict(), "timeline": self.timeline.state_dict()}
        if self.pilot is not None:  # --delta auto, the pilot not over yet: its rows so far
            state["pilot"] = self.pilot.state_dict()
        return state

    def load_state_dict(self, state):
        """Go on from ``state_dict``'s state (of this rank, or dealt again
        for this rank by ``checkpoint.elastic``): this rank's stream from its
        round on."""
        run = state["run"]
        for name in ("learners", "comm", "transport", "coordinator", "timeline"):
            getattr(self, name).load_state_dict(state[name])
        self.checkpoints.load_state_dict(state["check"])
        self.rows_done, self.entries_done = int(run["rows_done"]), int(run["entries_done"])
        times = run["times"]
        self.compute_seconds, self.waiting_seconds = times["compute"], times["waiting"]
        self.times_before = {k: times[k] for k in self.times_before}
        self._pilot_state = state.get("pilot")
        if run["stream"] != self.stream:  # dealt again by an elastic resume (now or before)
            from mpisgd.data.rows import DealtSource

            if self.streams is None:
                raise MpisgdError("resume: this rank's rows were dealt again, and the run cannot rebuild streams")
            self.source.close()
            self.source = DealtSource([(self.streams(k, l), a, b) for k, l, a, b, _n in run["stream"]["parts"]],
                                      run["stream"]["first"], self.source.n_features)
            self.stream = run["stream"]
        if self.rank == 0 or not self.central:
            self.source.seek(int(run["round"]))

    # -- report -----------------------------------------------------------------------------

    def rank_summary(self):
        io = self.source.io_seconds + self.times_before["io"]
        comm_s = self.comm.seconds
        if self.nodes is not None:  # the node's and the leaders' MPI calls
            comm_s += self.node_comm.seconds + (self.transport.comm.seconds if self.transport is not None else 0.0)
        ck = self.times_before["checkpoint"]
        if self.checkpointer is not None:
            ck += self.checkpointer.time
        return {
            "rank": self.rank,
            "source": self.source.describe,
            "rows": int(self.source.n_rows) if (self.rank == 0 or not self.central) else 0,
            "examples": int(self.learners.examples[0]),
            "loss": float(self.learners.loss_sum[0]),
            "errors": int(self.learners.errors[0]),
            "error_rate": float(self.learners.errors[0] / max(1, self.learners.examples[0])),
            "communication": self.comm.counters(),  # hierarchical: inter-node (the world's and the leaders')
            **({"intra_node": self.node_comm.counters()} if self.nodes is not None else {}),
            "time": {"compute": self.compute_seconds, "communication": comm_s, "io": io,
                     "wall": self.wall_seconds,
                     "loop": self.loop_seconds,  # the rounds, without the start and the final sync
                     "checkpoint": ck,  # deciding on and writing checkpoints
                     "waiting": self.waiting_seconds,  # async: waiting for a resolution or a pacing barrier
                     # protocol bookkeeping outside MPI calls (encoding, new references)
                     "other": max(0.0, self.wall_seconds - self.compute_seconds - comm_s - io - ck)},
        }

    def report(self, extra=None):
        """Gather every rank's summary and timeline on rank 0 (raw communicator,
        after the run: not counted). Returns the report dict on rank 0, else None."""
        summaries = self.comm.gather_meta(self.rank_summary())
        timeline = self.timeline.as_array()
        gathered = None
        if self.rank == 0:
            gathered = np.empty((self.size,) + timeline.shape, dtype=np.float64)
        self.comm.Gather_meta(np.ascontiguousarray(timeline), gathered)
        if self.rank != 0:
            return None
        from mpisgd.report import train_report

        self.merged_timeline = Timeline.summed(list(gathered))
        configuration = {**self.config.as_dict(), "ranks": self.size, "rounds": self.T,
                         "n_features": self.learners.n_features, **(extra or {})}
        report = train_report(configuration, summaries, self.coordinator.stats.as_dict(), self.coordinator.counter)
        report["delta_auto"] = self.coordinator.auto  # --delta auto: the rule, its measured inputs and Δ
        if self.nodes is not None:
            from mpisgd.wire import CATEGORIES

            report["hierarchy"] = {
                "node_size": self.nodes.m, "nodes": self.coordinator.k,
                "node_period": int(self.config.protocol.node_period),
                "intra_node": {side: {c: {key: sum(s["intra_node"][side][c][key] for s in summaries)
                                          for key in ("messages", "bytes")} for c in CATEGORIES}
                               for side in ("sent", "received")}}
        report["budget"] = self.coordinator.budget  # --budget: the last steering step
        ck = self.checkpointer
        if ck is not None or self.resumed is not None:
            report["checkpoints"] = {
                "directory": ck.directory if ck is not None else None,
                "every": ck.every if ck is not None else 0,
                "seconds": ck.seconds if ck is not None else 0.0,
                "written": ck.written if ck is not None else 0,
                "resumed_from": ({"directory": self.resumed[0], "round": self.resumed[1], "ranks": self.resumed[2]}
                                 if self.resumed is not None else None),
            }
        return report

    def write_outputs(self, out_dir, report, loss, complete=None):
        """Rank 0: model.h5, timeline.csv and report.json in ``out_dir``,
        committed as a set, report.json last (``mpisgd.atomic.file_set``);
        ``complete(model, report)`` first adds what the run does not know."""
        from mpisgd.atomic import file_set
        from mpisgd.metrics import write_report
        from mpisgd.model import LinearModel

        os.makedirs(out_dir, exist_ok=True)
        meta = {"algorithm": f"online-{self.config.protocol.name}",
                "protocol": self.config.protocol.as_dict(), "mode": self.config.protocol.mode,
                "ranks": self.size, "rounds": self.T, **{k: v for k, v in self.config.learner.items()
                                                        if isinstance(v, (str, int, float, bool))}}
        model = LinearModel(self.coef, self.intercept, loss, meta)
        if complete is not None:  # faults: the command's completion, before anything is written
            complete(model, report)
        start = time.perf_counter()
        report["outputs"] = {"model": os.path.join(out_dir, "model.h5"),
                             "report": os.path.join(out_dir, "report.json"),
                             "timeline": os.path.join(out_dir, "timeline.csv")}
        with file_set(out_dir, ("model.h5", "timeline.csv", "report.json")) as files:  # faults: as a set
            model.save(files["model.h5"])
            self.merged_timeline.write(files["timeline.csv"])
            report["time"]["output_io"] = time.perf_counter() - start
            write_report(files["report.json"], report)


def _one_blas_thread():
    """One BLAS thread per rank: ranks already fill the cores, and a
    multi-threaded BLAS spinning beside them makes a dense dot product (the
    ‖r‖² of every sync) a thousand times slower on a loaded machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def train(comm, source, config, out_dir=None, progress=None, observer=None, extra=None, checkpointer=None,
          resume=None, fingerprint=None, complete=None, streams=None):
    """Run distributed online learning; returns (run, report) with the report
    on rank 0 only (None elsewhere). Writes outputs when ``out_dir`` is given
    (``complete``: see ``Run.write_outputs``). ``checkpointer``, ``resume``,
    ``fingerprint``, ``streams``: see ``Run``."""
    with _one_blas_thread():
        run = Run(comm, source, config, progress=progress, observer=observer, checkpointer=checkpointer,
                  resume=resume, fingerprint=fingerprint, streams=streams)
        try:
            run.run()
        finally:
            run.source.close()
    report = run.report(extra)
    if out_dir is not None and run.rank == 0:
        run.write_outputs(out_dir, report, config.learner.get("loss", "log"), complete)
    return run, report
