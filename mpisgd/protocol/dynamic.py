"""The dynamic protocol (Kamp et al. 2014): at every b-th round each learner
checks its local condition ‖w_l − r‖² ≤ Δ_t, and only the violations are
resolved (``Coordinator.resolution``). In sync mode the check of round t is
begun at t and settled at the next check point; in the default mode
(``mpisgd.protocol.asynchronous``) violations are resolved as they arrive."""

from mpisgd.protocol.base import Protocol, sync_mode
from mpisgd.protocol.coordinator import drive
from mpisgd.protocol.delta import AUTO

HALF_HEDGE_LEARNERS = 4  # the most learners at which doubling a lone violator reaches half of them (4·1 ≥ k)


def auto_hedge(k):
    """The hedge of ``--hedge auto`` among k learners: the half hedge with at
    most HALF_HEDGE_LEARNERS, where every resolution becomes a full sync with
    no model sent (``ProtocolConfig.syncs_every_violation``), and Kamp et al.'s
    counter with more, where it reaches static b=8's error with fewer bytes
    (docs/ALGORITHMS.md §4.5)."""
    return "half" if k <= HALF_HEDGE_LEARNERS else "counter"


class Dynamic(Protocol):
    """Resolve local violations; the violation counter or the half hedge."""

    name = "dynamic"
    parameters = ("period", "delta", "delta_scale", "pilot_rounds", "budget", "partial", "hedge", "delta_decay",
                  "augmentation", "counter_counts", "counter_reset", "counter_limit", "burst_fraction", "seed", "pace",
                  "node_size", "node_period")
    defaults = {"delta": AUTO}  # Δ measured in a pilot (docs/ALGORITHMS.md §4.4) unless given
    silent = False
    checks = True
    resolving = True

    @classmethod
    def label(cls, report):
        config = report["configuration"]
        p = config["protocol"]
        delta = p.get("delta")
        if delta == AUTO and "delta" in (report.get("delta_auto") or {}):
            delta = f"auto ({report['delta_auto']['delta']:.3g})"
        hedge = (report.get("protocol") or {}).get("hedge") or p.get("hedge")
        if hedge == AUTO:  # simulate reports the option; train the hedge it resolved to
            k = config.get("ranks") or report.get("k") or 0
            hedge = auto_hedge(k) if k > 0 else "counter"
        theta = p.get("partial") or (report.get("delta_auto") or {}).get("partial")  # given, or --delta auto's
        partial = f", partial θ={theta:g}" if theta else ""
        return f"dynamic Δ={delta} b={p.get('period')}, {hedge} hedge{partial}" + sync_mode(report)

    @staticmethod
    def check(points, t, transport):
        """Settle the check begun at the previous check point, then begin this
        one (every learner checks, violators send, a nonblocking sum of the
        violators starts); unlagged, settle it at once."""
        members = points.settle(transport) if points.lagged else None
        points.pending = (t, transport.begin_check(points.coordinator.threshold(t)), None)
        if not points.lagged:
            members = points.settle(transport)
        return members

    @staticmethod
    def agree(transport, handle):
        return transport.end_check(handle)  # (count, violators, models)

    @staticmethod
    def settle(points, agreed, transport):
        """No violator: a quiet check. Where every resolution is a full sync,
        in sync mode every rank knows what follows from the count; else rank 0
        resolves while the others serve it."""
        t, count, violators, models = agreed
        c = points.coordinator
        members = None
        if count == 0:
            c.count_quiet(1)
        elif points.lagged and c.config.syncs_every_violation(c.k):
            # sync mode: every rank knows what follows (unlagged, the simulator's count of the default
            # mode, rank 0 commands the full sync as the runtime's does)
            members = drive(c.sync_violations(count), transport)
        elif transport.coordinating:
            transport.open_resolution()
            members = c.resolve(t, violators, models, transport)
            transport.close_resolution()
        else:
            transport.serve()
        transport.settled()
        return members
