"""Writing a file so that it is either complete or absent."""

import os
import tempfile
from contextlib import contextmanager


@contextmanager
def atomic_path(path, fsync=False):
    """Yield a temporary name beside ``path`` to write to. On success it
    replaces ``path`` (permissions as the umask allows; flushed to disk first
    with ``fsync``); on any failure it is removed."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it private
        if fsync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
