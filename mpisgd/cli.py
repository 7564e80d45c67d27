"""Command line: ``mpisgd <command> ...`` and ``python -m mpisgd``.

Each subcommand lives in ``mpisgd/commands/<name>.py`` and provides
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``
(and ``USAGE``, a short usage line, where argparse's would be long).
Command modules import their heavy dependencies inside ``run`` so that
``--help`` stays fast.

Options marked ``tuning`` (mpisgd.commands.options) are left out of
``--help`` and listed by ``--help-all``; a command with ``--config FILE``
also takes any of its options from a TOML file (a key is an option's long
name: ``poll-rows = 512``), the command line winning over the file.

Under MPI (``mpiexec -n K python -m mpi4py -m mpisgd ...``) a usage error
(a ``UsageError``, or one argparse finds) is the same on every rank: rank 0
alone prints it and the job exits 2. Any other user error prints that rank's
message and aborts the whole job with a non-zero exit, so that the other
ranks never hang waiting for it.
"""

import argparse
import importlib
import os
import sys
import time

from mpisgd.errors import MpisgdError, UsageError

COMMANDS = ("fit", "eval", "predict", "prep", "train", "simulate", "compare", "plot", "demo")
# How long a rank with a usage error waits for rank 0, which finds it too, to end the job.
USAGE_WAIT = 30.0


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where it tells something: not for flags, not for
    None, and not where the help text already says what the default is."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, argparse.SUPPRESS) or isinstance(action.default, bool) or "default" in text:
            return text
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with its messages (help, usage errors) printed by
    rank 0 only under MPI, and a usage error ending the job with exit 2
    (``_end_job``). ``_print_message`` is where argparse prints everything."""

    def _print_message(self, message, file=None):
        if _rank_and_size()[0] == 0:
            super()._print_message(message, file)

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message, sys.stderr)
        if status:
            _end_job(status, message or "")
        sys.exit(status)


class _HelpAll(argparse.Action):
    """--help-all: the help with the tuning options (``options.tuning``)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        for action in parser._actions:
            if hasattr(action, "full_help"):
                action.help = action.full_help
        parser.print_help()
        parser.exit()


def build_parser(command=None):
    """The parser of every command; with ``command``, only that command's
    options are built (building an option list imports what its choices come
    from, e.g. the losses' numba kernels: ``mpisgd prep`` need not pay for
    ``train``'s)."""
    parser = _Parser(
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
            usage=getattr(module, "USAGE", None),  # instead of argparse's list of every option
            formatter_class=_DefaultsFormatter,
        )
        if command in (None, name):
            module.add_arguments(p)
            if any(hasattr(action, "full_help") for action in p._actions):
                p.add_argument("--help-all", action=_HelpAll, help="show every option, the tuning ones too, and exit")
        p.set_defaults(_run=module.run, _parser=p)
    return parser


def load_config(path, parser):
    """The options of ``parser`` that the TOML file ``path`` sets, as
    {dest: value}: a key is an option's long name without its dashes
    (``poll-rows = 512``, ``average = false``), its value what the option takes
    on the command line. An unknown key or a bad value is a UsageError naming
    the file and the key."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser from PyPI (pyproject.toml)
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path}: not valid TOML: {exc}") from None
    options = {s[2:]: a for a in parser._actions for s in a.option_strings if s.startswith("--")}
    values = {}
    for key, value in table.items():
        action = options.get(key)
        if action is None or action.dest == "config" or action.default == argparse.SUPPRESS:  # help, version
            raise UsageError(f"--config {path}: unknown key {key!r}: not an option of `{parser.prog}` "
                             f"(see {parser.prog} --help-all)")
        try:
            values[action.dest] = _config_value(action, key, value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise UsageError(f"--config {path}: key {key!r}: {exc}") from None
    return values


def _config_value(action, key, value):
    """The value a TOML ``key = value`` gives the option ``action``."""
    if action.nargs == 0:  # a flag: true gives it, false its opposite
        if not isinstance(value, bool):
            raise TypeError(f"expected true or false, got {value!r}")
        if isinstance(action, argparse.BooleanOptionalAction):
            return value != key.startswith("no-")
        return action.const if value else not action.const
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"expected {'a string' if action.type is None else 'a number'}, got {value!r}")
    if action.type is None and not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    try:
        converted = action.type(str(value)) if action.type is not None else value
    except ValueError as exc:  # int, float: argparse's own words
        if isinstance(exc, argparse.ArgumentTypeError):
            raise
        raise ValueError(f"invalid {getattr(action.type, '__name__', 'value')} value: {value!r}") from None
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
    return converted


def _parse(parser, argv):
    """Parse ``argv``; with ``--config FILE``, the file's values become the
    command's defaults and ``argv`` is parsed again, so that it wins."""
    args = parser.parse_args(argv)
    path = getattr(args, "config", None)
    if path is not None:
        try:
            args._parser.set_defaults(**load_config(path, args._parser))
        except UsageError as exc:
            args._parser.error(str(exc))
        args = parser.parse_args(argv)
    return args


def _rank_and_size():
    """This process's rank and the size of MPI_COMM_WORLD under MPI (launched
    through ``python -m mpi4py``, which initializes MPI when the command first
    needs it: here, if that is to print), else (0, 1)."""
    if "mpi4py" not in sys.modules:
        return 0, 1
    from mpi4py import MPI

    if MPI.Is_finalized():
        return 0, 1
    return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def _end_job(code, message):
    """End the job after a usage error that rank 0 has printed (every rank
    parses the same command line): rank 0 aborts the job with ``code``, the
    others wait for that. One that is still waiting after USAGE_WAIT seconds
    (rank 0 found no error) prints its own message and aborts. (Ending with
    MPI_Finalize instead races the launcher: MPICH's hydra kills the ranks
    still finalizing when the first exits non-zero, and the job's exit code
    becomes 9.)"""
    rank, size = _rank_and_size()
    if size == 1:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if rank != 0:
        time.sleep(USAGE_WAIT)
        print(f"mpisgd: error (rank {rank}): {message.strip()}", file=sys.stderr, flush=True)
    _abort(code)


def _abort(code):
    """Abort the MPI job with ``code``."""
    from mpi4py import MPI

    # Abort tears the job down at once, and the launcher can drop output it
    # has not forwarded yet: give it a moment to pass the message on.
    time.sleep(0.25)
    MPI.COMM_WORLD.Abort(code)
    os._exit(code)  # MPICH's MPI_Abort can return after telling the launcher


def _usage_error(parser, message):
    """Report a UsageError as argparse reports its own (usage, then the
    message: by rank 0 alone) and end the job; returns exit code 2."""
    parser.print_usage(sys.stderr)
    text = f"{parser.prog}: error: {message}\n"
    parser._print_message(text, sys.stderr)
    _end_job(2, text)
    return 2


def _fail(message, code):
    """Report a user error; under MPI with several ranks, abort the job."""
    rank, size = _rank_and_size()
    if size > 1:
        print(f"mpisgd: error (rank {rank}): {message}", file=sys.stderr, flush=True)
        _abort(code)
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
    args = _parse(parser, argv)
    try:
        return int(args._run(args) or 0)
    except UsageError as exc:
        return _usage_error(args._parser, str(exc))
    except MpisgdError as exc:
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
