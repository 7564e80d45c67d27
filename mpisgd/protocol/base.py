"""What every protocol is: ``Protocol``, the base of one class per protocol
(``mpisgd.protocol.registry``). A protocol's class says which parameters of
``ProtocolConfig`` it reads (the others must keep their defaults) and what
happens at a check point (``check``), and, for a check that a later check
point settles, how its agreement completes (``agree``) and what follows
(``settle``). ``points`` is the run's ``CheckPoints`` (its coordinator and
the check pending); ``transport`` the rank's transport (``MPITransport`` or
``SimTransport``)."""


class Protocol:
    """No synchronization: each learner learns alone; only the final sync."""

    name = None
    parameters = ()  # the parameters of ProtocolConfig it reads, besides name and mode
    required = ()  # of which those that must be given
    defaults = {}  # its values of those parameters that are not given (None)
    silent = True  # sends no model
    central = False  # one learner over every stream (the serial reference)
    checks = False  # learners stop every b rounds (for a sync or a check)
    resolving = False  # learners check their local condition, violations are resolved (dynamic)
    monitoring = False  # every check reduces every learner's summary (fda)

    @classmethod
    def label(cls, report):
        """A run's legend in figures and tables: the protocol and its
        parameters, from the run's report.json (train or simulate)."""
        return cls.name

    @staticmethod
    def check(points, t, transport):
        """The check point after round t, on every rank. Returns the balancing
        set settled here on the coordinating rank (all learners after a full
        sync), else None."""
        return None

    @staticmethod
    def agree(transport, handle):
        """Complete the agreement of a check begun (``handle``)."""
        raise NotImplementedError

    @staticmethod
    def settle(points, agreed, transport):
        """What follows the agreed check (every rank); returns as ``check``."""
        raise NotImplementedError


def sync_mode(report):
    """The legend's suffix of a run in the deterministic mode."""
    config = report["configuration"]
    return ", sync mode" if config.get("mode", config["protocol"].get("mode")) == "sync" else ""
