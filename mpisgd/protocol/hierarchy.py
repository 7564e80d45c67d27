"""Hierarchical synchronization (``--node-size``, docs/ALGORITHMS.md §6):
node averages, the flat protocol between the node leaders, and its results
shared in the nodes."""

from mpisgd.errors import MpisgdError
from mpisgd.protocol.checks import CheckPoints


class NodeCheckPoints:
    """Hierarchical synchronization (docs/ALGORITHMS.md §6, "Hierarchical
    synchronization"), at every round t ≡ 0 mod b_node, on every rank:

    1. the m learners of each node average their models (``node.average()``,
       an Allreduce on the node communicator), so that every member holds the
       node's mean model w̄_j and the mean over all learners is unchanged;
    2. at t ≡ 0 mod b, the node leaders, each holding w̄_j, run the flat
       protocol among themselves (``CheckPoints`` over the leaders' transport:
       one learner per node, as if the node were one learner);
    3. then every leader broadcasts to its members the model it holds when a
       result changed it (``node.share()``: the new reference too after a full
       sync), so that the members of a node hold one model again.

    The leaders' lagged check of round t is settled at t + b after step 1:
    a leader's steps since it sent w̄_j(t) are then the mean of its members'
    steps, which the result keeps (``OnlineLearners.progress``). ``node``:
    this rank's node transport (``average``, ``share``); ``leaders``: the
    leaders' transport on a leader, None on the other members.
    """

    due = None  # the leaders' checks settle at their check points (``CheckPoints.due``)

    def __init__(self, coordinator):
        self.config = coordinator.config
        self.leaders = CheckPoints(coordinator)
        self.pending = False  # a leaders' check is begun and not settled (every rank knows it)

    def check(self, t, node, leaders):
        """The node average after round t, and at a check point the leaders'
        protocol and its result shared in the nodes. Returns the balancing set
        settled here on the coordinating leader, else None."""
        node.average()
        if t % self.config.period:
            return None
        members = self.leaders.check(t, leaders) if leaders is not None else None
        node.share()
        self.pending = self.config.resolving  # the leaders' check settles at their next check point
        return members

    def settle(self, t, node, leaders):
        """The last check begun, at the end of the run after round t (every
        rank): first a node average, unless one came at t, so that the result
        keeps every member's steps."""
        if not self.pending:
            return None
        if t % self.config.node_period:
            node.average()
        members = self.leaders.settle(leaders) if leaders is not None else None
        node.share()
        self.pending = False
        return members


def check_hierarchy_learner(learner):
    """``learner`` (keyword arguments of ``OnlineLearners``) for a hierarchical run:
    hierarchical synchronization moves exact models only."""
    if learner.get("compress", "none") != "none":
        raise MpisgdError("--compress: hierarchical synchronization (--node-size) moves exact models; "
                          "use --compress none")
