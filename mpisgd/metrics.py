"""Run outputs shared by the MPI runner and the simulator: the JSON report and
the CSV timeline.

``write_report(path, report)`` writes any JSON-serializable dict (NumPy
scalars and arrays are converted) atomically, with sorted keys.

The report's schema is ``mpisgd.report``'s. ``Timeline`` collects, every N rounds, the cumulative online errors and loss
(summed over learners), the cumulative bytes sent by category
(``mpisgd.wire.CATEGORIES``) and the clock, and writes them as CSV with the header

    round,errors,loss,bytes_total,bytes_<category>...,seconds

for plots (cumulative error against rounds, bytes and time). ``seconds``: when the
last learner reached the round, since the loop's start (``mpisgd train``, wall
time) or as the network model predicts it (``mpisgd simulate --network``); empty
when not known (``simulate`` without a network).
"""

import csv
import io
import json
import math

import numpy as np

from mpisgd.atomic import atomic_path
from mpisgd.wire import CATEGORIES


def _atomic_write_text(path, text):
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def _plain(value):
    """JSON-ready copy of ``value`` (NumPy types to Python ones)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_report(path, report):
    """Write the run report ``report`` (a dict) as indented JSON, atomically."""
    _atomic_write_text(path, json.dumps(_plain(report), indent=2, sort_keys=True) + "\n")


def read_report(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Timeline:
    """Cumulative online error, loss, bytes and the clock every N rounds (one row per record)."""

    COLUMNS = ("round", "errors", "loss", "bytes_total", *(f"bytes_{c}" for c in CATEGORIES), "seconds")

    def __init__(self):
        self.rows = []

    def record(self, round, cumulative_errors, cumulative_loss, bytes_by_category, seconds=math.nan):
        """Append one row: rounds done, errors and loss so far (all learners),
        bytes sent so far by category (a dict; missing categories count 0), and
        the seconds since the start (NaN: not known)."""
        nbytes = [int(bytes_by_category.get(c, 0)) for c in CATEGORIES]
        self.rows.append((int(round), int(cumulative_errors), float(cumulative_loss), sum(nbytes), *nbytes,
                          float(seconds)))

    def state_dict(self):
        return {"rows": self.as_array()}

    def load_state_dict(self, state):
        self.rows = Timeline.from_array(state["rows"]).rows

    def as_array(self):
        """float64 (rows, len(COLUMNS)), for gathering over ranks and checkpoints."""
        return np.array(self.rows, dtype=np.float64).reshape(len(self.rows), len(self.COLUMNS))

    @classmethod
    def from_array(cls, array):
        """The timeline of ``as_array``'s rows."""
        out = cls()
        out.rows = [(int(r[0]), int(round(r[1])), float(r[2]), *(int(round(v)) for v in r[3:-1]), float(r[-1]))
                    for r in np.asarray(array, dtype=np.float64)]
        return out

    @classmethod
    def summed(cls, arrays):
        """A timeline whose rows are the sums of per-learner timelines recorded
        at the same rounds (``as_array`` of each); its clock is the latest learner's."""
        arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
        if not arrays or len(arrays[0]) == 0:
            return cls()
        total = np.sum(arrays, axis=0)
        total[:, 0] = arrays[0][:, 0]
        total[:, -1] = np.max([a[:, -1] for a in arrays], axis=0)
        return cls.from_array(total)

    def write(self, path):
        """Write the CSV atomically (an unknown clock as an empty field)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.COLUMNS)
        for row in self.rows:
            w.writerow(["" if isinstance(v, float) and math.isnan(v) else repr(v) if isinstance(v, float) else v
                        for v in row])
        _atomic_write_text(path, buf.getvalue())
