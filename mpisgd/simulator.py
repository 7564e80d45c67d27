"""k learners in one process, round by round, through the protocol code of
the MPI runner (``mpisgd.protocol``), counting every message and byte the MPI
runner would move (docs/WIRE.md): in ``--mode sync`` exactly those of
``train --mode sync``; in the default mode those of its resolutions (no
per-check agreement, no END; DONE and FINISH at the end), each taking effect
``async_delay`` rounds after its check, as ``train``'s arrive late
(``DelayedCheckPoints``; 0, ``Simulation``'s default: the paper's instant
resolution; ``mpisgd simulate`` passes ``ASYNC_DELAY``, 4).

``SimTransport`` is the coordinator's transport over one ``OnlineLearners``
instance holding all k learners. ``Simulation`` runs one configuration; it is
fed the rows of consecutive blocks of rounds (round-major, learners in
order), so several configurations can share one generated stream
(``run_many``), and runs each block through the engine loop of the MPI
runner (``engine.run_rounds``) over its mode's rounds: ``SimLockstep`` (sync
mode, as the runner's ``Lockstep``) or ``SimDelayed`` (the default mode).
``simulate`` is the one-configuration driver.

Every check point (t = rounds done, t ≡ 0 mod b) is ``CheckPoints.check``,
as in the runner: static, a full sync; dynamic, the check of round t begun
(violators = {l : ‖w_l − r‖² > Δ_t} send their models) and settled at the
next check point in sync mode, ``async_delay`` rounds later in the default
mode (the loop then also stops at that round). Checks that find
no violator change nothing but counters, so the learners run through them
inside one kernel call (``Simulation.learn_until_violation``) and they are
counted in bulk. None: nothing; central: one learner takes all k rows of a
round, in learner order, and nothing is communicated.

At the start one control Allreduce (T), at the end one Allreduce of every
learner's final model, the protocol's "final" full sync, both exactly as the
MPI runner counts them (``model_messages`` includes the final 2k, like the
runner's report; ``protocol_messages`` leaves them out).

With ``network``, every message and the rows between them also go into an
event log (``mpisgd.netmodel``), replayed at the end into a predicted wall
time on that network (docs/NETWORK.md); check points then run one by one.

Hierarchical synchronization (``--node-size m``, sync mode): ``Leaders``
presents the node leaders to the protocol, ``NodeSim`` averages the nodes and
shares the leaders' results, and the intra-node traffic is counted apart
(``hierarchy`` in the result).

Also: the phase breakdown (messages by cause, errors and rounds, in the
``drift_window`` rounds after each drift and elsewhere), a timeline
(``TIMELINE_COLUMNS``), the check order (``ORDERS``) and, simulator only, an
adaptive check period (``max_period``).
"""

import time

import numpy as np

from mpisgd import wire
from mpisgd.errors import MpisgdError
from mpisgd.data.rows import interleave
from mpisgd.learners import OnlineLearners
from mpisgd.engine import Engine, run_rounds
from mpisgd.protocol import SHARED, Pilot, Schedule, check_hierarchy_learner

CAT = {name: i for i, name in enumerate(wire.CATEGORIES)}
# d: rounds after its check at which a resolution of the default mode takes effect (``simulate
# --async-delay``). Measured against ``train``'s default mode on the demo's streams (docs/RUNNING.md,
# "The simulator's default mode"): d = 4 gives its online error, full syncs and bytes on an idle machine.
ASYNC_DELAY = 4
ORDERS = ("learn-check", "check-learn")  # within a round: check after learning, or before
PHASES = ("drift", "stable")
# Rows of Simulation.timeline: after the check point of that round, like the MPI runner's timeline.
TIMELINE_COLUMNS = ("round", "errors", "loss", "model_messages", *(f"bytes_{c}" for c in wire.CATEGORIES))  # rounds within `drift_window` after a drift, and the rest


class SimTransport:
    """The coordinator's transport over k in-process learners.

    Counters per rank (``ranks``, default one per learner; central has k
    ranks and one learner) and category (``wire.CATEGORIES``), as the MPI
    runner keeps them: ``sent_bytes``, ``recv_bytes``, ``sent_msgs``,
    ``recv_msgs``, each of shape (k, n_categories). Collective calls, where
    every rank sends and receives the same buffer, are kept as one row
    ``_every_*`` added to every rank when the counters are read (exact, and
    O(1) per call). Point-to-point messages always have rank 0 at one end
    (``up``, ``down``, ``down_to_all``).
    """

    coordinating = True  # every learner is here: the coordinator's requests are carried out directly

    def __init__(self, learners, ranks=None, mode="async", log=None, violation_models=True):
        self.L = learners
        self.sequence = wire.SEQUENCE[mode]  # what a check point sends: ``train --mode sync``'s or the default mode's
        self.violation_models = violation_models  # as ``MPITransport``'s
        self.log = log  # a ``netmodel.EventLog`` to write every message into, or None
        self._ids = 0  # message and request ids of the log
        self._deferred = None  # ids of violation messages rank 0 receives when the check settles
        k, c = (learners.k if ranks is None else int(ranks)), len(wire.CATEGORIES)  # central: k ranks, 1 learner
        self._sent_bytes = np.zeros((k, c), np.int64)
        self._recv_bytes = np.zeros((k, c), np.int64)
        self._sent_msgs = np.zeros((k, c), np.int64)
        self._recv_msgs = np.zeros((k, c), np.int64)
        self._every_bytes = np.zeros(c, np.int64)  # per rank, sent and received alike
        self._every_gathered = np.zeros(c, np.int64)  # per rank, received beyond that (Allgather)
        self._every_msgs = np.zeros(c, np.int64)
        self.resolving = False  # True while rank 0 commands the others (dynamic resolution)
        self.sent = {}  # learner -> the model z it sent with its violation, until settled
        self.results = np.zeros(learners.k, np.int64)  # the results (models, references) each learner has taken
        self.last_count = 0  # violators of the check begun last
        self.variance_log = []  # fda: (sums, exact δ) of every check begun
        self.steer = None  # --budget: Coordinator.steer, after every full sync
        self.partial = None  # --partial: Coordinator.partial_budget, θΔ at every full sync (_partial_sync)
        self.at = 0  # the rounds every learner has done (set at each check point)
        self.entries = 0  # --budget: the non-zeros of the rows every learner has learned (set with ``at``)
        self._paced = 0  # pacing barriers started (default mode), the last one open until the next

    # -- counting -----------------------------------------------------------

    def up(self, ranks, category, nbytes):
        """One message from each of ``ranks`` (distinct, not 0) to rank 0, of
        nbytes bytes (a scalar or one per rank)."""
        self._p2p(self._sent_bytes, self._sent_msgs, self._recv_bytes, self._recv_msgs, ranks, category, nbytes)
        self._log_messages(ranks, 0, nbytes)

    def down(self, ranks, category, nbytes):
        """One message from rank 0 to each of ``ranks`` (distinct, not 0)."""
        self._p2p(self._recv_bytes, self._recv_msgs, self._sent_bytes, self._sent_msgs, ranks, category, nbytes)
        self._log_messages(0, ranks, nbytes)

    def _log_messages(self, senders, receivers, nbytes):
        """Into the log, in order: each message senders[i] → receivers[i] of
        nbytes[i] (scalars broadcast), and its receiver waiting for it (rank 0
        waits for violations only when their check settles)."""
        if self.log is None:
            return
        for s, r, m in zip(*(a.tolist() for a in np.broadcast_arrays(senders, receivers, nbytes))):
            self._ids += 1
            self.log.send(s, r, m, self._ids)
            if r == 0 and self._deferred is not None:
                self._deferred.append(self._ids)
            else:
                self.log.wait(r, self._ids)

    def relay(self, ranks, category, nbytes):
        """One message to each of ``ranks`` (increasing, not 0), of nbytes (one
        per rank), as the default mode's results and FULLSYNC commands go
        (docs/WIRE.md, "Relays"): to more than ``wire.RELAY_ABOVE`` ranks in
        heap order, rank 0 sending to ranks[0], ranks[p] to ranks[2p + 1] and
        ranks[2p + 2], each once it has it; to fewer, from rank 0 directly."""
        ranks = np.asarray(ranks, np.int64)
        if not wire.relayed(len(ranks)):
            self.down(ranks, category, nbytes)
            return
        nbytes = np.broadcast_to(np.asarray(nbytes, np.int64), ranks.shape)
        parents = wire.relay_parents(len(ranks))
        senders = np.where(parents < 0, 0, ranks[parents])
        c = CAT[category]
        np.add.at(self._sent_bytes[:, c], senders, nbytes)
        np.add.at(self._sent_msgs[:, c], senders, 1)
        self._recv_bytes[ranks, c] += nbytes
        self._recv_msgs[ranks, c] += 1
        self._log_messages(senders, ranks, nbytes)  # a member's parent comes before it

    def send(self, step, ranks=(), payload=0, count=1):
        """The messages of ``step`` of a check point (``wire.SEQUENCE``) to or
        from ``ranks`` (≠ 0), each carrying ``payload`` bytes; an allreduce
        ``count`` times. Returns the log's request of a nonblocking allreduce,
        or None."""
        message = self.sequence[step]
        if message is None or count == 0:
            return None
        ranks = np.asarray(ranks, np.int64)
        k = len(self._sent_bytes)
        nbytes = message.nbytes(payload, len(ranks), k)
        if message.route == "allreduce":
            self._count_allreduce(message.category, nbytes, count)
            if self.log is None:
                return None
            self._ids += 1
            self.log.iallreduce(nbytes, self._ids)
            return self._ids
        if message.route == "everyone":
            self.down_to_all(message.category, nbytes)
        elif message.route == "relay":
            self.relay(ranks, message.category, nbytes)
        else:
            getattr(self, message.route)(ranks, message.category, nbytes)  # up, down
        return None

    def down_to_all(self, category, nbytes):
        """One message of nbytes from rank 0 to every other rank (a command)."""
        self._log_messages(0, np.arange(1, len(self._sent_bytes)), nbytes)
        c, m = CAT[category], len(self._sent_bytes) - 1
        self._recv_bytes[1:, c] += nbytes
        self._recv_msgs[1:, c] += 1
        self._sent_bytes[0, c] += m * nbytes
        self._sent_msgs[0, c] += m

    @staticmethod
    def _p2p(their_bytes, their_msgs, coordinator_bytes, coordinator_msgs, ranks, category, nbytes):
        c, m = CAT[category], len(ranks)
        if m == 1:  # a fetch during augmentation: scalar updates are 10× cheaper than fancy indexing
            nbytes = int(nbytes[0]) if np.ndim(nbytes) else int(nbytes)
            their_bytes[ranks[0], c] += nbytes
            their_msgs[ranks[0], c] += 1
            coordinator_bytes[0, c] += nbytes
        elif m:
            their_bytes[ranks, c] += nbytes  # ranks are distinct: no repeated index to lose
            their_msgs[ranks, c] += 1
            coordinator_bytes[0, c] += int(np.sum(nbytes)) if np.ndim(nbytes) else int(nbytes) * m
        coordinator_msgs[0, c] += m

    def allreduce(self, category, nbytes, count=1):
        """count Allreduces: every rank sends and receives nbytes in each."""
        if self.log is not None:
            for _ in range(count):
                self.log.allreduce(nbytes)
        self._count_allreduce(category, nbytes, count)

    def pilot_allgather(self, statistics):
        """--delta auto: every learner's pilot statistics to every rank (one
        Allgather: each rank sends wire.PILOT_BYTES and receives k times that)."""
        c, k = CAT["control"], len(self._sent_bytes)
        if self.log is not None:
            self.log.allreduce(k * wire.PILOT_BYTES)
        self._sent_bytes[:, c] += wire.PILOT_BYTES
        self._recv_bytes[:, c] += k * wire.PILOT_BYTES
        self._sent_msgs[:, c] += 1
        self._recv_msgs[:, c] += 1
        return statistics

    def _count_allreduce(self, category, nbytes, count=1):
        c = CAT[category]
        self._every_bytes[c] += count * nbytes
        self._every_msgs[c] += count

    def allgather(self, category, nbytes):
        """One Allgather: every rank sends a block of nbytes and receives every
        rank's block. (In the event log: an Allreduce of all the blocks.)"""
        k = len(self._sent_bytes)
        if self.log is not None:
            self.log.allreduce(k * nbytes)
        self._count_allreduce(category, nbytes)
        self._every_gathered[CAT[category]] += (k - 1) * nbytes

    def counters(self):
        """(sent_bytes, recv_bytes, sent_msgs, recv_msgs), each (k, n_categories) int64."""
        return (
            self._sent_bytes + self._every_bytes,
            self._recv_bytes + self._every_bytes + self._every_gathered,
            self._sent_msgs + self._every_msgs,
            self._recv_msgs + self._every_msgs,
        )

    def message_nbytes(self, nnz):
        """Wire sizes of model messages (``OnlineLearners.message``) whose v has
        nnz non-zeros: sparse or dense, whichever is smaller."""
        return self.L.message_nbytes(nnz)

    def _messages(self, ids, z, nnz):
        """The models z of learners ids as rank 0 receives them, and their sizes:
        with compression each learner ≠ 0 encodes its message (its draws, as
        its rank would) and rank 0 decodes it; rank 0's own model is local."""
        nbytes = self.message_nbytes(nnz)
        if self.L.compress == "none":
            return z, nbytes
        z, nbytes = np.array(z), np.array(nbytes)
        for i, l in enumerate(np.asarray(ids).tolist()):
            if l != 0:
                buf = self.L.message(l)
                z[i], nbytes[i] = self.L.decode(buf), len(buf)
        return z, nbytes

    def _budget(self):
        """--partial: θΔ now (model messages are partial, docs/ALGORITHMS.md §4.7); else None."""
        return None if self.partial is None else self.partial()

    def _models(self, ids, asked=None):
        """The models learners ids send rank 0 (``_messages``), or with --partial
        their partial models on at least the coordinates ``asked`` for
        (``OnlineLearners.partial_message``: rank 0's own exact, the others as
        rank 0 decodes them), and their sizes."""
        budget = self._budget()
        if budget is None:
            return self._messages(ids, *self.L.models_and_nnz(ids))
        sent = [self.L.partial_message(l, budget, asked, local=l == 0) for l in np.asarray(ids).tolist()]
        return [part for _buf, part in sent], np.array([0 if buf is None else len(buf) for buf, _p in sent], np.int64)

    def _others(self, ids):
        ids = np.asarray(ids, np.int64)
        return ids[ids != 0]  # rank 0 is the coordinator: its own model is local

    # -- the coordinator's interface ------------------------------------------

    def begin_check(self, delta, deferring=()):
        """Every learner checks ‖w_l − r‖² ≤ Δ, but those ``deferring`` (their
        violation is still open); violators ≠ 0 send their models (counted),
        and in sync mode every rank joins the sum of violators. Without
        violation models a violator ≠ 0 sends an empty message in the default
        mode, and nothing in sync mode (the sum tells every rank)."""
        checking = self.L.distances() > delta
        checking[list(deferring)] = False
        violators = np.flatnonzero(checking)
        away = violators != 0  # rank 0's own violation is local
        self._deferred = []
        if self.violation_models:
            models, nbytes = self._models(violators)
            self.up(violators[away], "violation", nbytes[away])
        else:
            models = None
            self.send("empty_violation", violators[away])
        messages, self._deferred = self._deferred, None
        request = self.send("count")  # the agreement on the number of violators
        if models is not None:
            self.sent.update(zip(violators.tolist(), models))
        self.last_count = len(violators)
        return violators, models, messages, request

    @staticmethod
    def merge_checks(checks):
        """One check's handle (``begin_check``'s) from (handle, ids) of several, keeping
        the violations of learners ids (rank 0 resolves them in learner order) and
        every message (an event log's receives)."""
        parts = [(np.searchsorted(h[0], ids).astype(np.int64), h) for h, ids in checks]
        violators = np.concatenate([np.zeros(0, np.int64)] + [h[0][i] for i, h in parts])
        order = np.argsort(violators, kind="stable")
        models = None
        if parts and parts[0][1][1] is not None:
            every = [h[1][j] for i, h in parts for j in i.tolist()]  # whole models, or partial ones (wire.Part)
            models = [every[j] for j in order.tolist()]
        return violators[order], models, [m for _i, h in parts for m in h[2]], None

    def quiet_checks(self, count):
        """The messages of ``count`` checks that found no violator: each one's
        agreement on the number of violators (sync mode: an Allreduce)."""
        self.send("count", count=count)  # (never with an event log: it sees every check point)

    def end_check(self, handle):
        violators, models, messages, request = handle
        if self.log is not None:
            if request is not None:
                self.log.complete(request)
            for i in messages:
                self.log.wait(0, i)
        return len(violators), violators, models

    def begin_variance(self):
        """fda: every learner's summary [‖w_l − r‖², ⟨w_l − r, ξ_q⟩ …] into one
        nonblocking Allreduce (control); also the exact δ, the diagnostic."""
        L = self.L
        sums = L.summaries().sum(axis=0)  # learners in order
        self._count_allreduce("control", wire.summary_nbytes(len(L.Xi)))
        request = None
        if self.log is not None:
            self._ids += 1
            request = self._ids
            self.log.iallreduce(wire.summary_nbytes(len(L.Xi)), request)
        exact = exact_variance(L)
        self.variance_log.append((sums, exact))
        return sums, exact, request

    def end_variance(self, handle):
        sums, exact, request = handle
        if self.log is not None and request is not None:
            self.log.complete(request)
        return sums, exact

    def open_resolution(self):
        self.resolving = True

    def close_resolution(self):
        """The end of a resolution (sync mode: END to every serving rank)."""
        self.send("end")
        self.resolving = False

    def settled(self):
        self.sent = {}

    def fetch(self, ids, asked=None):
        ids = np.asarray(ids, np.int64)
        z, nbytes = self._models(ids, asked)
        away = ids != 0  # rank 0 is the coordinator: its own model is local
        self.down(ids[away], "balance_request", wire.request_nbytes(0 if asked is None else len(asked)))
        self.up(ids[away], "balance_reply", nbytes[away])
        # a reply remembered as sent: its rounding error stays with the learner (--compress), a learner
        # whose violation waits (the default mode) keeps the steps it makes from its reply on, and a
        # partial model is what its learner takes the result on
        self.sent.update((l, z[i]) for i, l in enumerate(ids.tolist())
                         if l in self.sent or (l != 0 and self.L.compress != "none") or isinstance(z[i], wire.Part))
        return z

    def divergence(self, model):
        return self.L.divergence(model)

    def distances(self):
        others = np.arange(1, self.L.k)
        self.down(others, "control", wire.DIST_BYTES)  # COMMAND DIST
        self.up(others, "control", 8)  # float64 reply
        return self.L.distances()

    def send_balanced(self, ids, model, new_reference):
        """Learners ids take ``model``; those that sent a violation keep the
        steps they made since (``OnlineLearners.progress``)."""
        L, n = self.L, self.L.n_features
        others = self._others(ids)
        if L.compress != "none" and len(others):
            buf = L.encode(0, model)  # rank 0's draws
            model, nbytes = L.decode(buf), len(buf)  # every member takes the model sent
        else:
            nbytes = wire.model_nbytes(int(np.count_nonzero(model[:n])), n)
        self.send("balance_result", others, nbytes)
        members = set(np.asarray(ids).tolist())
        self.results[slice(None) if new_reference else np.asarray(ids, np.int64)] += 1
        progress = {l: L.progress(l, z) for l, z in self.sent.items() if new_reference or l in members}
        if new_reference:
            L.set_reference(model)
            model = L.models([0])[0]  # r itself: u = 0, α = 1
        else:
            L.set_models(ids, model)
        for l, steps in progress.items():
            L.take(l, model, steps)

    def send_parts(self, ids, parts):
        """--partial: each learner of ids takes its own part (``MPITransport.send_parts``:
        its values on S_l and b̄ as one message each, quantized with rank 0's draws in id
        order; rank 0 takes its own exactly)."""
        L = self.L
        ids = [int(i) for i in ids]
        nbytes, taken = [], []
        for i, part in zip(ids, parts, strict=True):
            z = part.z
            if i != 0:
                if L.compress != "none":
                    buf = L.result_message(0, part)
                    z = L.decode_result(buf, part.support)
                    nbytes.append(len(buf))
                else:
                    nbytes.append(int(wire.result_nbytes(np.count_nonzero(part.support))))
            taken.append(z)
        self.send("partial_result", self._others(ids), np.array(nbytes, np.int64))
        self.results[ids] += 1
        for i, z in zip(ids, taken):
            L.take_part(i, z, self.sent[i])

    def full_sync(self):
        """The Allreduce; inside a resolution (``resolving``) rank 0 first sends
        COMMAND FULLSYNC to every other rank (relayed in the default mode). Every
        current model goes into the mean."""
        L, n, k, compress = self.L, self.L.n_features, self.L.k, self.L.compress
        if self.resolving:
            self.send("fullsync_command", np.arange(1, k))
        budget = None if self.partial is None else self.partial()
        if budget is not None:
            self._partial_sync(budget)
        else:
            ids = np.arange(k)
            z, nnz, scales = L.sync_parts(ids)
            probe = wire.sync_probe_size(n, k, compress)
            if probe:  # MPITransport._full_sync_steps: max nnz and the shared scales
                self.allreduce("full_sync", 8 * probe)
                m, c = int(nnz.max()), scales.max(axis=0)
            if probe and wire.sync_pairs(n, k, compress, m):
                self.allgather("full_sync", wire.sync_block_nbytes(m))
                total = _sum_in_order(z)  # as wire.sum_blocks adds the blocks
            elif compress == "none":
                self.allreduce("full_sync", wire.dense_nbytes(n))
                total = _sum_in_order(z)
            else:
                self.allreduce("full_sync", wire.sync_dense_nbytes(n, k, compress))
                total = wire.sync_unlevel(L.sync_levels(ids, z, c, k).sum(axis=0), c, k, L.r_bias, compress)
            L.set_reference_sum(total, k)
        self.sent = {}
        self.results += 1
        if self.steer is not None:  # --budget: MPITransport._full_sync_steps
            spent = self.counters()[0].sum()
            self.allreduce("full_sync", wire.BUDGET_BYTES)
            self.steer(spent, self.at * k, self.entries, n)

    def _partial_sync(self, budget):
        """--partial (``MPITransport._partial_steps``, the same bytes): every
        learner's S_l for θΔ = budget, the probe of m = max |S_l|, the index
        blocks, the sum over their union S; or, when the blocks would
        outweigh a dense sum, the dense full sync."""
        L, n, k = self.L, self.L.n_features, self.L.k
        idx = np.empty((k, n), dtype=np.int32)
        counts = [L.partial_support(l, budget, idx[l]) for l in range(k)]
        self.allreduce("full_sync", 8)
        m = max(counts)
        if not wire.partial_pays(n, k, m):
            self.allreduce("full_sync", wire.dense_nbytes(n))
            L.set_reference_sum(_sum_in_order(L.models(np.arange(k))), k)
            return
        self.allgather("full_sync", wire.index_block_nbytes(m))
        support = np.unique(np.concatenate([idx[l, :c] for l, c in enumerate(counts)])).astype(np.int64)
        self.allreduce("full_sync", 8 * (len(support) + 1))
        d = np.empty((k, len(support)))  # every learner's w − r on S
        for l in range(k):
            L.deviation_on(l, support, d[l])
        L.set_partial_sum(support, np.append(d.sum(axis=0), L.bias.sum()), k)

    def pace(self):
        """Default mode, at a pace round: every rank waits for the previous pacing
        barrier and enters the next (``AsyncLearner.start_pace`` over ``MPITransport.pace_barrier``): one message of
        no bytes per rank (control)."""
        self.end_pace()
        self._paced += 1
        if self.log is not None:
            self.log.ibarrier(-self._paced)  # pacing requests: negative ids, apart from the checks'
        self._count_allreduce("control", 0)

    def end_pace(self):
        """Complete the pacing barrier started last, if any (at a pace round, and at the end)."""
        if self.log is not None and self._paced:
            self.log.complete(-self._paced)

    def final_mean(self, z):
        """The final Allreduce of every learner's final model z, shape (k, n + 2)."""
        self.allreduce("full_sync", wire.dense_nbytes(z.shape[1] - 2))
        return z.sum(axis=0) / len(z)


class Leaders:
    """The node leaders of k learners L in nodes of m consecutive learners
    (learner j·m leads node j), as the leaders' protocol sees them: N = k/m
    learners, learner j standing for node j (hierarchical synchronization,
    ``protocol.NodeCheckPoints``). Every call on learners ids goes to their
    leaders; r is shared by all k learners, so a new reference resets them
    all, as every rank does once its leader shares it. ``changed``: the
    leaders whose model a result set since ``NodeSim.share`` last looked."""

    def __init__(self, L, m):
        self.L, self.m = L, int(m)
        self.ids = np.arange(0, L.k, self.m)
        self.k = len(self.ids)
        self.changed, self.new_reference = set(), False

    def __getattr__(self, name):  # n_features, compress, r, divergence, message_nbytes, …
        return getattr(self.L, name)

    def distances(self):
        return self.L.distances()[self.ids]

    def models_and_nnz(self, ids):
        return self.L.models_and_nnz(self.ids[np.asarray(ids, np.int64)])

    def models(self, ids):
        return self.models_and_nnz(ids)[0]

    def sync_parts(self, ids):
        return self.L.sync_parts(self.ids[np.asarray(ids, np.int64)])

    def progress(self, l, z_sent):
        return self.L.progress(int(self.ids[l]), z_sent)

    def set_models(self, ids, z):
        ids = np.atleast_1d(np.asarray(ids, np.int64))
        self.changed.update(ids.tolist())
        self.L.set_models(self.ids[ids], z)

    def take(self, l, z, progress=None):
        self.changed.add(int(l))
        self.L.take(int(self.ids[l]), z, progress)

    def set_reference(self, z):
        self.new_reference = True
        self.L.set_reference(z)

    def set_reference_sum(self, total, k):
        self.new_reference = True
        self.L.set_reference_sum(total, k)


class NodeSim:
    """The node transport of the simulator (``comm.NodeTransport``): the node
    average and the leaders' models shared in every node, over k learners L
    in nodes of m, counted per rank in ``counts`` (a ``SimTransport`` over k
    ranks used as counters: intra-node traffic)."""

    def __init__(self, leaders):
        self.leaders, self.L, self.m = leaders, leaders.L, leaders.m
        self.counts = SimTransport(self.L, self.L.k)
        self.n = self.L.n_features

    def average(self):
        """Every node's mean z, its members' z summed in order (one dense Allreduce per node)."""
        if self.m == 1:
            return
        L, m = self.L, self.m
        z = L.models(np.arange(L.k)).reshape(self.leaders.k, m, -1)
        total = z[:, 0].copy()
        for i in range(1, m):
            total += z[:, i]
        for j in range(self.leaders.k):
            L.set_models(np.arange(j * m, (j + 1) * m), total[j] / m)
        self.counts._count_allreduce("full_sync", wire.dense_nbytes(self.n))

    def share(self):
        """The flag of every node (control), r after a new reference and the
        leader's z after any result (balance_result), each a Bcast from the
        leader to its m − 1 members; the members take the leader's model."""
        lead = self.leaders
        changed = range(lead.k) if lead.new_reference else sorted(lead.changed)
        lead.changed, new_reference, lead.new_reference = set(), lead.new_reference, False
        if self.m == 1:
            return
        self._bcast(range(lead.k), "control", wire.CONTROL_BYTES)
        if new_reference:
            self._bcast(changed, "balance_result", wire.dense_nbytes(self.n))
        self._bcast(changed, "balance_result", wire.dense_nbytes(self.n))
        z = self.L.models(lead.ids[list(changed)]) if len(changed) else ()
        for j, zj in zip(changed, z):
            self.L.set_models(np.arange(j * self.m + 1, (j + 1) * self.m), zj)

    def _bcast(self, nodes, category, nbytes):
        """One Bcast in each of ``nodes``, from its leader."""
        nodes = np.asarray(list(nodes), np.int64)
        if not len(nodes):
            return
        c, m = CAT[category], self.m
        members = (nodes[:, None] * m + np.arange(1, m)).ravel()
        counts = self.counts
        counts._sent_bytes[nodes * m, c] += nbytes
        counts._sent_msgs[nodes * m, c] += 1
        counts._recv_bytes[members, c] += nbytes
        counts._recv_msgs[members, c] += 1


def exact_variance(L):
    """δ = (1/k) Σ_l ‖w_l − w̄‖² of learners L, densely (bias included): the
    simulator's diagnostic of fda's estimate, and its oracle."""
    z = L.models(np.arange(L.k))
    n = L.n_features
    w = np.column_stack([z[:, n + 1, None] * L.r + z[:, :n], z[:, n]])  # [α·r + u, b]
    return float(((w - w.mean(axis=0)) ** 2).sum(axis=1).mean())


def _sum_in_order(z):
    """Σ_l z_l, adding the rows in order."""
    total = np.zeros(z.shape[1])
    for row in z:
        total += row
    return total


class SimLockstep:
    """The simulator's rounds in sync mode (and every protocol without the
    default mode), for the engine loop (``engine.run_rounds``), as
    ``protocol.rounds.Lockstep`` for the runner: learn up to the next check
    point, a check there (``Simulation.check``). Its check points follow
    ``order``: learn-check after rounds b, 2b, … ≤ T; check-learn before
    rounds 1, b + 1, …, i.e. with t = 0 (``start``), b, 2b, … < T rounds
    done; with ``--max-period`` the gap after a quiet check doubles, up to
    max_period, and is b again after a violation. The dynamic protocol with a
    fixed period learns through the checks that find no violator
    (``Simulation.learn_until_violation``; not with an event log, which sees
    every check point in order, nor hierarchical). The loop also stops at
    the pilot's end and the edges of the drift phases (the errors of one
    learning call are of one phase). No checkpoints, no progress (``run_many``
    has its own, per block)."""

    def __init__(self, sim, schedule, order):
        self.sim, self.schedule, self.points = sim, schedule, sim.checkpoints
        self.b, self.gap, self.max_period = schedule.step, schedule.step, sim.max_period
        self.last = schedule.T if order == "learn-check" else schedule.T - 1  # the last check point
        self.next = self.b if order == "learn-check" else 0  # the next check point (-1: none)
        if not schedule.checking or self.next > self.last:
            self.next = -1
        self.through = sim.protocol.resolving and not self.max_period and sim.log is None and sim.nodes is None

    def start(self):
        """check-learn: the check point before round 1."""
        if self.next == 0:
            self._check(0)

    def _quiet(self):
        """Learning goes on through the check points (``through``): no check begun awaits a resolution."""
        pending = self.points.pending
        return self.through and self.next >= 0 and (pending is None or len(pending[1][0]) == 0)

    def next_stop(self, t):
        # (pace rounds: the default mode's only)
        stop = self.schedule.next_stop(t, protocol=False, pilot=self.sim.pilot is not None, pace=True)
        if self.next >= 0 and not self._quiet():
            stop = min(stop, self.next)
        i = np.searchsorted(self.sim.phase_edges, t, side="right")
        if i < len(self.sim.phase_edges):
            stop = min(stop, int(self.sim.phase_edges[i]))  # one phase per call: exact error attribution
        return stop

    def learn(self, t, stop):
        """Learn rounds (t, stop]; returns the round reached (through quiet checks: a violating check's)."""
        if not self._quiet():
            self.sim.learn(t, stop)
            return stop
        checks = np.arange(self.next, min(stop - 1, self.last) + 1, self.b)  # the check at stop is step's
        t, quiet = self.sim.learn_until_violation(t, stop, checks)
        self._advance(quiet * self.b)
        return t

    def end_pilot(self, t):
        self.sim.end_pilot(t)

    def step(self, t):
        if t == self.next:
            self._check(t)

    def _check(self, t):
        quiet = self.sim.check(t)
        if self.max_period:
            self.gap = min(2 * self.gap, self.max_period) if quiet else self.b
        self._advance(self.gap)

    def _advance(self, rounds):
        """The next check point comes ``rounds`` later (-1: none is left)."""
        self.next += rounds
        if self.next > self.last:
            self.next = -1

    def record(self, t):
        self.sim.record(t)

    def checkpoint_due(self, t):
        return False

    def progress(self, t):
        pass

    def end(self, T):
        self.sim.settle(T)  # the last check begun


class SimDelayed(SimLockstep):
    """The simulator's rounds in the default mode (``ProtocolConfig.asynchronous``),
    its deterministic model of ``AsyncRounds``: a resolution takes effect
    ``async_delay`` rounds after its check (``DelayedCheckPoints.due``), where
    the loop also stops (``Simulation.arrive``) unless it is a check point; a
    pacing barrier at every pace round, after its check; at the end every
    follower's DONE and rank 0's FINISH, and the last barrier completed."""

    def _quiet(self):
        return self.points.due is None and super()._quiet()

    def next_stop(self, t):
        due = self.points.due
        return super().next_stop(t) if due is None else min(super().next_stop(t), due)

    def step(self, t):
        if t == self.next:
            self._check(t)
        elif t == self.points.due:
            self.sim.arrive(t)
        if self.schedule.is_pace(t):
            self.sim.transport.pace()  # as the runner, after the round's check

    def end(self, T):
        super().end(T)
        transport = self.sim.transport
        others = np.arange(1, self.sim.k)
        transport.up(others, "control", wire.CONTROL_BYTES)  # DONE
        transport.down(others, "control", wire.CONTROL_BYTES)  # FINISH
        transport.end_pace()


class Simulation:
    """One configuration, advanced by ``feed`` over consecutive blocks of rounds.

    ``protocol``: a ``ProtocolConfig`` (run in ``mode`` when given);
    ``learner``: keyword arguments of ``OnlineLearners``; ``drifts``: rounds
    after which the stream's target changed (for the phase breakdown only);
    ``async_delay``: the default mode's resolutions take effect this many
    rounds after their check (``DelayedCheckPoints``; 0, the default here: the
    paper's instant resolution, which the reproduction's sweeps count;
    ``mpisgd simulate`` takes ``ASYNC_DELAY``, ``train``'s).
    """

    def __init__(self, k, n_features, rounds, protocol, learner=None, order="learn-check",
                 drifts=(), drift_window=500, timeline_every=0, max_period=0, mode=None, network=None,
                 async_delay=0):
        protocol = protocol.with_mode(mode)  # mode: the protocol's own unless given
        mode = protocol.mode
        if order not in ORDERS:
            raise MpisgdError(f"order: unknown {order!r}; choose one of {', '.join(ORDERS)}")
        if int(rounds) < 1:
            raise MpisgdError(f"rounds: need at least one round, got {rounds!r}")
        if int(async_delay) < 0:
            raise MpisgdError(f"async_delay: rounds must be ≥ 0, got {async_delay!r}")
        self.k, self.n, self.rounds = int(k), int(n_features), int(rounds)
        self.protocol = protocol
        self.learner_args = dict(learner or {})
        self.order = order
        self.central = protocol.central
        self.async_delay = int(async_delay)
        self.L = OnlineLearners(1 if self.central else self.k, self.n, **self.learner_args,
                                directions=protocol.directions)
        self.mode = mode
        # Prediction (docs/NETWORK.md): every message and the rows between them into an event
        # log, replayed on ``network`` (a netmodel preset name or Network) at the end.
        self.network, self.log = None, None
        if network is not None:
            from mpisgd import netmodel

            if self.central:
                raise MpisgdError("network: central moves no messages; there is nothing to predict")
            self.network = netmodel.network(network) if isinstance(network, str) else network
            self.log = netmodel.EventLog()
        self._learn_seconds, self._rows_learned = 0.0, 0  # the measured compute time per row
        # Hierarchical synchronization: the leaders' protocol over ``Leaders``, counted on their ranks
        # (inter-node), beside the start, pilot and final collectives of every rank (``world``).
        self.nodes = None
        if protocol.hierarchical:
            self._check_hierarchy(protocol, self.k, mode, order, max_period, network, self.learner_args)
            leaders = Leaders(self.L, protocol.node_size)
            self.nodes = NodeSim(leaders)
            self.world = SimTransport(self.L, self.k, mode)
            self.transport = SimTransport(leaders, leaders.k, mode,
                                          violation_models=not protocol.syncs_every_violation(leaders.k))
            self.engine = Engine(protocol, leaders.k, self.transport, self.nodes)
            self.b = int(protocol.node_period)  # rounds between the stops of the loop: node averages
        else:
            self.transport = self.world = SimTransport(self.L, self.k, mode, self.log,
                                                       violation_models=not protocol.syncs_every_violation(self.k))
            self.engine = Engine(protocol, self.k, self.transport, delay=None if mode == "sync" else self.async_delay)
            self.engine.coordinator.horizon = self.k * self.rounds
            self.b = int(protocol.period)
        self.coordinator, self.checkpoints = self.engine.coordinator, self.engine.points
        # when the run's check points, pacing barriers, pilot end and timeline rows come (the check points
        # follow --order and --max-period: ``SimLockstep``)
        self.schedule = Schedule(protocol, self.k, self.rounds, timeline_every)
        # Variant (simulator only, dynamic): adaptive check period. After a check with
        # violators the next check comes b rounds later, after a quiet one twice the last
        # gap, up to max_period. Every rank knows the violator count (the control
        # Allreduce), so the MPI runner could follow the same schedule without messages.
        self.max_period = int(max_period)
        if self.max_period and (not protocol.resolving or self.max_period < self.b):
            raise MpisgdError(f"max_period: needs the dynamic protocol and max_period >= period, got {max_period!r}")
        self.t = 0  # rounds done
        self.entries = 0  # non-zeros of the rows learned (every learner)
        self.drifts = np.asarray(drifts, np.int64)
        self.drift_window = int(drift_window)
        # rounds done at which the phase changes: a drift after round d puts rounds d + 1 … d + 1 + W in "drift"
        self.phase_edges = np.unique(np.concatenate([self.drifts, self.drifts + 1 + self.drift_window]))
        self.timeline_every = int(timeline_every)
        self.timeline = []
        self.phase_messages = {p: {} for p in PHASES}
        self.phase_errors = {p: 0 for p in PHASES}
        self.phase_rounds = {p: 0 for p in PHASES}
        self._owner = np.zeros(0, np.int64)
        self._block = None  # the rows fed last and the round before their first (``feed``)
        self._errors_at = 0
        self.world.allreduce("control", 8)  # T = the longest stream (Allreduce MAX)
        # --delta auto: the rows of the first P rounds measure Δ (protocol.auto_delta)
        self.pilot = Pilot(protocol, self.learner_args, self.k, self.rounds) if protocol.auto else None
        # the mode's rounds, as the runner's (``engine.rounds_of``)
        self.mode_rounds = (SimDelayed if protocol.asynchronous(self.k) else SimLockstep)(self, self.schedule, order)
        self.mode_rounds.start()

    # -- feeding rows -----------------------------------------------------------

    def feed(self, indptr, indices, data, y, owner=None, round_ptr=None):
        """Rows of the next m rounds, round-major (learners in order within a round),
        through the engine loop (``engine.run_rounds``) in the run's mode.

        Default: k rows per round, row i owned by learner i mod k. Shards that
        end early give ``owner`` (each row's learner) and ``round_ptr`` (m + 1
        row offsets of the rounds)."""
        k = self.k
        if round_ptr is None:
            m, rest = divmod(len(y), k)
            if rest:
                raise MpisgdError(f"simulate: fed {len(y)} rows, not whole rounds of {k} learners")
            round_ptr = np.arange(m + 1, dtype=np.int64) * k
        m = len(round_ptr) - 1
        if self.t + m > self.rounds:
            raise MpisgdError(f"simulate: fed rounds beyond the {self.rounds} rounds of the run")
        if owner is None:
            if len(self._owner) < len(y):
                self._owner = np.tile(np.arange(k, dtype=np.int64), m)
            owner = self._owner
        if self.pilot is not None and self.t < self.pilot.end:
            j = min(m, self.pilot.end - self.t)
            lo, hi = round_ptr[0], round_ptr[j]
            self.pilot.add(indptr[lo : hi + 1], data, y[lo:hi], owner[lo:hi])
        self._block = (indptr, indices, data, y, owner, round_ptr, self.t)
        run_rounds(self.mode_rounds, self.t, self.t + m)

    def _rows(self, t, stop):
        """The rows of rounds (t, stop] of the block fed: (indptr from 0, indices,
        data, y, owner, round_ptr: the first row of rounds t + 1 … stop + 1)."""
        indptr, indices, data, y, owner, round_ptr, first = self._block
        ptr = round_ptr[t - first : stop - first + 1]
        lo, hi = ptr[0], ptr[-1]
        a, b = indptr[lo], indptr[hi]
        return indptr[lo : hi + 1] - a, indices[a:b], data[a:b], y[lo:hi], owner[lo:hi], ptr - lo

    def learn(self, t, stop):
        """Learn rounds (t, stop] of the block fed."""
        indptr, indices, data, y, owner, _ptr = self._rows(t, stop)
        if self.central:
            owner = np.zeros(len(y), np.int64)
        start = time.perf_counter()
        self.L.learn(indptr, indices, data, y, owner)
        self._learn_seconds += time.perf_counter() - start
        self._rows_learned += len(y)
        if self.log is not None:
            self.log.compute(-1, stop - t)  # every learner learns its row of each round
        self._learned(t, stop, int(indptr[-1]))

    def learn_until_violation(self, t, stop, checks):
        """Dynamic protocol: learn rounds (t, stop] of the block fed through
        the check points ``checks`` (rounds done, before stop) that find no
        violator, in one kernel call, stopping at the first that finds one;
        the quiet ones count as ``check`` would count them, the check at the
        round it stops at is the caller's. Returns (round reached, quiet checks)."""
        self.checkpoints.settle(self.transport)  # the check begun last found no violator: nothing but its count
        indptr, indices, data, y, owner, round_ptr = self._rows(t, stop)
        made, violated = self.L.learn_until_violation(indptr, indices, data, y, owner, round_ptr[checks - t],
                                                      self.coordinator.threshold(checks))
        reached = int(checks[made - 1]) if violated else stop
        quiet = made - int(violated)  # the violating check is the caller's
        self.transport.quiet_checks(quiet)
        self.coordinator.count_quiet(quiet)
        self._learned(t, reached, int(indptr[round_ptr[reached - t]]))
        return reached, quiet

    def _learned(self, t, stop, entries):
        """Rounds (t, stop] learned, with ``entries`` non-zeros: their errors into their phase."""
        errors = int(self.L.errors.sum())
        phase = self._phase(stop)
        self.phase_errors[phase] += errors - self._errors_at
        self.phase_rounds[phase] += stop - t
        self._errors_at = errors
        self.entries += entries
        self.t = stop

    def _phase(self, t):
        """'drift' if round t (1-based: rounds done) lies within drift_window rounds after a drift."""
        i = np.searchsorted(self.drifts, t - 1, side="left")  # drifts d < t: the target changed after round d
        if i > 0 and t - 1 - self.drifts[i - 1] <= self.drift_window:
            return "drift"
        return "stable"

    # -- the protocol step --------------------------------------------------------

    def end_pilot(self, t):
        """--delta auto, after round P: Δ from every learner's pilot (``Engine.end_pilot``)."""
        if self.pilot is not None and t == self.pilot.end:
            self.engine.end_pilot(self.world, self.pilot.statistics(), self.learner_args, self.n)
            self.pilot = None

    def check(self, t):
        """The check point after round t; returns True when it found no violator (or static)."""
        before = self._stats_snapshot()
        self.transport.last_count, self.transport.at, self.transport.entries = 0, t, self.entries
        self.engine.check(t)  # Δ_t at t = 0 (check-learn) uses t = 1
        self._attribute(before)
        return self.transport.last_count == 0

    def arrive(self, t):
        """The default mode's resolution due after round t takes effect."""
        before = self._stats_snapshot()
        self.checkpoints.arrive(t, self.transport)
        self._attribute(before)

    def settle(self, t):
        """The last check begun, at the end of the run after round t."""
        before = self._stats_snapshot()
        self.engine.settle(t)
        self._attribute(before)

    def _stats_snapshot(self):
        s = self.coordinator.stats
        return dict(s.model_messages), dict(s.full_syncs)

    def _attribute(self, before):
        """Messages of this check, by cause, into the phase of the current round."""
        msgs0, syncs0 = before
        s = self.coordinator.stats
        bucket = self.phase_messages[self._phase(max(self.t, 1))]
        for key in ("violation", "augmentation", "balance"):
            d = s.model_messages[key] - msgs0[key]
            if d:
                bucket[key] = bucket.get(key, 0) + d
        d = s.model_messages["full_sync"] - msgs0["full_sync"]
        if d:
            cause = next(c for c in s.full_syncs if s.full_syncs[c] != syncs0[c])
            bucket["full_sync_" + cause] = bucket.get("full_sync_" + cause, 0) + d
        if s.full_syncs["augmented"] != syncs0["augmented"]:
            bucket["full_sync_augmented_count"] = bucket.get("full_sync_augmented_count", 0) + 1

    def record(self, t):
        """The timeline row after round t (``TIMELINE_COLUMNS``)."""
        sent = self.counters()[0].sum(axis=0)
        self.timeline.append((t, int(self.L.errors.sum()), float(self.L.loss_sum.sum()),
                              self.model_messages(), *(int(v) for v in sent)))
        if self.log is not None:
            self.log.mark(len(self.timeline) - 1)

    # -- results --------------------------------------------------------------------

    def model_messages(self):
        """The paper's count: model vectors sent up or down, by the protocol."""
        return int(sum(self.coordinator.stats.model_messages.values()))

    def final_model(self):
        """Every learner's final model (ASGD: its averaged model) as z = [w, b, 0],
        averaged by one Allreduce (the protocol's "final" full sync), as the MPI
        runner does; central: the one learner's model. Returns (coef, intercept)."""
        L, n = self.L, self.n
        ids = np.arange(L.k)
        z = np.zeros((L.k, n + 2))
        for l in ids:  # w = α·r + s·v (rda: soft-thresholded), as the runner's
            z[l, :n], z[l, n] = L.averaged_weights(l) if self.learner_args.get("average") else L.weights(l)
        if self.central:
            return z[0, :n].copy(), float(z[0, n])
        mean = self.coordinator.final_sync(self.world, z)
        return mean[:n].copy(), float(mean[n])

    def finish(self):
        """Final Allreduce and the result dictionary."""
        if self.t != self.rounds:
            raise MpisgdError(f"simulate: fed {self.t} of {self.rounds} rounds")
        self.mode_rounds.end(self.t)
        coef, intercept = self.final_model()
        sent_b, recv_b, sent_m, recv_m = self.counters()
        cats = wire.CATEGORIES
        L = self.L
        return {
            "k": self.k, "n_features": self.n, "rounds": self.rounds, "order": self.order, "mode": self.mode,
            "async_delay": self.async_delay,
            "max_period": self.max_period,
            "protocol": self.protocol.as_dict(), "learner": self.learner_args,
            "errors": int(L.errors.sum()), "loss": float(L.loss_sum.sum()), "examples": int(L.examples.sum()),
            "model_messages": self.model_messages(),
            "protocol_messages": self.model_messages() - (0 if self.central else 2 * self.coordinator.k),
            "stats": self.coordinator.stats.as_dict(),
            "violation_counter": self.coordinator.counter,
            "delta_auto": self.coordinator.auto,
            "budget": self.coordinator.budget,
            "bytes_sent": {c: int(sent_b[:, i].sum()) for i, c in enumerate(cats)},
            "bytes_received": {c: int(recv_b[:, i].sum()) for i, c in enumerate(cats)},
            "messages_sent": {c: int(sent_m[:, i].sum()) for i, c in enumerate(cats)},
            "messages_received": {c: int(recv_m[:, i].sum()) for i, c in enumerate(cats)},
            "per_rank": {"sent_bytes": sent_b, "recv_bytes": recv_b, "sent_msgs": sent_m, "recv_msgs": recv_m},
            "drifts": self.drifts.tolist(), "drift_window": self.drift_window,
            "phase_messages": self.phase_messages, "phase_errors": self.phase_errors,
            "phase_rounds": self.phase_rounds,
            **({"fda": self.fda_diagnostics()} if self.protocol.monitoring else {}),
            **({"hierarchy": self.hierarchy()} if self.nodes is not None else {}),
            "timeline": self.timeline,
            "coef": coef, "intercept": intercept,
            **({"network": self.predict()} if self.log is not None else {}),
        }

    def counters(self):
        """Per rank (sent_bytes, recv_bytes, sent_msgs, recv_msgs), as ``SimTransport.counters``;
        hierarchical: every rank's start, pilot and final collectives and the leaders' protocol
        on the leaders' ranks (the inter-node traffic; the intra-node traffic is ``hierarchy``)."""
        if self.nodes is None:
            return self.transport.counters()
        out = self.world.counters()
        for mine, leaders in zip(out, self.transport.counters()):
            mine[self.nodes.leaders.ids] += leaders
        return out

    def hierarchy(self):
        """The nodes and their intra-node traffic, by category and per rank (``NodeSim``)."""
        sent_b, recv_b, sent_m, recv_m = self.nodes.counts.counters()
        cats = wire.CATEGORIES
        return {"node_size": self.nodes.m, "nodes": self.nodes.leaders.k,
                "node_period": int(self.protocol.node_period),
                "intra_node": {"bytes_sent": {c: int(sent_b[:, i].sum()) for i, c in enumerate(cats)},
                               "bytes_received": {c: int(recv_b[:, i].sum()) for i, c in enumerate(cats)},
                               "messages_sent": {c: int(sent_m[:, i].sum()) for i, c in enumerate(cats)},
                               "messages_received": {c: int(recv_m[:, i].sum()) for i, c in enumerate(cats)},
                               "per_rank": {"sent_bytes": sent_b, "recv_bytes": recv_b, "sent_msgs": sent_m,
                                            "recv_msgs": recv_m}}}

    @staticmethod
    def _check_hierarchy(protocol, k, mode, order, max_period, network, learner):
        if protocol.node_size == SHARED:
            raise MpisgdError(f"--node-size {SHARED}: the simulator has no machines; give the learners per node")
        protocol.check_nodes(k, protocol.node_size)
        check_hierarchy_learner(learner)
        if order != "learn-check" or max_period or network is not None:
            raise MpisgdError("hierarchical synchronization (--node-size) is simulated with --order learn-check, "
                              "without --max-period and --network")

    def fda_diagnostics(self):
        """fda's estimate δ̂ against the exact δ over every check begun: how often
        each exceeded Θ, the median ratio δ/δ̂, the median share of ‖D̄‖² the
        projections captured, and the checks where δ > δ̂ (the bound says none)."""
        log = self.transport.variance_log
        sums = np.array([a for a, _e in log]).reshape(len(log), -1) if log else np.zeros((0, 1))
        exact = np.array([e for _a, e in log])
        estimate = np.array([self.coordinator.variance_estimate(a) for a in sums])
        mean_s = sums[:, 0] / self.k
        norm = mean_s - exact  # ‖D̄‖²
        some = norm > 1e-12 * np.maximum(mean_s, 1e-300)
        theta = self.protocol.theta
        return {"checks": len(log), "estimate_over_theta": int(np.count_nonzero(estimate > theta)),
                "exact_over_theta": int(np.count_nonzero(exact > theta)),
                "median_exact_over_estimate": float(np.median(exact[estimate > 0] / estimate[estimate > 0]))
                if np.any(estimate > 0) else None,
                "median_captured": float(np.median((mean_s[some] - estimate[some]) / norm[some]))
                if np.any(some) else None,
                "bound_violations": int(np.count_nonzero(exact > estimate + 1e-9 * np.maximum(mean_s, 1e-12)))}

    def predict(self, seconds_per_row=None):
        """The event log replayed on ``network``: predicted wall time, time in
        MPI calls, and the time of every timeline row (``netmodel.replay``).
        Compute per row: as measured here, unless given."""
        from mpisgd import netmodel

        per_row = seconds_per_row or self._learn_seconds / max(1, self._rows_learned)
        log = self.log
        p = netmodel.replay(log.events, self.k, self.network, per_row, log.groups)
        return {"network": self.network.name, "seconds_per_row": per_row, "events": len(log.events),
                "wall": p.wall, "mpi_max": float(p.mpi.max()), "idle_max": float(p.idle.max()),
                "timeline_seconds": p.marks.tolist()}


# ---------------------------------------------------------------- sources of rows


class ShardSource:
    """Rows of k HDF5 shards (one per learner, row t = round t), round-major.
    Rounds = the longest shard; a shorter shard's learner stops learning after
    its last row (its rows are simply absent), as in the MPI runner."""

    def __init__(self, paths):
        from mpisgd.data.shard import open_shard

        if not paths:
            raise MpisgdError("simulate: no shards given")
        self.shards = [open_shard(p) for p in paths]
        dims = {s.n_features for s in self.shards}
        if len(dims) != 1:
            raise MpisgdError(f"simulate: shards disagree on n_features: {sorted(dims)}")
        self.n_features = dims.pop()
        self.n_learners = len(self.shards)
        self.n_rounds = max(s.n_rows for s in self.shards)

    def drifts(self, t_stop):
        d = self.shards[0].attrs.get("drifts")
        if isinstance(d, str) and d:
            import json

            d = json.loads(d)
        return np.asarray([x for x in (d or []) if x < t_stop], np.int64)

    def rows(self, t_start, t_stop):
        """(indptr, indices, data, y, owner, round_ptr): the rows of rounds
        [t_start, t_stop), round-major; round_ptr gives each round's first row."""
        return interleave([(l, s.read(t_start, t_stop)) for l, s in enumerate(self.shards)], t_stop - t_start)

    def close(self):
        for s in self.shards:
            s.close()


def make_stream(kind, n_features, k, seed, drift_prob=None, **extra):
    """A synthetic stream of ``mpisgd.data.synthetic`` by name."""
    from mpisgd.data import synthetic

    if kind not in ("disjunction", "neuralnet", "linear"):
        raise MpisgdError(f"synthetic: unknown stream {kind!r}; choose disjunction, neuralnet or linear")
    cls = synthetic.STREAMS[kind]
    kw = dict(extra)
    if drift_prob is not None:
        kw["drift_prob"] = drift_prob
    return cls(n_features=n_features, n_learners=k, seed=seed, **kw)


def block_rounds(k, n_features, budget=1 << 22):
    """Rounds per generated block: about `budget` stored values."""
    return max(1, budget // max(1, k * n_features))


def run_many(stream, rounds, configs, block=None, progress=None):
    """Run several ``Simulation``s (already built, all with the stream's k and
    rounds) on one stream, generating each block of rounds once."""
    k = stream.n_learners
    block = block or block_rounds(k, stream.n_features)
    for t0 in range(0, rounds, block):
        t1 = min(rounds, t0 + block)
        indptr, indices, data, y = stream.rows(t0, t1)
        for sim in configs:
            sim.feed(indptr, indices, data, y)
        if progress:
            progress(t1)
    return [sim.finish() for sim in configs]


def simulate(source, rounds, protocol, learner=None, order="learn-check", drift_window=500,
             timeline_every=0, block=None, max_period=0, mode=None, network=None, async_delay=0):
    """One configuration over a synthetic stream or a ``ShardSource``."""
    k, n = source.n_learners, source.n_features
    sim = Simulation(k, n, rounds, protocol, learner, order, source.drifts(rounds), drift_window,
                     timeline_every, max_period, mode, network, async_delay)
    if isinstance(source, ShardSource):
        return _run_shards(source, rounds, sim, block or block_rounds(k, n))
    return run_many(source, rounds, [sim], block)[0]


def _run_shards(source, rounds, sim, block):
    """Shards may end early: feed whole rounds, learners without a row skip it."""
    for t0 in range(0, rounds, block):
        t1 = min(rounds, t0 + block)
        indptr, indices, data, y, owner, round_ptr = source.rows(t0, t1)
        sim.feed(indptr, indices, data, y, owner, round_ptr)
    return sim.finish()
