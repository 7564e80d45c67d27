"""The protocols that send no model: none (every learner alone) and central
(the serial reference: one learner over every stream)."""

from mpisgd.protocol.base import Protocol


class NoSync(Protocol):
    """Every learner learns its own stream alone; the final sync averages them."""

    name = "none"


class Central(Protocol):
    """One learner learns round t of every stream in stream order; nothing is communicated."""

    name = "central"
    central = True
