"""Run outputs shared by the MPI runner and the simulator: the JSON report and
the CSV timeline.

``write_report(path, report)`` writes any JSON-serializable dict (NumPy
scalars and arrays are converted) atomically, with sorted keys.

The report's schema is ``mpisgd.report``'s. ``Timeline`` collects, every N rounds, the cumulative online errors and loss
(summed over learners) and the cumulative bytes sent by category
(``mpisgd.wire.CATEGORIES``), and writes them as CSV with the header

    round,errors,loss,bytes_total,bytes_<category>...

for plots (cumulative error and bytes against rounds).
"""

import csv
import io
import json
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
    """Cumulative online error, loss and bytes every N rounds (one row per record)."""

    COLUMNS = ("round", "errors", "loss", "bytes_total", *(f"bytes_{c}" for c in CATEGORIES))

    def __init__(self):
        self.rows = []

    def record(self, round, cumulative_errors, cumulative_loss, bytes_by_category):
        """Append one row: rounds done, errors and loss so far (all learners),
        bytes sent so far by category (a dict; missing categories count 0)."""
        nbytes = [int(bytes_by_category.get(c, 0)) for c in CATEGORIES]
        self.rows.append((int(round), int(cumulative_errors), float(cumulative_loss), sum(nbytes), *nbytes))

    def state_dict(self):
        return {"rows": self.as_array()}

    def load_state_dict(self, state):
        self.rows = [(int(r[0]), int(r[1]), float(r[2]), *(int(v) for v in r[3:])) for r in state["rows"]]

    def as_array(self):
        """float64 (rows, len(COLUMNS)), for gathering over ranks."""
        return np.array(self.rows, dtype=np.float64).reshape(len(self.rows), len(self.COLUMNS))

    @classmethod
    def summed(cls, arrays):
        """A timeline whose rows are the sums of per-learner timelines recorded
        at the same rounds (``as_array`` of each)."""
        arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
        out = cls()
        if not arrays or len(arrays[0]) == 0:
            return out
        total = np.sum(arrays, axis=0)
        for i, row in enumerate(total):
            out.rows.append((int(arrays[0][i][0]), int(round(row[1])), float(row[2]),
                             *(int(round(v)) for v in row[3:])))
        return out

    def write(self, path):
        """Write the CSV atomically."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.COLUMNS)
        for row in self.rows:
            w.writerow([repr(v) if isinstance(v, float) else v for v in row])
        _atomic_write_text(path, buf.getvalue())
