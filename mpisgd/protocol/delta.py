"""Δ, the divergence threshold of the dynamic protocol: the auto rule of
``--delta auto`` (a pilot of the first P rounds measures G, docs/ALGORITHMS.md
§4.4) and ``--budget`` (Δ steered at every full sync toward a share of static
b=8's bytes, §4.6)."""

import math

import numpy as np

from mpisgd.errors import MpisgdError

AUTO = "auto"  # delta = AUTO (the dynamic protocol's default): Δ measured in a pilot (``auto_delta``)
DELTA_SCALE = 3.6  # c of the auto rule Δ = c·η·√(η·G) (measured: docs/ALGORITHMS.md §4.4)
RDA_DELTA_SCALE = 0.006  # c of the rda learners' rule Δ = c·η²·G (measured: docs/ALGORITHMS.md §4.4)
PILOT_ROUNDS = 8  # P: rounds of the pilot (unchecked: kept short, docs/ALGORITHMS.md §4.4)
# the defaults' partial syncs where the rows spread (measured: docs/ALGORITHMS.md §4.4, docs/RESULTS.md)
SPREAD_PARTIAL = 200.0  # the rows' spread from which --delta auto syncs partially (pilots: RCV1 ≥ 500, w8a 69, a9a 9)
PARTIAL_THETA = 0.95  # θ of those partial syncs
PARTIAL_SCALE = 24.0  # F: their Δ is F times the rule's (a learner keeps θΔ local, so its room is (1 − θ)Δ)


def pilot_values(indptr, data, y, learner):
    """G of each row (x, y): ℓ'(0, y)²·(‖x‖² + 1[bias]), the squared norm of the
    first SGD step from w = 0 over η² (docs/ALGORITHMS.md §4.4). ``learner``:
    keyword arguments of ``OnlineLearners``; indptr may start anywhere in data."""
    from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES, dloss

    loss = learner.get("loss", "log")
    param = learner.get("loss_param")
    param = float(DEFAULT_PARAM.get(loss, 0.0) if param is None else param)
    indptr = np.asarray(indptr, np.int64)
    m = len(indptr) - 1
    x = np.asarray(data[indptr[0] : indptr[-1]], np.float64)
    rows = np.repeat(np.arange(m), np.diff(indptr))
    squares = np.bincount(rows, weights=x * x, minlength=m)  # ‖x‖², each row summed in its order
    labels, which = np.unique(np.asarray(y, np.float64), return_inverse=True)
    slope = np.array([dloss(LOSSES[loss], 0.0, float(v), param) for v in labels])[which]  # ℓ'(0, y)
    return slope * slope * (squares + float(learner.get("fit_intercept", True)))


class Pilot:
    """The pilot of --delta auto: the rows of the first P rounds of each of k
    learners, as ``pilot_values`` and their non-zeros; ``statistics`` gives
    each learner's exact sum (math.fsum, so the order rows arrive in does not
    matter), count and non-zeros."""

    def __init__(self, config, learner, k, rounds):
        self.learner = dict(learner)
        self.end = min(int(config.pilot_rounds), int(rounds))  # the round after which Δ is set
        self.parts = [[] for _ in range(int(k))]
        self.entries = [0] * int(k)  # the non-zeros of each learner's rows

    def add(self, indptr, data, y, owner):
        """Rows of rounds < end; owner: each row's learner."""
        if len(y):
            values = pilot_values(indptr, data, y, self.learner)
            owner = np.asarray(owner)
            lengths = np.diff(np.asarray(indptr, np.int64))
            for l in np.unique(owner).tolist():
                self.parts[l].append(values[owner == l])
                self.entries[l] += int(lengths[owner == l].sum())

    def statistics(self):
        """[(Σ G, rows, non-zeros)] per learner."""
        return [(math.fsum(np.concatenate(p).tolist()) if p else 0.0, int(sum(len(a) for a in p)), e)
                for p, e in zip(self.parts, self.entries)]

    def state_dict(self):
        """The rows so far (a checkpoint during the pilot): their values, learner
        after learner, each learner's count of them and their non-zeros."""
        return {"values": np.concatenate([a for p in self.parts for a in p] or [np.zeros(0)]),
                "counts": np.array([sum(len(a) for a in p) for p in self.parts], np.int64),
                "entries": np.array(self.entries, np.int64)}

    def load_state_dict(self, state):
        """The rows ``state_dict`` gave, as if added again (a resumed run, as many learners)."""
        counts = np.asarray(state["counts"], np.int64)
        if len(counts) != len(self.parts):
            raise ValueError(f"Pilot.load_state_dict: the state of {len(counts)} learners, this pilot has "
                             f"{len(self.parts)}")
        values = np.asarray(state["values"], np.float64)
        self.parts = [[part] for part in np.split(values, np.cumsum(counts)[:-1])]
        self.entries = [int(e) for e in np.asarray(state["entries"], np.int64)]


def warm_up_protocol(config, learner):
    """Load the kernels of the protocol's own arithmetic before a run's clock
    starts (numba reads its cache on a function's first call, tens of
    milliseconds): under --delta auto, the pilot's and the rule's."""
    if config.auto:
        auto_delta(config, learner, [(float(pilot_values(np.array([0, 1]), np.ones(1), np.ones(1), learner)[0]), 1, 1)],
                   1)


def spread(statistics, n_features):
    """The rows' spread: n over the mean non-zeros of a pilot row, n·rows /
    non-zeros, from [(Σ, rows, non-zeros)] per learner (docs/ALGORITHMS.md
    §4.4): how many rows it takes to touch every coordinate once. Wide sparse
    rows that rarely share a coordinate (text: ≈ 620 on the RCV1-like stream)
    score high, rows over a few shared features (a9a, w8a, the disjunction:
    9–26) low. None where the pilot saw no non-zero."""
    rows = sum(int(r) for _s, r, _e in statistics)
    entries = sum(int(e) for _s, _r, e in statistics)
    return int(n_features) * rows / entries if entries else None


def partial_default(config, learner, spread_, k):
    """(θ, F) of the defaults' partial syncs among k learners, or None for
    full syncs: partial where the pilot's rows spread (``spread`` ≥
    SPREAD_PARTIAL), where every resolution is a full sync
    (``syncs_every_violation``: k ≤ 2, the half hedge at k ≤ 4), and nothing
    the user chose rules it out — an explicit --partial, --delta-scale or
    --budget, --node-size (which partial syncs do not serve), a rule other
    than SGD's (the measurement's); --delta-decay and a numeric --delta have
    no pilot (docs/ALGORITHMS.md §4.4)."""
    chosen = (config.partial, config.delta_scale, config.budget, config.node_size)
    if any(v is not None for v in chosen) or learner.get("rule", "sgd") != "sgd":
        return None
    if not config.syncs_every_violation(k):
        return None
    if spread_ is None or spread_ < SPREAD_PARTIAL:
        return None
    return PARTIAL_THETA, PARTIAL_SCALE


def auto_delta(config, learner, statistics, n_features):
    """Δ = c·√(η_P · η_P²·G) = c·η_P·√(η_P·G) (docs/ALGORITHMS.md §4.4): the
    geometric mean of the step size η_P (the scale of SGD's own fluctuation)
    and η_P²·G (the squared length of a first step), times c. G is the mean
    over the pilot's rows of every learner of ``pilot_values``, from
    [(Σ, rows, non-zeros)] per learner in learner order, summed with
    math.fsum; η_P the
    step size at round P (passive-aggressive rules: 1). For rda, whose step
    1/(γ√t) decays and whose model has no stationary fluctuation, Δ = c·η_P²·G
    with η_P = 1/(γ√P). c: ``config.delta_scale``, else the rule's own
    (DELTA_SCALE, RDA_DELTA_SCALE). Where the rows spread over n_features
    (``partial_default``, k = the learners in ``statistics``), c is F times the rule's and full syncs become
    partial ones of θ: the record's ``partial`` (θ, else None). Returns (Δ,
    the record for report.json)."""
    from mpisgd.kernels.schedules import SCHEDULES, eta

    sums = [float(s) for s, _n, _e in statistics]
    rows = sum(int(n) for _s, n, _e in statistics)
    G = math.fsum(sums) / rows if rows else 0.0
    P = int(config.pilot_rounds)
    rule = learner.get("rule", "sgd")
    c = config.delta_scale if config.delta_scale is not None else RDA_DELTA_SCALE if rule == "rda" else DELTA_SCALE
    s = spread(statistics, n_features)
    theta, F = partial_default(config, learner, s, len(statistics)) or (None, 1.0)
    c *= F
    if rule == "rda":
        step = 1.0 / (float(learner.get("gamma", 1.0)) * math.sqrt(P))  # the step of u at round P
        delta = c * step * step * G  # c·η²G: a squared first step
        name, formula = "delta = c * eta_P^2 * G (rda)", f"c·η²·G = {c:g}·{step:.4g}²·{G:.6g}"
    else:
        step = 1.0  # passive-aggressive rules
        if rule == "sgd":
            step = float(eta(SCHEDULES[learner.get("schedule", "constant")], float(P), float(learner.get("eta0", 1.0)),
                             float(learner.get("lam", 0.0)), float(learner.get("t0", 0.0)),
                             float(learner.get("power", 0.5))))
        delta = c * step * math.sqrt(step * G)  # c·√(η · η²G): both scale like Δ
        name, formula = "delta = c * eta_P * sqrt(eta_P * G)", f"c·η·√(η·G) = {c:g}·{step:.4g}·√({step:.4g}·{G:.6g})"
    if not (math.isfinite(delta) and delta > 0):
        raise MpisgdError(f"protocol: --delta auto measured G = {G!r} over the first {P} rounds ({rows} rows): "
                          "the loss has no slope at w = 0 there; give a numeric --delta")
    record = {"rule": f"{name}, G = mean over the pilot's rows of dloss(0, y)^2 * (|x|^2 + fit_intercept)",
              "formula": formula, "c": c, "pilot_rounds": P, "eta_P": step, "G": G, "pilot_rows": rows,
              "spread": s, "spread_partial": SPREAD_PARTIAL, "partial": theta, "partial_scale": F, "delta": delta}
    return delta, record


def steered(F, delta, k, horizon, spent, rounds, entries, n_features, last=None):
    """--budget F, at a full sync, from the inputs every rank agrees on (one
    Allreduce, wire.BUDGET_BYTES per rank): ``spent`` the bytes every rank has
    sent so far, ``rounds`` the sum of the rounds every learner has done,
    ``entries`` the non-zeros of the rows they learned. Static b=8 sends, per
    learner every 8 rounds, one full sync's bytes (wire.sync_nbytes) with m₈ =
    min(n, ⌈8·entries / rounds⌉) non-zeros in z, those of 8 rows of the mean
    length seen so far: S(x) over x learner-rounds. Of F times that over the
    run (``horizon`` = k·T learner-rounds) the budget plans F·S(horizon −
    rounds) for the rest, and F·S(horizon) − spent is left: Δ ←
    Δ·clip(√(planned / left), ½, 2), more Δ when ahead of the budget, less
    when behind (docs/ALGORITHMS.md §4.6). ``last``: the previous step's
    record. Returns (Δ, the record for report.json)."""
    from mpisgd import wire

    n = int(n_features)
    m8 = min(n, math.ceil(8.0 * entries / rounds)) if rounds > 0 else n  # non-zeros of 8 rows
    s8 = wire.sync_nbytes(n, k, m8)  # what one learner sends in static's full sync every 8 rounds
    per_round = F / 8.0 * s8  # F·S per learner-round
    planned = per_round * (horizon - rounds)  # what the budget leaves for the rest of the run
    left = per_round * horizon - float(spent)  # what is actually left of it
    ratio = planned / left if left > 0 else math.inf  # > 1: spent ahead of the budget
    if delta is not None:
        delta *= min(2.0, max(0.5, math.sqrt(ratio)))  # γ = ½: measured, docs/ALGORITHMS.md §4.6
    steps = 1 + (last or {}).get("steps", 0)
    record = {"rule": "delta <- delta * clip(sqrt(planned / left), 1/2, 2) at each full sync, planned = F * "
                      "(k*T - rounds) / 8 * S8, left = F * k*T / 8 * S8 - spent, S8 = sync_nbytes(n, k, m8), "
                      "m8 = min(n, ceil(8 * entries / rounds))",
              "F": F, "steps": steps, "spent": int(spent), "rounds": float(rounds),
              "entries": float(entries), "m8": int(m8), "S8": int(s8),
              "horizon": horizon, "ratio": ratio if math.isfinite(ratio) else None, "delta": delta}
    return delta, record
