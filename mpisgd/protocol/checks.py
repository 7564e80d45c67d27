"""What happens at a check point of the deterministic mode, on every rank:
``CheckPoints`` holds the check begun and not yet settled, and hands each
step to the protocol's own class (``mpisgd.protocol.registry``)."""

import numpy as np


class CheckPoints:
    """What happens at a check point of the deterministic mode (``--mode sync``
    of ``mpisgd train``; the simulator's ``--mode sync``), on every rank.

    - static: a full sync (Allreduce) every b rounds;
    - dynamic: the check of round t is *begun* at t (every learner checks its
      local condition, violators send their models, and a nonblocking sum of
      violators starts) and *settled* at the next check point (or at the end
      of the run), so that the agreement travels while the learners learn b
      more rounds. If anyone violated, rank 0 resolves (``Coordinator``) while
      the others serve it; the violators keep the steps they made since they
      sent (docs/ALGORITHMS.md §4). Where every resolution is a full sync
      (``ProtocolConfig.syncs_every_violation``) nobody sends a model and,
      the count being non-zero, every rank takes part in the full sync at
      once, with no command of rank 0. With ``lagged=False`` a check is settled
      as soon as it is begun (the simulator's count of the paper's instant
      resolution, used for ``--mode async``).
    - fda: the same lag for the variance check (docs/ALGORITHMS.md §8): at t
      every rank starts a nonblocking sum of its summary [‖w_l − r‖²,
      ⟨w_l − r, ξ_q⟩ …] (``begin_variance``); at the next check point every
      rank completes it (``end_variance``), computes the same δ̂ and, when
      δ̂ > Θ, takes part in a full sync there. No check is begun right after
      a full sync (every w_l = r then). In either mode; with fda_lag 0 the
      check is settled as soon as it is begun (a blocking Allreduce).
    - none, central: nothing.

    The transport (``MPITransport`` or ``SimTransport``) provides
    ``coordinating``, ``begin_check(Δ)``, ``end_check(handle)``,
    ``open_resolution``/``close_resolution``, ``serve`` and ``settled``, plus
    the coordinator's requests (``Coordinator.resolution``); for fda
    ``begin_variance()`` and ``end_variance(handle)`` -> (sums, exact δ or None).
    """

    def __init__(self, coordinator, lagged=True):
        self.coordinator = coordinator
        self.protocol = coordinator.config.protocol  # its class: each step of a check point
        self.lagged = lagged
        self.pending = None  # (t, handle, agreed) of the check begun and not yet settled

    def check(self, t, transport):
        """The check point after round t. Returns the balancing set settled
        here on the coordinating rank (all learners after a full sync), else None."""
        return self.protocol.check(self, t, transport)

    def agree(self, transport):
        """Complete the agreement of the pending check (the resolution waits
        for its check point). Returns (t, *agreed) — dynamic: (t, count,
        violators, models) — or None when no check is pending; a checkpoint
        saves it (``restore``)."""
        if self.pending is None:
            return None
        t, handle, agreed = self.pending
        if agreed is None:
            agreed = self.protocol.agree(transport, handle)
            self.pending = (t, handle, agreed)
        return (t, *agreed)

    def state_dict(self):
        """The pending check once agreed on (``agree``; dynamic: its round and
        count, and on rank 0 the violators and their models), else nothing."""
        if self.pending is None:
            return {}
        t, handle, agreed = self.pending
        if agreed is None:
            raise RuntimeError("CheckPoints.state_dict: the pending check is not agreed on yet (agree first)")
        count, violators, models = agreed
        state = {"pending": np.array([t, count], dtype=np.int64)}
        if violators is not None:  # rank 0, where violations carry models
            state["violators"] = np.asarray(violators, dtype=np.int64)
            state["models"] = np.asarray(models, dtype=np.float64).reshape(len(violators), -1) if violators \
                else np.zeros((0, 0))
        return state

    def load_state_dict(self, state):
        """The pending check as ``state_dict`` gave it (a resumed run)."""
        if "pending" not in state:
            self.pending = None
            return
        t, count = (int(v) for v in state["pending"])
        violators = [int(v) for v in state["violators"]] if "violators" in state else None
        models = list(state["models"]) if "models" in state else None
        self.pending = (t, None, (count, violators, models))

    def settle(self, transport):
        """Settle the pending check, if any (every rank)."""
        agreed = self.agree(transport)
        if agreed is None:
            return None
        self.pending = None
        return self.protocol.settle(self, agreed, transport)
