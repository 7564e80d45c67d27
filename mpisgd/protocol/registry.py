"""The protocols by name: a new protocol is one class (``Protocol``) and one
entry here. The runner, the simulator and the transports ask a protocol's class
(``ProtocolConfig.protocol``), never compare its name."""

from mpisgd.protocol.dynamic import Dynamic
from mpisgd.protocol.fda import Fda
from mpisgd.protocol.none import Central, NoSync
from mpisgd.protocol.static import Static

REGISTRY = {cls.name: cls for cls in (NoSync, Static, Dynamic, Central, Fda)}
