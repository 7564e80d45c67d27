"""User-facing errors.

An ``MpisgdError`` is a problem with the user's input or configuration: the
CLI prints its message (which names the file, line, dataset or parameter)
and exits non-zero, without a traceback. Anything else is a bug and keeps
its traceback.
"""


class MpisgdError(ValueError):
    """Bad input or configuration; the message says which and where."""
