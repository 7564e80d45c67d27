"""The static protocol: a full sync (an Allreduce of every model) every b rounds."""

from mpisgd.protocol.base import Protocol


class Static(Protocol):
    """A full sync every b rounds (Kamp et al.'s periodic averaging)."""

    name = "static"
    parameters = ("period", "node_size", "node_period")
    silent = False
    checks = True

    @classmethod
    def label(cls, report):
        return f"static b={report['configuration']['protocol'].get('period')}"

    @staticmethod
    def check(points, t, transport):
        c = points.coordinator
        c.full_sync(transport, "static")
        return list(range(c.k))
