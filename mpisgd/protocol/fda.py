"""The fda protocol (variance monitoring, docs/ALGORITHMS.md §8): every b
rounds each learner contributes its summary [‖w_l − r‖², ⟨w_l − r, ξ_q⟩ …]
to one small sum, and a full sync follows when the estimated variance δ̂
exceeds Θ. No coordinator."""

from mpisgd.protocol.base import Protocol, sync_mode


class Fda(Protocol):
    """A full sync when the estimated variance of the models exceeds Θ."""

    name = "fda"
    parameters = ("period", "theta", "fda_directions", "fda_estimate", "fda_lag")
    required = ("theta",)
    defaults = {"fda_directions": 1, "fda_estimate": "linear", "fda_lag": 1}
    silent = False
    checks = True
    monitoring = True

    @classmethod
    def label(cls, report):
        p = report["configuration"]["protocol"]
        return f"fda Θ={p.get('theta')} b={p.get('period')}" + sync_mode(report)

    @staticmethod
    def check(points, t, transport):
        """fda_lag 1: settle the check begun at the previous check point and,
        unless that was a full sync (every w_l = r then), begin this one;
        fda_lag 0: begin and settle it at once (a blocking Allreduce)."""
        lagged = points.coordinator.config.fda_lag == 1
        members = points.settle(transport) if lagged else None
        if members is None:
            points.pending = (t, transport.begin_variance(), None)
        if not lagged:
            members = points.settle(transport)
        return members

    @staticmethod
    def agree(transport, handle):
        return transport.end_variance(handle)  # (sums, exact δ or None)

    @staticmethod
    def settle(points, agreed, transport):
        """Every rank: δ̂ of the agreed sums (or the simulator's exact δ, with
        fda_estimate exact), and the full sync if it exceeds Θ."""
        _t, sums, exact = agreed
        c = points.coordinator
        estimate = exact if c.config.fda_estimate == "exact" else c.variance_estimate(sums)
        if not c.variance_check(estimate):
            return None
        c.full_sync(transport, "variance")
        return list(range(c.k))
