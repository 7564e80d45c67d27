"""The grace period after a stop signal, kept from outside the rank.

After SIGTERM (a scheduler's time limit) the ranks of ``mpisgd train``
agree on a round, checkpoint it and exit (``mpisgd.checkpoint``). If a rank
is stuck or gone, the others wait for it inside MPI, where Python runs no
signal handler: the main thread never returns to the interpreter, and in
mpi4py's object collectives (``comm.bcast``, ``comm.allreduce``) it even
holds the GIL, so that no other thread of the rank runs either (measured:
a thread woken by the signal ran within 0.1 s while the main thread waited
in ``Allreduce``, ``Recv`` or ``Request.Wait``, never while it waited in
``allreduce``). So the grace is kept by a small process beside each rank
(``arm``): the rank's C-level signal handler writes the signal's number to
a pipe (``signal.set_wakeup_fd``, no Python code involved), the watchdog
reads it, and if the rank is still alive ``grace`` seconds later it says so
and kills the rank (SIGKILL), whereupon the launcher ends the job. A
checkpoint is complete once its manifest is written, last, so the newest
complete one is never damaged. The watchdog ends when the pipe closes,
that is with the rank (or when ``arm`` is called again).

Run as a script (by ``arm``; standard library only, started with ``-I -S``):

    python -I -S watchdog.py FD PID GRACE RANK DIRECTORY
"""

import os
import select
import signal
import sys
import time

STOP_SIGNALS = (signal.SIGTERM,)

_armed = None  # (this process's watchdog, the write end of its pipe)


def arm(grace, rank, directory):
    """Start this rank's watchdog: ``grace`` seconds after the first of
    ``STOP_SIGNALS`` it kills this process unless it has ended. The signals
    must have Python handlers (their C handler writes the pipe). Arming
    again replaces the previous watchdog (which then ends)."""
    import subprocess

    global _armed
    r, w = os.pipe()
    os.set_blocking(w, False)  # the C handler must never block
    proc = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), str(r), str(os.getpid()),
                             repr(float(grace)), str(rank), os.fspath(directory)],
                            pass_fds=[r], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            start_new_session=True)
    os.close(r)
    previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    if _armed is not None and previous == _armed[1]:
        os.close(previous)  # the old watchdog reads the end of its pipe and ends
    _armed = (proc, w)


def watch(fd, pid, grace, rank, directory):
    """The watchdog's loop (module docstring)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a job's signals are for the rank
        signal.signal(sig, signal.SIG_IGN)
    stops = {int(s) for s in STOP_SIGNALS}
    deadline, first = None, None
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], timeout)[0]:
            break  # the grace is over
        data = os.read(fd, 64)
        if not data:
            return  # the rank has ended
        for number in data:
            if number in stops and deadline is None:
                deadline, first = time.monotonic() + grace, signal.Signals(number).name
    print(f"mpisgd: rank {rank}: {first} {grace:g} s ago, and the run has not stopped (a rank stuck or gone?): "
          f"ending it without a checkpoint of the stop; the newest complete checkpoint in {directory} is kept",
          file=sys.stderr, flush=True)
    os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5])
