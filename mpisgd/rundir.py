"""The outputs of a run (``fit -o``, ``train --out``, ``simulate --out``):
never replaced by accident, and, after ``train``, completed with what the
runner does not know: how the shards were preprocessed and the final
model's held-out score.

A ``train`` run owns its --out while it runs (``RunLock``): a second run
into it is refused at once. Its outputs are committed as a set with
report.json last (``mpisgd.atomic.file_set``): report.json is the proof of
a finished run, and only it makes a later run into the same --out ask for
--overwrite (or --resume)."""

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time

from mpisgd.atomic import STAGING
from mpisgd.errors import MpisgdError

RUN_FILES = ("model.h5", "report.json")
TRAIN_PROOF = "report.json"  # written last: its presence says the run finished
LOCK = ".lock"  # in --out, while a train run holds it


def refuse_to_replace(out, overwrite=False, files=RUN_FILES, allow="--overwrite"):
    """Before any work: an error if the directory ``out`` already holds one of
    ``files`` of an earlier run (``files=None``: ``out`` is itself the output
    file), unless ``overwrite``. The earlier run stays untouched."""
    paths = [out] if files is None else [os.path.join(out, name) for name in files]
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not overwrite:
        raise MpisgdError(
            f"{existing[0]} already exists (an earlier run): pass {allow} to replace it, "
            "or choose another output"
        )


class RunLock:
    """An exclusive ``fcntl`` lock on OUT/.lock, which rank 0 of ``mpisgd
    train`` holds for the run's life (a context manager): another run into
    OUT is refused at once, with the holder's host and PID. The kernel (or,
    on NFS, the lock manager) drops the lock when its process ends, however
    it ends; the file stays behind only if the run ended without releasing
    it (killed, aborted), and the next run says that it takes it over.
    Releasing removes the file, and OUT too if the lock created it and it is
    otherwise empty (a run refused before it wrote anything)."""

    def __init__(self, out):
        self.out = os.fspath(out)
        self.path = os.path.join(self.out, LOCK)
        self.created = not os.path.isdir(self.out)
        try:
            os.makedirs(self.out, exist_ok=True)
            self.fd = self._lock()
            if self.fd is None:
                return
            previous = os.read(self.fd, 4096)
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                           "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}).encode(), 0)
        except OSError as exc:
            raise MpisgdError(f"--out {self.out}: cannot write the output directory ({exc.strerror or exc})") from None
        if previous:
            print(f"mpisgd train: {self.path}: taking over the lock of a run that ended without releasing it "
                  f"({_holder(previous)})", file=sys.stderr, flush=True)

    def _lock(self):
        """A descriptor of the lock file, locked; the file it names now (a
        holder releasing meanwhile unlinks the one it locked). None where the
        file system has no locks (said on the console: the run goes on)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                held = exc.errno in (errno.EACCES, errno.EAGAIN)
                holder = _holder(os.read(fd, 4096))
                os.close(fd)
                if held:
                    raise MpisgdError(f"--out {self.out} is in use by another mpisgd train ({holder}): wait for "
                                      "it to end, or choose another --out") from None
                os.unlink(self.path)
                print(f"mpisgd train: --out {self.out}: cannot lock {self.path} ({exc.strerror}): going on "
                      "without a lock, so nothing stops another run from using the same --out",
                      file=sys.stderr, flush=True)
                return None
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def release(self):
        if self.fd is not None:
            os.unlink(self.path)
            os.close(self.fd)
        if self.created:
            try:
                os.rmdir(self.out)
            except OSError:  # it holds the run's files
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _holder(text):
    """'host H, PID P, since S' of a lock file's content."""
    try:
        holder = json.loads(text)
        return f"host {holder['host']}, PID {holder['pid']}, since {holder['since']}"
    except (ValueError, KeyError, TypeError):
        return "its host and PID not written yet"


def start_train_run(out, overwrite, resume=None, shards=(), test=None):
    """Rank 0 before ``mpisgd train`` learns, holding out's ``RunLock``:
    refuse an ``out`` holding a finished run (unless ``overwrite`` or
    ``resume``) or the checkpoints of one (unless ``overwrite``, which
    removes them, or ``resume`` from them: a new run's checkpoints would
    prune them), shards preprocessed differently, and a ``test`` set that is
    not one for them (``evaluation.check_test_set``); remove what an
    unfinished run left of its outputs (``file_set``'s staging
    directories). Returns the shards' preprocessing record."""
    from mpisgd.checkpoint import SUBDIR, complete
    from mpisgd.data.shard import preprocessing_of
    from mpisgd.evaluation import check_test_set

    refuse_to_replace(out, overwrite or resume, files=(TRAIN_PROOF,), allow="--overwrite (or --resume)")
    checkpoints = os.path.join(out, SUBDIR)
    found = complete(checkpoints)
    here = os.path.realpath(out)
    inside = resume is not None and os.path.commonpath([os.path.realpath(resume), here]) == here
    if found and not inside:
        if not overwrite:
            raise MpisgdError(f"--out {out} holds the checkpoints of an earlier run (newest {found[-1][1]}), which "
                              f"this run's would replace: pass --resume {out} to go on from them, --overwrite to "
                              "remove them, or choose another --out")
        print(f"mpisgd train: --overwrite: removing the checkpoints of an earlier run in {checkpoints}",
              file=sys.stderr, flush=True)
        shutil.rmtree(checkpoints)
    preprocessing = preprocessing_of(shards)
    if test is not None:
        check_test_set(test, preprocessing)
    for name in os.listdir(out):
        if name.startswith(STAGING):
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    return preprocessing


def complete_train_run(model, report, preprocessing, test=None):
    """Rank 0 after ``mpisgd train``, before its outputs are written: copy
    the shards' ``preprocessing`` record into the final ``model`` (their
    label mapping becomes the model's classes) and score it on ``test``
    (report["heldout"]: examples, loss, error, cost, data)."""
    from mpisgd.evaluation import score

    if preprocessing:
        model.preprocessing = dict(preprocessing)
        mapping = preprocessing["label_mapping"]
        if model.is_classifier and mapping:  # input label of −1, of +1
            back = {int(v): k for k, v in mapping.items()}
            model.meta["classes"] = [_number(back[-1]), _number(back[1])]
    if test is not None:
        report["heldout"] = score(model, test, option="--test")


def _number(text):
    value = float(text)
    return int(value) if value.is_integer() else value
