"""Writing a file so that it is either complete or absent: every output of
mpisgd (models, reports, timelines, checkpoints, shards, manifests, plots)
is written under a temporary name beside its target and renamed into place.
A failure to write (a full disk, a lost permission) is an ``MpisgdError``
naming the target, and leaves the target as it was. Files that belong
together (a run's model, timeline and report) are written as a set
(``file_set``), the last one the proof that the set is complete."""

import os
import re
import shutil
import tempfile
from contextlib import contextmanager

from mpisgd.errors import MpisgdError


def write_error(path, exc):
    """The MpisgdError for an OSError while writing ``path`` (the reason in
    one line: h5py's messages hold the errno deep inside a long text)."""
    errno = exc.errno or next((int(m) for m in re.findall(r"errno = (\d+)", str(exc))), None)
    reason = os.strerror(errno) if errno else str(exc).splitlines()[0]
    return MpisgdError(f"{path}: cannot write ({reason})")


class AtomicFile:
    """A temporary file beside ``path`` (name in ``tmp``): ``commit()``
    renames it onto ``path`` (permissions as the umask allows; with
    ``fsync`` flushed to disk first, and the rename after it); ``discard()``
    removes it and every ``tmp + suffix`` side file named in ``extra``."""

    def __init__(self, path, fsync=False):
        self.path = os.fspath(path)
        self.fsync = fsync
        self.directory = os.path.dirname(os.path.abspath(self.path))
        self.extra = []
        try:
            fd, self.tmp = tempfile.mkstemp(dir=self.directory, prefix="." + os.path.basename(self.path) + ".",
                                            suffix=".tmp")
        except OSError as exc:
            raise write_error(self.path, exc) from None
        os.close(fd)

    def commit(self):
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.tmp, 0o666 & ~umask)  # mkstemp made it private
            if self.fsync:
                with open(self.tmp, "rb") as f:
                    os.fsync(f.fileno())
            os.replace(self.tmp, self.path)
            if self.fsync:  # the rename itself reaches the disk
                fd = os.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            self.discard()
            raise write_error(self.path, exc) from None

    def discard(self):
        for name in [self.tmp] + [self.tmp + suffix for suffix in self.extra]:
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass


@contextmanager
def atomic_path(path, fsync=False):
    """Yield a temporary name beside ``path`` to write to; on success it
    replaces ``path`` (``AtomicFile.commit``), on any failure it is removed.
    An ``OSError`` inside the block becomes an ``MpisgdError`` naming ``path``."""
    out = AtomicFile(path, fsync)
    try:
        yield out.tmp
    except OSError as exc:
        out.discard()
        raise write_error(out.path, exc) from None
    except BaseException:
        out.discard()
        raise
    out.commit()


STAGING = ".incomplete-"  # prefix of a file set's staging directory (``file_set``)


@contextmanager
def file_set(directory, names):
    """Write the files ``names`` of ``directory`` as one set: yields {name:
    path} in a fresh staging directory inside ``directory``; once the block
    has written them all, they are renamed into ``directory`` in the order
    of ``names``. The last one is the proof that the set is complete: its
    previous version is removed before the others are renamed and it comes
    last, so that it never stands beside files of another set. On a failure
    the staging directory is removed and ``directory`` is as it was; a
    process killed meanwhile leaves a staging directory (``STAGING``) and,
    at worst, some of the new files without the proof."""
    try:
        staging = tempfile.mkdtemp(prefix=STAGING, dir=directory)
    except OSError as exc:
        raise write_error(os.path.join(directory, names[-1]), exc) from None
    try:
        yield {name: os.path.join(staging, name) for name in names}
        proof = os.path.join(directory, names[-1])
        if os.path.exists(proof):
            os.unlink(proof)
        for name in names:
            os.replace(os.path.join(staging, name), os.path.join(directory, name))
    except OSError as exc:
        raise write_error(os.path.join(directory, names[-1]), exc) from None
    except MpisgdError as exc:  # a writer's error names the file it was writing: name its target
        raise MpisgdError(str(exc).replace(staging, os.fspath(directory))) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
