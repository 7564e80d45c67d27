"""``mpisgd compare RUN...``: runs of ``mpisgd train`` or ``mpisgd simulate``
side by side, from their run directories (report.json and timeline.csv).

    mpisgd compare runs/none runs/static runs/dynamic --out runs/cmp

Prints one table (held-out error when the run was scored with ``train
--test``, online error, bytes, MPI messages, wall time) and, with ``--out``,
draws three figures (mpisgd/plots.py) of the cumulative online error rate,
titled with the runs' settings: against the bytes sent (error-vs-bytes.png),
against time (error-vs-time.png; train's wall clock, simulate's as its
``--network`` predicts it) and over rounds (error-over-rounds.png).
``compare(runs, out)`` is the same from Python.
"""

HELP = "compare runs of train/simulate: a table (errors, bytes, messages, time) and figures"

FIGURES = ("error-vs-bytes.png", "error-vs-time.png", "error-over-rounds.png")


def add_arguments(parser):
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="run directories holding report.json and timeline.csv")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="directory for the figures (default: the table only)")


def summary(run_dir):
    """One run's row: name, held-out error (None if not scored), online error
    rate, bytes, messages, wall seconds, and its timeline (round, cumulative
    online error rate, cumulative bytes, seconds; NaN: no clock) as a float
    array (rows, 4)."""
    import os

    import numpy as np

    from mpisgd.errors import MpisgdError
    from mpisgd.metrics import read_report

    path = os.path.join(run_dir, "report.json")
    if not os.path.exists(path):
        raise MpisgdError(f"{run_dir}: not a run directory (no report.json)")
    try:
        r = read_report(path)  # one schema for train and simulate (mpisgd.report)
        examples, errors = r["online"]["examples"], r["online"]["errors"]
        nbytes, messages = r["communication"]["total_bytes"], r["communication"]["total_messages"]
        wall = r["time"]["wall"]
        heldout = r.get("heldout", {}).get("error")
    except (KeyError, TypeError, ValueError) as exc:
        raise MpisgdError(f"{path}: not a report of mpisgd train or simulate ({exc!r})") from None
    timeline = np.zeros((0, 4))
    csv = os.path.join(run_dir, "timeline.csv")
    if os.path.exists(csv):
        data = np.atleast_1d(np.genfromtxt(csv, delimiter=",", names=True))  # an empty field: NaN
        if data.size and examples:
            per_round = examples / data["round"][-1]  # learners whose rows count in a round
            rate = data["errors"] / np.maximum(1.0, data["round"] * per_round)
            clock = data["seconds"] if "seconds" in data.dtype.names else np.full(len(data), np.nan)  # older runs
            timeline = np.column_stack([data["round"], rate, data["bytes_total"], clock])
    name = os.path.basename(os.path.normpath(os.path.abspath(run_dir)))
    return {"name": name, "heldout_error": heldout, "online_error": errors / max(1, examples),
            "bytes": int(nbytes), "messages": int(messages), "wall": float(wall), "timeline": timeline,
            "report": r}


def table(rows):
    """The comparison table as text."""
    width = max(8, *(len(r["name"]) for r in rows))
    lines = [f"{'run':<{width}} {'held-out error':>14} {'online error':>12} {'bytes':>12} "
             f"{'messages':>9} {'wall s':>7}"]
    for r in rows:
        held = "-" if r["heldout_error"] is None else f"{r['heldout_error']:.4f}"
        lines.append(f"{r['name']:<{width}} {held:>14} {r['online_error']:>12.4f} {r['bytes']:>12d} "
                     f"{r['messages']:>9d} {r['wall']:>7.1f}")
    return "\n".join(lines)


def figures(rows, out):
    """Draw FIGURES into ``out``; returns their paths."""
    import importlib.util
    import os

    from mpisgd.errors import MpisgdError

    if importlib.util.find_spec("matplotlib") is None:
        raise MpisgdError("compare --out needs matplotlib (pip install 'mpisgd[plot]')")
    from mpisgd.plots import comparison

    os.makedirs(out, exist_ok=True)
    return comparison(rows, [os.path.join(out, name) for name in FIGURES])


def compare(runs, out=None):
    """Read the run directories ``runs``; returns (table text, figure paths),
    drawing the figures into ``out`` when given."""
    rows = [summary(run) for run in runs]
    return table(rows), (figures(rows, out) if out is not None else [])


def run(args):
    text, paths = compare(args.runs, args.out)
    print(text)
    for path in paths:
        print(f"mpisgd compare: wrote {path}")
    return 0
