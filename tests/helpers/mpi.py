"""Failures of MPI tests that reach every rank instead of leaving the others
waiting in a collective.

- ``agree_on_phase`` (used by tests/conftest.py for every test under
  mpiexec): after each phase of a test (setup, call, teardown) the ranks
  agree whether it failed anywhere; a rank whose own phase passed then fails
  with the failing ranks' messages, so that all ranks go on to the same next
  phase. A rank that failed and whose peers do not arrive within ``PATIENCE``
  seconds (they are blocked in a collective that the failure left unmatched)
  prints its failure and aborts the job.
- ``on_every_rank(comm)``: a block of checks (e.g. rank 0 comparing results)
  whose failure on any rank is raised on every rank, at a point every rank
  reaches.
- ``Deferred(comm)``: checks inside a sequence of collectives (an observer
  called at every check point of a run): a failure is kept, the sequence goes
  on, and ``raise_on_every_rank()`` at its end raises it everywhere.
"""

import sys
import time
import traceback
from contextlib import contextmanager

import numpy as np
import pytest

PATIENCE = 15.0  # seconds a failed rank waits for the others before aborting the job

# Exceptions of a test that are a failure (not a skip, xfail or interrupt).
FAILURES = (Exception, pytest.fail.Exception)


def _describe(exc):
    return f"{type(exc).__name__}: {exc}".strip()


def _gather_failures(comm, error):
    """{rank: message} of the ranks where ``error`` was not None (collective)."""
    messages = comm.allgather(None if error is None else _describe(error))
    return {r: m for r, m in enumerate(messages) if m is not None}


def _failed_elsewhere(failures, rank):
    lines = [f"rank {r}: {m}" for r, m in sorted(failures.items()) if r != rank]
    return AssertionError("failed on another rank:\n" + "\n".join(lines))


@contextmanager
def on_every_rank(comm):
    """Run the block on every rank; if it fails on any, raise on every rank
    (a failing rank raises its own exception, the others an AssertionError
    with the failing ranks' messages)."""
    error = None
    try:
        yield
    except FAILURES as exc:
        error = exc
    failures = _gather_failures(comm, error)
    if error is not None:
        raise error
    if failures:
        raise _failed_elsewhere(failures, comm.Get_rank())


class Deferred:
    """Checks that must not break a sequence of collectives (see the module
    docstring): ``with deferred.check(): assert ...``; the first failure on
    this rank is kept and the block returns normally."""

    def __init__(self, comm):
        self.comm = comm
        self.error = None

    @contextmanager
    def check(self):
        try:
            yield
        except FAILURES as exc:
            if self.error is None:
                self.error = exc

    def raise_on_every_rank(self):
        """Collective: raise the first kept failure of any rank on every rank."""
        with on_every_rank(self.comm):
            if self.error is not None:
                raise self.error


def agree_on_phase(comm, item, phase, error):
    """After a test phase on every rank: raise if it failed on another rank;
    abort the job if it failed here and the others do not come (see the
    module docstring). ``error``: this rank's failure, or None."""
    from mpi4py import MPI

    mine = np.array([error is not None], np.int8)
    anywhere = np.zeros(1, np.int8)
    request = comm.Iallreduce(mine, anywhere, op=MPI.MAX)
    deadline = time.monotonic() + PATIENCE
    while not request.Test():
        if error is not None and time.monotonic() > deadline:
            rank = comm.Get_rank()
            text = "".join(traceback.format_exception(error))
            sys.stderr.write(
                f"\n{item.nodeid} ({phase}) failed on rank {rank}, and the other ranks did not reach the "
                f"end of this {phase} within {PATIENCE:.0f} s (blocked in a collective the failure left "
                f"unmatched): aborting the job.\n{text}\n")
            sys.stderr.flush()
            time.sleep(0.25)  # let the launcher forward the message before the abort
            MPI.COMM_WORLD.Abort(1)
        time.sleep(0.005)
    if anywhere[0]:
        failures = _gather_failures(comm, error)
        if error is None:
            raise _failed_elsewhere(failures, comm.Get_rank())
