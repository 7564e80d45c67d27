"""Command line: ``mpisgd <command> ...`` and ``python -m mpisgd``.

Each subcommand lives in ``mpisgd/commands/<name>.py`` and provides
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Command modules import their heavy dependencies inside ``run`` so that
``--help`` stays fast.

Under MPI (``mpiexec -n K python -m mpi4py -m mpisgd ...``) a user error on
any rank prints that rank's message and aborts the whole job with a non-zero
exit, so that the other ranks never hang waiting for it.
"""

import argparse
import importlib
import os
import sys
import time

from mpisgd.errors import MpisgdError

COMMANDS = ("fit", "eval", "predict", "prep", "train", "simulate", "compare", "plot", "demo")


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where it tells something: not for flags, not for
    None, and not where the help text already says what the default is."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, argparse.SUPPRESS) or isinstance(action.default, bool) or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser(command=None):
    """The parser of every command; with ``command``, only that command's
    options are built (building an option list imports what its choices come
    from, e.g. the losses' numba kernels: ``mpisgd prep`` need not pay for
    ``train``'s)."""
    parser = argparse.ArgumentParser(
        prog="mpisgd",
        description="Communication-efficient distributed online learning of "
        "sparse linear models.",
    )
    from mpisgd import __version__

    parser.add_argument("--version", action="version", version=f"mpisgd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"mpisgd.commands.{name}")
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=module.HELP,
            formatter_class=_DefaultsFormatter,
        )
        if command in (None, name):
            module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def _mpi_world_size():
    """Size of MPI_COMM_WORLD if MPI is already initialized, else 1."""
    mpi4py = sys.modules.get("mpi4py.MPI")
    if mpi4py is None or not mpi4py.Is_initialized() or mpi4py.Is_finalized():
        return 1
    return mpi4py.COMM_WORLD.Get_size()


def _fail(message, code):
    """Report a user error; under MPI with several ranks, abort the job."""
    size = _mpi_world_size()
    if size > 1:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        print(f"mpisgd: error (rank {rank}): {message}", file=sys.stderr, flush=True)
        # Abort tears the job down at once, and the launcher can drop output it
        # has not forwarded yet: give it a moment to pass the message on.
        time.sleep(0.25)
        MPI.COMM_WORLD.Abort(code)
        os._exit(code)  # MPICH's MPI_Abort can return after telling the launcher
    print(f"mpisgd: error: {message}", file=sys.stderr, flush=True)
    return code


def _keep_freed_memory():
    """Let glibc's malloc keep the memory this process frees, for its next
    allocations: arrays of up to 32 MiB come from the heap (not from a fresh
    mmap each) and the heap's free top is not handed back to the system. A
    sync's O(n) temporaries otherwise landed, on some ranks and not others, on
    fresh pages, and a first touch of a page is expensive on a VM: static b=8
    at -n 2 (RCV1-like, n = 47,152) ran 3.7x slower, one rank 3x slower per
    sync than the other (docs/RUNNING.md, "Memory"). Other C libraries keep
    their own policy."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
    mallopt(M_MMAP_THRESHOLD, 32 << 20)  # the largest glibc takes on 64-bit: HEAP_MAX_SIZE / 2
    mallopt(M_TRIM_THRESHOLD, 1 << 30)


def main(argv=None):
    _keep_freed_memory()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except MpisgdError as exc:
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
