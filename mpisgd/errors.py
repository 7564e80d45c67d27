"""User-facing errors.

An ``MpisgdError`` is a problem with the user's input or configuration: the
CLI prints its message (which names the file, line, dataset or parameter)
and exits non-zero, without a traceback. Anything else is a bug and keeps
its traceback.
"""


class MpisgdError(ValueError):
    """Bad input or configuration; the message says which and where."""


class UsageError(MpisgdError):
    """A mistake in the command line (an option's value, a combination of
    options): every rank of a job finds it alike, so rank 0 alone reports it,
    with the command's usage, and the command exits 2."""
