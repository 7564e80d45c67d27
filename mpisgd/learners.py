"""k online learners sharing a reference model: the state one MPI rank
(k = 1) or the simulator (k learners in one process) trains, checks and
synchronizes. The arithmetic is in ``mpisgd.kernels.online``; this class
validates, allocates, and moves models in and out in the coordinates of
``mpisgd.wire``: z = [u_0 … u_{n−1}, b, α] with w = α·r + u."""

import numpy as np

from mpisgd import wire
from mpisgd.errors import MpisgdError
from mpisgd.kernels import online, sync
from mpisgd.kernels.losses import CLASSIFICATION_LOSSES, DEFAULT_PARAM, LOSSES
from mpisgd.kernels.schedules import NEEDS_POSITIVE_LAMBDA, SCHEDULES

_NO_CHECKS = (np.empty(0, dtype=np.int64), np.empty(0))  # learn: rows without a check (check_end, threshold)

_STATE = ("alpha", "s", "V", "bias", "P", "Q", "steps", "A", "U", "alpha_sum", "s_sum", "bias_sum", "n_avg",
          "r", "r_bias", "R", "loss_sum", "errors", "examples", "encoded")  # fmt: skip


class OnlineLearners:
    def __init__(
        self,
        k,
        n_features,
        *,
        loss="log",
        loss_param=None,
        schedule="constant",
        eta0=1.0,
        lam=0.0,
        t0=0.0,
        power=0.5,
        fit_intercept=True,
        regularize_bias=False,
        average=False,
        ties_are_errors=True,
        rule="sgd",
        aggressiveness=1.0,
        gamma=1.0,
        l1=0.0,
        directions=0,
        compress="none",
    ):
        if loss not in LOSSES:
            raise MpisgdError(f"loss: unknown {loss!r}; choose one of {', '.join(LOSSES)}")
        if schedule not in SCHEDULES:
            raise MpisgdError(f"schedule: unknown {schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if not lam >= 0:
            raise MpisgdError(f"lam: the L2 strength must be >= 0, got {lam!r}")
        if schedule in NEEDS_POSITIVE_LAMBDA and not lam > 0:
            raise MpisgdError(f"lam: schedule {schedule!r} divides by λ and needs lam > 0, got {lam!r}")
        if rule not in online.RULES:
            raise MpisgdError(f"rule: unknown {rule!r}; choose one of {', '.join(online.RULES)}")
        if rule == "rda":
            # Xiao's dual averaging (mpisgd.kernels.online): its own step 1/(γ√t) and L1 term; any convex loss
            if not (0 < gamma < float("inf")):
                raise MpisgdError(f"gamma: γ of rule 'rda' (β_t = γ√t) must be > 0 and finite, got {gamma!r}")
            if not (0 <= l1 < float("inf")):
                raise MpisgdError(f"l1: λ of rule 'rda' (the L1 strength) must be >= 0 and finite, got {l1!r}")
            for name, value, default in (("lam", lam, 0), ("average", average, False),
                                         ("regularize_bias", regularize_bias, False)):
                if value != default:
                    raise MpisgdError(f"{name}: rule 'rda' has no L2 shrink, averaging or bias penalty "
                                      f"(its regularizer is l1); use {name} {default}, got {value!r}")
        elif l1 != 0:
            raise MpisgdError(f"l1: only rule 'rda' has an L1 term, got l1 {l1!r} with rule {rule!r}")
        elif rule != "sgd":
            # the passive-aggressive rules (mpisgd.kernels.online) are defined by the hinge loss
            if loss != "hinge":
                raise MpisgdError(f"rule: {rule!r} is the hinge loss's update; use loss 'hinge', got {loss!r}")
            if lam != 0:
                raise MpisgdError(f"rule: {rule!r} has no L2 shrink; use lam 0, got {lam!r}")
            if rule != "pa" and not (0 < aggressiveness < float("inf")):
                raise MpisgdError(f"aggressiveness: C of {rule!r} must be > 0 and finite, got {aggressiveness!r}")
        self.compress = wire.check_compress(compress)
        if not eta0 > 0:
            raise MpisgdError(f"eta0: the step size must be > 0, got {eta0!r}")
        if int(directions) != directions or directions < 0:
            raise MpisgdError(f"directions: the number of projection directions must be an integer >= 0, "
                              f"got {directions!r}")
        if int(k) < 1 or int(n_features) < 1:
            raise MpisgdError(f"need at least one learner and one feature, got k={k}, n_features={n_features}")
        self.k, self.n_features, self.dim = int(k), int(n_features), int(n_features) + 2
        self.loss = loss
        self.classification = loss in CLASSIFICATION_LOSSES
        self.params = (  # the options as learn_rows takes them: online.CODES, online.VALUES
            np.array([LOSSES[loss], SCHEDULES[schedule], online.RULES[rule], fit_intercept, regularize_bias, average,
                      self.classification, ties_are_errors], dtype=np.int64),
            np.array([DEFAULT_PARAM.get(loss, 0.0) if loss_param is None else loss_param, eta0, lam, t0, power,
                      aggressiveness, gamma, l1], dtype=np.float64),
        )
        self.average = bool(average)
        self.theta_rate = float(l1) / float(gamma) if rule == "rda" else 0.0  # θ_t = (λ/γ)·√t (``weights``)
        self.options = {"loss": loss, "loss_param": loss_param, "schedule": schedule, "eta0": eta0, "lam": lam,
                        "t0": t0, "power": power, "fit_intercept": fit_intercept,
                        "regularize_bias": regularize_bias, "average": average, "ties_are_errors": ties_are_errors,
                        "rule": rule, "aggressiveness": aggressiveness, "gamma": gamma, "l1": l1,
                        "compress": compress}
        k, n = self.k, self.n_features
        navg = n if average else 0  # the averaging arrays exist only when used
        # every learner's scalars: views of the rows of two arrays, which learn_rows takes whole
        self._floats = np.zeros((len(online.FLOATS), k))
        self._counts = np.zeros((len(online.COUNTS), k), dtype=np.int64)
        for names, packed in ((online.FLOATS, self._floats), (online.COUNTS, self._counts)):
            for name, row in zip(names, packed):
                setattr(self, name, row)  # alpha, s, bias, P, Q, alpha_sum, s_sum, bias_sum, loss_sum; steps, …
        self.alpha[:] = 1.0
        self.s[:] = 1.0
        self.V = np.zeros((k, n))
        # the coordinates each v was touched on since its restart (online: "Touched coordinates"), and the
        # bits their gather dedupes them in; a list longer than n/4 is dropped, scanning v costing no more
        self.T = np.empty((k, n // 4), dtype=np.int32)
        self._bits = np.zeros((n + 63) // 64, dtype=np.uint64)
        self._partial = None  # a partial sync's d's non-zeros and S_l's positions (``partial_support``)
        self.A = np.zeros((k, navg))
        self.U = np.zeros((k, navg))
        self.r = np.zeros(n)
        self.r_bias = 0.0
        # R = ‖r‖² enters a check only as (α − 1)²·R: α leaves 1 by a step's decay (λ > 0, or rda's
        # √((t − 1)/t)) or a model taken with α ≠ 1; until then R is not computed and stays 0
        self._alpha_decays = bool(lam > 0 or rule == "rda")
        self.R = 0.0
        self._dist = np.empty(k)
        # variance monitoring (docs/ALGORITHMS.md §8): J orthonormal directions ξ_q = [ξ_q,w, ξ_q,b]
        # (rows of Xi; a zero row until J reference changes have happened), PX = ξ_w·v, RX = ξ_w·r
        self.Xi = np.zeros((int(directions), n + 1))
        self.PX = np.zeros((k, int(directions)))
        self.RX = np.zeros(int(directions))
        self.encoded = np.zeros(k, dtype=np.int64)  # compressed messages and full syncs of each learner so far
        self.first_id = 0  # learner 0's id in the run (an MPI rank's learner is learner `rank`): keys its draws

    def warm_up(self):
        """Load every kernel a rank calls (numba compiles or reads its cache on
        a function's first call, tens of milliseconds each) on a scratch copy,
        so that the first check point costs no more than the others."""
        scratch = OnlineLearners(1, 1, **self.options)
        indptr, indices, owner = np.array([0, 1]), np.zeros(1, np.int32), np.zeros(1, np.int64)
        data, y = np.ones(1), np.ones(1)
        scratch.learn(indptr, indices, data, y, owner)
        for rows in (indices, data, y):  # rows read from a shard are read-only views: another specialization
            rows.setflags(write=False)
        scratch.learn(indptr, indices, data, y, owner)
        z = scratch.models([0])[0]
        scratch.distances()
        scratch.divergence(z)
        scratch.summaries()
        scratch.decode(scratch.message(0))
        scratch.take(0, z, scratch.progress(0, z))
        scratch.set_reference(scratch.mean_model())
        scratch.set_reference_sum(scratch.sync_parts([0])[0][0], 1)
        vals, idx = np.empty(1), np.empty(1, np.int32)  # a full sync's pairs exchange
        _nnz, c, bias, alpha = scratch.sync_pairs(0, vals, idx)
        sync.model_of_pairs(vals[:c], idx[:c], bias, alpha, np.empty(3))  # the z an async full sync remembers
        for m in (1, 2):  # two blocks, the second unaligned (m odd) or not
            block = wire.fill_block(np.empty(wire.sync_block_nbytes(m), np.uint8), alpha, bias, vals[:c], idx[:c], m)
            total = np.zeros(3)
            counts = np.empty(2, np.int64)
            index = wire.add_blocks(np.concatenate([block, block]), 1, m, total, counts)
            scratch.set_reference_pairs(total, 2, index, counts, idx[:c])
        scratch.partial_support(0, 0.0, np.empty(1, np.int32))  # --partial
        support = wire.union_of_blocks(wire.fill_index_block(np.empty(2, np.int32), np.zeros(1, np.int32), 1), 1, 1)
        scratch.deviation_on(0, support, np.empty(2))
        scratch.set_partial_sum(support, np.zeros(2), 1)

    # -- learning -----------------------------------------------------------

    def learn(self, indptr, indices, data, y, owner):
        """Rows in order: predict with learner owner[i], charge, then learn."""
        y, owner = np.asarray(y, dtype=np.float64), np.asarray(owner, dtype=np.int64)
        status, row, _, _ = online.learn_rows(*self._rows(indptr, indices, data, y, owner), *_NO_CHECKS,
                                              *self._state())
        self._raise_on(status, row, y, owner)

    def learn_until_violation(self, indptr, indices, data, y, owner, check_end, threshold):
        """``learn``, with a check after the first check_end[i] rows (ascending):
        every learner's ‖w_l − r‖² ≤ threshold[i] (one per check, or one for
        all; +inf: no check). Stops right after the first check that finds a
        violator. Returns (checks made, violated): the rows learned are
        check_end[checks − 1] if violated, else all of them."""
        y, owner = np.asarray(y, dtype=np.float64), np.asarray(owner, dtype=np.int64)
        check_end = np.ascontiguousarray(check_end, dtype=np.int64)
        status, row, checks, violated = online.learn_rows(
            *self._rows(indptr, indices, data, y, owner), check_end, np.full(check_end.shape, threshold, np.float64),
            *self._state(),
        )  # fmt: skip
        if status != online.OK:
            self._raise_on(status, row, y, owner)
        return int(checks), bool(violated)

    @staticmethod
    def _rows(indptr, indices, data, y, owner):
        return (np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int32),
                np.asarray(data, dtype=np.float64), y, owner)

    def _state(self):
        """The kernel arguments after the rows: the learners' state and options."""
        return (self._floats, self._counts, self.V, self.T, self.A, self.U, self.r, self.Xi, self.PX, self.R,
                self.r_bias, *self.params)

    def _raise_on(self, status, row, y, owner):
        if status == online.BAD_LABEL:
            raise MpisgdError(f"labels: loss {self.loss!r} needs labels -1/+1, row {row} has {y[row]!r}")
        if status == online.BAD_FEATURE:
            raise MpisgdError(f"features: non-finite value (NaN or inf) in row {row}")
        if status == online.BAD_INDEX:
            raise MpisgdError(f"features: row {row} has a feature index outside [0, {self.n_features}) "
                              "or row bounds outside its indices")
        if status == online.BAD_OWNER:
            raise MpisgdError(f"owner: learner ids must lie in [0, {self.k}), row {row} has {owner[row]}")
        if status == online.DIVERGED:
            raise MpisgdError(
                f"training diverged at row {row} (learner {owner[row]}, step {self.steps[owner[row]]}): "
                "the prediction or the update is not finite; lower eta0"
            )

    # -- the local condition --------------------------------------------------

    def distances(self):
        """‖w_l − r‖² of every learner, O(1) each."""
        online.distances(self.alpha, self.s, self.P, self.Q, self.bias, self.R, self.r_bias, self._dist)
        return self._dist.copy()

    def summaries(self):
        """(k, J + 1): every learner's [‖w_l − r‖², ⟨w_l − r, ξ_1⟩, …, ⟨w_l − r, ξ_J⟩], O(J) each."""
        out = np.empty((self.k, 1 + len(self.Xi)))
        online.summaries(self.alpha, self.s, self.P, self.Q, self.bias, self.R, self.r_bias, self.PX, self.RX,
                         self.Xi, out)  # fmt: skip
        return out

    def divergence(self, z):
        """‖w(z) − r‖² for a model z = [u, b, α]: ‖(α − 1)·r + u‖² + (b − r_b)²."""
        return float(online.divergence(np.ascontiguousarray(z, dtype=np.float64), self.r, self.r_bias))

    # -- models in and out ----------------------------------------------------

    def models(self, ids):
        """z of learners ids, shape (len(ids), dim)."""
        return self.models_and_nnz(ids)[0]

    def models_and_nnz(self, ids):
        """z of learners ids, and the non-zeros of each one's v (which decide
        the size of its wire message, ``message``)."""
        ids = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        z = np.empty((len(ids), self.dim))
        nnz = np.empty(len(ids), dtype=np.int64)
        online.gather_models(ids, self.alpha, self.s, self.V, self.bias, z, nnz)  # u = s·v
        return z, nnz

    def mean_model(self):
        """The mean of every learner's z, as ``models(range(k)).mean(axis=0)`` in one pass."""
        z = np.empty(self.dim)
        online.mean_model(self.alpha, self.s, self.V, self.bias, z)
        return z

    def message(self, l):
        """The wire message of learner l's model (sparse when smaller;
        compressed with ``compress``)."""
        return self._encode(l, self.alpha[l], self.bias[l], self.V[l], self.s[l])

    def encode(self, l, z):
        """The wire message of model z = [u, b, α], sent by learner l."""
        z = np.ascontiguousarray(z, dtype=np.float64)
        return self._encode(l, z[self.n_features + 1], z[self.n_features], z[: self.n_features], 1.0)

    def _encode(self, l, alpha, bias, u, scale):
        """The message of w = α·r + scale·u, bias b."""
        if self.compress == "none":
            return wire.encode(alpha, bias, u, scale, self.n_features)
        idx, vals = online.support(u, scale)
        return wire.encode_compressed(alpha, bias, idx, vals, self.n_features, self.compress,
                                      self._draws(l, len(idx)))

    def _draws(self, l, count):
        """Learner l's next ``count`` uniform draws for a compressed message
        (``wire.uniforms``: the same for a rank and the simulator); None
        uncompressed."""
        if self.compress == "none":
            return None
        uniform = wire.uniforms([self.first_id + l], [self.encoded[l]], count)[0]
        self.encoded[l] += 1
        return uniform

    def decode(self, buf):
        if self.compress == "none":
            return wire.decode(buf, self.n_features)
        return wire.decode_compressed(buf, self.n_features, self.compress)

    def partial_message(self, l, budget, asked=None, local=False):
        """Learner l's partial model (docs/ALGORITHMS.md §4.7) for θΔ = budget:
        S_l = the coordinates ``asked`` for (a balance request's S_B, increasing)
        and, among the others, the fewest of largest |d_lj| that leave
        ρ_l = Σ_{j∉S_l} d_lj² ≤ budget. Returns (its message, ``wire.Part`` as
        its receiver decodes it); ``local``: rank 0's own, not sent: no message
        (None), nothing quantized, no draws."""
        n = self.n_features
        d, idx = np.empty(n), np.empty(n, dtype=np.int32)
        sync.deviation(self.alpha[l], self.s[l], self.V[l], self.r, d)
        support = np.zeros(n, dtype=np.bool_)
        if asked is not None and len(asked):
            support[asked] = True
            c = sync.select_support(np.where(support, 0.0, d), budget, idx)  # S_l beyond S_B
        else:
            c = sync.select_support(d, budget, idx)
        support[idx[:c]] = True
        chosen = np.flatnonzero(support)
        rest = np.where(support, 0.0, d)
        rho = float(rest @ rest)
        z = np.zeros(n + 2)
        z[chosen] = d[chosen]
        z[n], z[n + 1] = self.bias[l], 1.0
        if local:
            return None, wire.Part(z, rho, support)
        buf = wire.encode_partial(self.bias[l], chosen, d[chosen], rho, n, self.compress, self._draws(l, len(chosen)))
        return buf, (wire.Part(z, rho, support) if self.compress == "none" else self.decode_partial(buf))

    def decode_partial(self, buf):
        return wire.decode_partial(buf, self.n_features, self.compress)

    def result_message(self, l, part):
        """The wire message, sent by learner l, of a member's balance result
        ``part`` (``wire.Part``): its values on S_l and b̄ (``wire.encode_result``)."""
        idx = np.flatnonzero(part.support)
        return wire.encode_result(part.z[self.n_features], part.z[idx], self.compress, self._draws(l, len(idx)))

    def decode_result(self, buf, support):
        """A balance result for the member whose S_l is ``support`` -> z on S_l (``wire.decode_result``)."""
        return wire.decode_result(buf, support, self.n_features, self.compress)

    def take_part(self, l, z, sent):
        """Learner l, which sent the partial model ``sent`` (``wire.Part``, as
        decoded), takes the balanced model z = [u, b, 1] on its S_l and the bias:
        w_S ← w_S + (z − sent)_S, b ← b + (z_b − sent_b), which keeps its steps
        since it sent and its own rounding error."""
        n = self.n_features
        now = self.models([l])[0]
        support = np.flatnonzero(sent.support)
        now[support] += z[support] - sent.z[support]  # u moves w one for one, whatever α
        now[n] += z[n] - sent.z[n]
        self.set_models([l], now)

    def message_nbytes(self, nnz):
        """Wire sizes of the messages of models whose v has nnz non-zeros."""
        return wire.model_nbytes(nnz, self.n_features, self.compress)

    # -- full syncs (docs/WIRE.md) ---------------------------------------------

    def sync_parts(self, ids):
        """The full-sync contributions of learners ids, in one pass: z (len(ids),
        dim), the non-zeros of each v, and scales [max|u|, |b − r_b|, |α − 1|]."""
        ids = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        z = np.empty((len(ids), self.dim))
        nnz = np.empty(len(ids), dtype=np.int64)
        scales = np.empty((len(ids), 3))
        sync.contributions(ids, self.alpha, self.s, self.V, self.bias, self.r_bias, z, nnz, scales)
        return z, nnz, scales

    def sync_pairs(self, l, vals, idx):
        """Learner l's full-sync contribution as pairs, in one pass: the
        non-zeros of its u into vals and idx (length ≥ n each), and
        (the non-zeros of its v, the pairs written, b, α)."""
        nnz, c = sync.gather(l, self.s, self.V, self.T, self.listed, self._bits, vals, idx)
        return nnz, c, self.bias[l], self.alpha[l]

    def sync_levels(self, ids, z, c, k):
        """Integer levels of learners ids' contributions z with shared scales c
        in a sum over k learners (``wire.sync_levels_of``), each from its
        learner's next draws."""
        ids = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        x = np.array(z, dtype=np.float64)
        n = self.n_features
        x[:, n] -= self.r_bias  # b − r_b
        x[:, n + 1] -= 1.0  # α − 1
        uniform = wire.uniforms(self.first_id + ids, self.encoded[ids], self.dim)
        self.encoded[ids] += 1
        return wire.sync_levels_of(x, c, k, uniform, self.compress)

    def partial_support(self, l, budget, idx):
        """Learner l's part of a partial sync (docs/ALGORITHMS.md §4.7): S_l,
        the fewest coordinates of largest |d_j| of d = w_l − r that leave the
        rest's Σ d_j² ≤ budget (= θΔ), into idx (int32, length ≥ n; increasing);
        returns |S_l|. The selection's passes visit d's non-zeros only
        (``sync.partial_support``)."""
        if self._partial is None:
            self._partial = np.empty(self.n_features), np.empty(self.n_features, dtype=np.int64)
        vals, pos = self._partial  # d's non-zeros, the positions of S_l among them
        return sync.partial_support(l, self.alpha, self.s, self.V, self.T, self.listed, self.r, self._bits, budget,
                                    vals, idx, pos)

    def deviation_on(self, l, support, out, z=None):
        """out[i] = learner l's d_j = (w_l − r)_j at j = support[i]; with z,
        that of its model z = [u, b, α] (w = α·r + u: as it sent it)."""
        if z is None:
            sync.deviation_at(self.alpha[l], self.s[l], self.V[l], self.r, support, out)
        else:  # u_j = s·v_j as ``models`` made it: the same d_j
            sync.deviation_at(z[self.n_features + 1], 1.0, z[: self.n_features], self.r, support, out)

    def set_partial_sum(self, support, total, k):
        """Partial averaging of every learner here (a rank's one, or the
        simulator's k): total = [Σ_l (w_l − r)_S, Σ_l b_l] over the k learners
        of the run, for S = ``support`` (int64, increasing). On S every w_l and
        r take the mean (r_S ← r_S + mean d_S); off S every w_l and r stay;
        every b_l and r_b take the mean bias."""
        self._flush_averages()
        before = (self.r.copy() if len(self.Xi) else None), self.r_bias
        self.r_bias = float(total[-1] / k)
        online.partial_restart(support, total, float(k), self.r_bias, self.alpha, self.s, self.V, self.T, self.listed,
                               self.bias, self.P, self.Q, self.r)
        self._reference_moved(*before)
        for l in range(self.k) if len(self.Xi) else ():  # PX along the directions as they are now
            online.exact_px(l, self.V, self.Xi, self.PX)

    def set_reference_sum(self, total, k):
        """``set_reference(total / k)`` with the mean fused into the one pass over r."""
        n = self.n_features
        self._flush_averages()
        before = (self.r.copy() if len(self.Xi) else None), self.r_bias
        sync.reference_from_sum(np.asarray(total, dtype=np.float64), float(k), self.r)
        self.r_bias = float(total[n] / k)
        self._new_reference(*before)

    def set_reference_pairs(self, total, k, index, counts, own=None):
        """``set_reference_sum`` of a pairs exchange's sum (``wire.add_blocks``:
        total is 0 off index, and is cleared there for the next sum), in work
        proportional to the non-zeros where the maths allows: with ᾱ = 1 only r
        on the indices changes; with ``own`` (every v here is 0 off it) only v
        there is reset. R = ‖r‖² (where kept) and fda's directions stay dense."""
        n = self.n_features
        self._flush_averages()
        before = (self.r.copy() if len(self.Xi) else None), self.r_bias
        self.r_bias = float(total[n] / k)  # read before the kernel clears total
        sync.reference_from_pairs(total, float(k), self.r, index, counts)
        self._new_reference(*before, own)

    def set_models(self, ids, z):
        """Learners ids take the model z (relative to the current r)."""
        ids = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        online.set_models(ids, np.asarray(z, dtype=np.float64),
                          self.alpha, self.s, self.V, self.T, self.listed, self.bias, self.P, self.Q,
                          self.A, self.U, self.alpha_sum, self.s_sum, self.r, self.average,
                          self.Xi, self.PX)  # fmt: skip
        if not self._alpha_decays and np.any(self.alpha[ids] != 1.0):
            self.R = float(self.r @ self.r)

    def progress(self, l, z_sent):
        """(Δw, Δb): learner l's steps since its model was ``z_sent`` (same
        reference r). With w = α·r + u: Δw = Δα·r + Δu (dense, O(n))."""
        n = self.n_features
        d = self.models([l])[0] - z_sent
        return d[n + 1] * self.r + d[:n], float(d[n])

    def take(self, l, z, progress=None):
        """Learner l takes model z; with ``progress`` (``progress()`` taken
        before) it keeps the steps it made since it sent its model: w ← w(z) + Δw."""
        if progress is not None:
            dw, db = progress
            z = np.array(z, dtype=np.float64)
            z[: self.n_features] += dw  # u ← u + Δw (α of z unchanged)
            z[self.n_features] += db
        self.set_models([l], z)

    def set_reference(self, z):
        """Every learner takes the model z, which becomes the new reference:
        r ← α·r + u, the sum of one model."""
        self.set_reference_sum(z, 1)

    def _flush_averages(self):
        if self.average:
            for l in range(self.k):
                online.flush_average(l, self.alpha_sum, self.s_sum, self.V, self.U, self.A, self.r)

    def _new_reference(self, r_before, bias_before, own=None):
        """After r changed (from r_before, bias_before): ``_reference_moved``, and
        every learner at r (with ``own``, every v is 0 off it: reset there only)."""
        self._reference_moved(r_before, bias_before)
        if own is None:
            online.restart(self.r_bias, self.alpha, self.s, self.V, self.listed, self.bias, self.P, self.Q, self.PX)
        else:
            online.restart_at(own, self.r_bias, self.alpha, self.s, self.V, self.listed, self.bias, self.P, self.Q,
                              self.PX)

    def _reference_moved(self, r_before, bias_before):
        """After r changed (from r_before, bias_before; every α is 1 again): R = ‖r‖²,
        fda's directions (the change r' − r becomes ξ_1) and RX = ξ_w·r."""
        n = self.n_features
        if len(self.Xi):
            self._push_direction(np.append(self.r - r_before, self.r_bias - bias_before))  # [r' − r, b' − r_b]
            self.RX = self.Xi[:, :n] @ self.r  # ξ_w·r
        self.R = float(self.r @ self.r) if self._alpha_decays else 0.0

    def _push_direction(self, change):
        """The newest reference change becomes ξ_1; the older directions follow,
        orthonormalised against it (Gram–Schmidt), the oldest dropped beyond J."""
        basis = []
        for c in [change, *self.Xi]:
            e = c - sum((c @ q) * q for q in basis) if basis else c.copy()
            norm = float(np.linalg.norm(e))
            if norm > 1e-9 * max(1.0, float(np.linalg.norm(c))):  # a zero or dependent vector adds nothing
                basis.append(e / norm)
        self.Xi[:] = 0.0
        for q, e in enumerate(basis[: len(self.Xi)]):
            self.Xi[q] = e

    @property
    def reference(self):
        return self.r.copy(), self.r_bias

    def weights(self, l):
        """Dense (coef, intercept) of learner l's current model (rda with λ > 0: soft(u, λ√t/γ))."""
        u = self.alpha[l] * self.r + self.s[l] * self.V[l]
        if self.theta_rate > 0:
            u = np.sign(u) * np.maximum(np.abs(u) - self.theta_rate * np.sqrt(self.steps[l]), 0.0)
        return u, float(self.bias[l])

    def averaged_weights(self, l):
        """Dense (coef, intercept) of the average of learner l's models after each of its steps."""
        if not self.average:
            raise MpisgdError("averaged_weights: these learners were made with average=False")
        if self.n_avg[l] == 0:
            return self.weights(l)
        total = self.A[l] + self.alpha_sum[l] * self.r + self.s_sum[l] * self.V[l] - self.U[l]
        return total / self.n_avg[l], float(self.bias_sum[l] / self.n_avg[l])

    def weights_z(self, coef, intercept):
        """The z coordinates of a dense model (relative to the current r)."""
        z = np.empty(self.dim)
        z[: self.n_features] = coef - self.r
        z[self.n_features] = intercept
        z[self.n_features + 1] = 1.0
        return z

    # -- checkpoints ----------------------------------------------------------

    def state_dict(self):
        return {name: np.array(getattr(self, name)) for name in _STATE}

    def load_state_dict(self, state):
        for name in _STATE:
            value = state[name]
            current = getattr(self, name)
            if isinstance(current, np.ndarray):
                if np.shape(value) != current.shape:
                    raise MpisgdError(f"state: {name} has shape {np.shape(value)}, expected {current.shape}")
                current[...] = value
            else:
                setattr(self, name, float(value))
        for l in range(self.k):  # not saved: rebuilt from v
            online.touched_from(l, self.V, self.T, self.listed)
