"""Shard sets: the shard paths a user gives (files, folders) turned into one
checked list, and the output folder of ``mpisgd prep``.

A set is what one ``mpisgd prep`` run wrote for one split: each of its shards
records the run's id (attribute ``prep_run``), its ``split``, its
``shard_index`` and the ``shard_count`` of the split. ``resolve_shards`` is
the one place where ``train``, ``eval``, ``predict`` and ``train --test``
turn paths into shards: a folder stands for its ``*.h5`` files; a path that
is not a shard, a shard named twice, shards of different runs or splits, and
a set with a shard missing are refused, naming the files. Shards without a
run id (written before run ids, or by ``write_shard`` directly) are taken
as named: of those only a shard named twice is refused.
"""

import os
import uuid

from mpisgd.errors import MpisgdError

RUN_ATTR = "prep_run"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
PREP_HINT = "make shards with `mpisgd prep INPUT --out DIR`, then give DIR"


def new_run_id():
    """A fresh run id (32 hex digits) for the shards of one ``prep`` run."""
    return uuid.uuid4().hex


def is_hdf5(path):
    """Whether ``path`` is a file that starts like an HDF5 file."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(HDF5_MAGIC)) == HDF5_MAGIC
    except OSError:
        return False


def _listing(folder):
    """The shard files of a folder (its non-hidden ``*.h5``, sorted)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise MpisgdError(f"{folder}: cannot list the folder ({exc.strerror or exc})") from None
    found = [os.path.join(folder, n) for n in names if n.endswith(".h5") and not n.startswith(".")]
    if not found:
        nested = [n for n in names if not n.startswith(".") and os.path.isdir(os.path.join(folder, n))
                  and any(m.endswith(".h5") for m in os.listdir(os.path.join(folder, n)))]
        if nested:
            raise MpisgdError(f"{folder}: a folder without shards (*.h5) of its own: give one of its "
                              f"folders of shards ({', '.join(nested)})")
        held = [n for n in names if not n.startswith(".")]
        what = f" (it holds {', '.join(held[:3])}{' ...' if len(held) > 3 else ''})" if held else " (it is empty)"
        raise MpisgdError(f"{folder}: a folder without shards (*.h5){what}: {PREP_HINT}")
    return found


def shard_files(paths, option="SHARD"):
    """The files ``paths`` name, a folder standing for its ``*.h5``; a path
    that does not exist, or a file that is not HDF5, is an error that says
    so and suggests ``mpisgd prep``. No shard is opened."""
    files = []
    for path in map(os.fspath, paths):
        if os.path.isdir(path):
            files += _listing(path)
        elif not os.path.exists(path):
            raise MpisgdError(f"{option} {path}: no such file or directory")
        elif not is_hdf5(path):
            raise MpisgdError(f"{option} {path}: not a shard (not an HDF5 file; LIBSVM or VW text?): "
                              f"{PREP_HINT}")
        else:
            files.append(path)
    return files


def _identity(path):
    """(run id, split, shard_index, shard_count) a shard records; run id "" when it has none."""
    from mpisgd.data.shard import open_shard

    with open_shard(path) as shard:
        a = shard.attrs
        return (str(a.get(RUN_ATTR, "")), str(a.get("split", "")), int(a.get("shard_index", -1)),
                int(a.get("shard_count", -1)))


def check_set(files, option="SHARD"):
    """Refuse a shard named twice, shards of several ``prep`` runs or splits,
    and a set that lacks some of its run's shards (each error names files)."""
    seen = {}
    for path in files:
        key = os.path.realpath(path)
        if key in seen:
            same = "" if seen[key] == path else f" (also named as {seen[key]})"
            raise MpisgdError(f"{option} {path} is named twice{same}: give each shard once")
        seen[key] = path
    ids = [(_identity(path), path) for path in files]
    if not ids:
        return
    (run0, split0, _, _), first = ids[0]
    for (run, split, _, _), path in ids[1:]:
        if run != run0:
            def who(r):
                return f"prep run {r[:8]}" if r else "no run id: an older shard"
            raise MpisgdError(
                f"{first} ({who(run0)}) and {path} ({who(run)}) come from different `mpisgd prep` "
                "runs (a stale shard of an earlier run?): give the shards of one run, e.g. its "
                "folder, or write them again with `mpisgd prep --overwrite`")
        if split != split0:
            splits = sorted({s for (_r, s, _i, _k), _p in ids})
            raise MpisgdError(
                f"{first} and {path}: shards of several splits ({', '.join(s or '-' for s in splits)}): "
                "name the shards of one split")
    if not run0:
        return  # no run id: taken as named
    count = ids[0][0][3]
    by_index = {}
    for (_r, _s, k, _n), path in ids:
        if k in by_index:
            raise MpisgdError(f"{by_index[k]} and {path} are both shard {k} of one prep run: "
                              "give each shard once")
        by_index[k] = path
    missing = sorted(set(range(count)) - set(by_index))
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise MpisgdError(
            f"incomplete shard set: {first} is one of {count} shards of its prep run"
            f"{' (split ' + split0 + ')' if split0 else ''}, but shard(s) {shown} of them "
            f"are not among the {len(files)} given: give the whole set, e.g. its folder")


def resolve_shards(paths, option="SHARD", comm=None):
    """The checked list of shard files that ``paths`` (files and folders)
    name: ``shard_files``, then ``check_set``. With ``comm``, rank 0 checks
    and every rank gets its list, or raises its error (collective)."""
    if comm is None:
        files = shard_files(paths, option)
        check_set(files, option)
        return files
    files = error = None
    if comm.Get_rank() == 0:
        try:
            files = resolve_shards(paths, option)
        except MpisgdError as exc:
            error = str(exc)
    files, error = comm.bcast((files, error), root=0)
    if error is not None:
        raise MpisgdError(error)
    return files


def _ours(folder, name):
    """Whether the entry ``name`` of ``folder`` is something ``prep`` writes:
    a shard, a manifest, or a temporary file or folder of an interrupted run."""
    import json

    path = os.path.join(folder, name)
    if name.startswith("."):
        return name.endswith((".prep-tmp", ".tmp")) or ".tmp." in name
    if name.endswith(".h5") and os.path.isfile(path) and is_hdf5(path):
        import h5py

        from mpisgd.data.shard import FORMAT

        try:
            with h5py.File(path, "r") as f:
                fmt = f.attrs.get("format")
        except OSError:
            return False
        return (fmt.decode() if isinstance(fmt, bytes) else fmt) == FORMAT
    if name.endswith(".json") and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f).get("format") == "mpisgd-shards"
        except (OSError, ValueError, AttributeError):
            return False
    return False


def claim_out_dir(out, overwrite=False):
    """Before ``prep`` writes into ``out``: an error if it is not empty, unless
    ``overwrite``, which then removes the shards (and manifests, and temporary
    files) an earlier ``prep`` left there, first. A folder that holds anything
    else is refused even with ``overwrite``, and nothing is removed."""
    import shutil

    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        raise MpisgdError(f"--out {out}: exists and is not a folder")
    names = sorted(os.listdir(out))
    if not names:
        return
    shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
    if not overwrite:
        raise MpisgdError(f"--out {out} is not empty ({shown}): pass --overwrite to replace the "
                          "shards there, or choose an empty folder")
    foreign = [n for n in names if not _ours(out, n)]
    if foreign:
        raise MpisgdError(
            f"--out {out} holds files that are not mpisgd shards ({', '.join(foreign[:3])}"
            f"{' ...' if len(foreign) > 3 else ''}): --overwrite replaces only shards; choose "
            "another folder")
    for name in names:
        path = os.path.join(out, name)
        try:
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError as exc:
            raise MpisgdError(f"--out {out}: cannot remove {name} ({exc.strerror or exc})") from None
