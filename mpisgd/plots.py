"""Summaries and figures of protocol sweeps (``bench/reproduce/reproduce.py`` results)
and of single runs (``timeline.csv`` of ``mpisgd train`` / ``simulate``).

A sweep row is one configuration on one stream (experiment, seed); every
comparison is made within a stream, against the same stream's static b = 8
and none (Kamp et al.'s Figure 1 reference points), then summarized over
seeds by the median and the range.

"Protocol" messages and bytes leave out what every run does regardless of
the protocol: the start (one control Allreduce) and the final Allreduce of
the models (2k model messages, k·8(n+2) bytes).
"""

import math

import numpy as np

from mpisgd.protocol import SILENT
from mpisgd.wire import dense_nbytes

MODEL_CATEGORIES = ("violation", "balance_reply", "balance_result")  # sparse-or-dense model messages
REFERENCE = "static b=8"


def protocol_bytes(row):
    if row["protocol"]["name"] == "central":
        return 0
    k, n = row["k"], row["n_features"]
    return sum(row["bytes_sent"].values()) - k * dense_nbytes(n) - k * 8


def all_messages(row):
    """Every MPI message sent, requests and control included (start and final left out)."""
    if row["protocol"]["name"] == "central":
        return 0
    return sum(row["messages_sent"].values()) - 2 * row["k"]


def dense_equivalent_bytes(row):
    """Bytes if every model message were dense (16 + 8n), the rest unchanged."""
    n = row["n_features"]
    sparse = sum(row["bytes_sent"][c] for c in MODEL_CATEGORIES)
    dense = sum(row["messages_sent"][c] for c in MODEL_CATEGORIES) * (16 + 8 * n)
    return protocol_bytes(row) - sparse + dense


def _key(row):
    return row["experiment"], row["variant"], row["label"]


def per_stream(rows):
    """Rows with comparisons to the same stream's (and variant's) none and static b = 8
    added: err_ratio, kept, msg_share, byte_share, all_msg_share, dense_byte_share."""
    refs = {}
    for r in rows:
        base = r["label"].split(" [")[0]
        if base in ("none", REFERENCE):
            refs[(r["experiment"], r["seed"], r["variant"], base)] = r
    out = []
    for r in rows:
        s8 = refs.get((r["experiment"], r["seed"], r["variant"], REFERENCE)) or refs.get(
            (r["experiment"], r["seed"], "default", REFERENCE))
        none = refs.get((r["experiment"], r["seed"], r["variant"], "none")) or refs.get(
            (r["experiment"], r["seed"], "default", "none"))
        c = dict(r)
        c["protocol_bytes"] = protocol_bytes(r)
        c["all_messages"] = all_messages(r)
        c["dense_bytes"] = dense_equivalent_bytes(r)
        if s8 is not None:
            c["err_ratio"] = r["errors"] / max(1, s8["errors"])
            c["msg_share"] = r["protocol_messages"] / max(1, s8["protocol_messages"])
            c["byte_share"] = c["protocol_bytes"] / max(1, protocol_bytes(s8))
            c["all_msg_share"] = c["all_messages"] / max(1, all_messages(s8))
            if none is not None and none["errors"] != s8["errors"]:
                c["kept"] = (none["errors"] - r["errors"]) / (none["errors"] - s8["errors"])
        out.append(c)
    return out


def summarize(rows, field):
    """{(experiment, variant, label): (median, min, max, n)} of a field over seeds."""
    groups = {}
    for r in rows:
        v = r.get(field)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            groups.setdefault(_key(r), []).append(v)
    return {k: (float(np.median(v)), float(np.min(v)), float(np.max(v)), len(v)) for k, v in groups.items()}


def _family(label):
    if label.startswith("static"):
        return "static"
    if label.startswith("dynamic") and label.endswith("b=1"):
        return "dynamic b=1"
    if label.startswith("dynamic") and label.endswith("b=8"):
        return "dynamic b=8"
    if label.startswith("dynamic") and label.endswith("b=1..8"):
        return "dynamic b=1..8 (adaptive)"
    return None


def figure1(rows, experiment, path, unit="messages", variant="default"):
    """Kamp et al.'s Figure 1: cumulative online error against communication,
    one point per configuration. Left: medians over seeds (bars: range);
    right: within each stream relative to static b = 8, then medians."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in per_stream(rows) if r["experiment"] == experiment and r["variant"] == variant]
    field, share = ("protocol_messages", "msg_share") if unit == "messages" else ("protocol_bytes", "byte_share")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    panels = ((axes[0], "errors", field, f"{unit} sent (protocol only)", "cumulative online errors"),
              (axes[1], "err_ratio", share, f"{unit} / those of static b=8 (same stream)", "errors / those of static b=8"))
    styles = {"static": ("o-", "C0"), "dynamic b=1": ("s-", "C3"), "dynamic b=8": ("^-", "C2"),
              "dynamic b=1..8 (adaptive)": ("D-", "C4")}
    for ax, yfield, xfield, xlabel, ylabel in panels:
        err, com = summarize(rows, yfield), summarize(rows, xfield)
        for fam, (marker, color) in styles.items():
            keys = [k for k in err if _family(k[2]) == fam and k in com]
            keys.sort(key=lambda k: com[k][0])
            if not keys:
                continue
            x = np.array([com[k][0] for k in keys])
            y = np.array([err[k][0] for k in keys])
            yerr = np.array([[err[k][0] - err[k][1] for k in keys], [err[k][2] - err[k][0] for k in keys]])
            ax.errorbar(np.maximum(x, 1e-9), y, yerr=yerr, fmt=marker, color=color, label=fam, ms=4, capsize=2, lw=1)
            for k, xi, yi in zip(keys, x, y):
                ax.annotate(k[2].split(" ")[1], (xi, yi), fontsize=6, xytext=(2, 2), textcoords="offset points")
        singles = sorted((k for k in err if _family(k[2]) is None and k in com
                          and not k[2].startswith("dynamic") and k[2] not in SILENT),
                         key=lambda k: com[k][0])
        for i, k in enumerate(singles):  # configurations of their own (disjunction-beyond), a marker each
            ax.errorbar(max(com[k][0], 1e-9), err[k][0], yerr=[[err[k][0] - err[k][1]], [err[k][2] - err[k][0]]],
                        fmt="*PXDv^<>"[i % 8], color=f"C{(i + 1) % 10}", label=k[2], ms=6, capsize=2, lw=1)
        for label, color in (("none", "k"), ("central", "C7")):
            k = (experiment, variant, label)
            if k in err:
                ax.axhline(err[k][0], color=color, ls="--", lw=0.8, label=f"{label} (median)")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel + "; median over seeds")
        ax.set_ylabel(ylabel + " (bars: range)")
    axes[0].set_title(f"{experiment}: error against {unit}")
    axes[1].set_title("within each stream, relative to static b=8")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def error_over_rounds(rows, experiment, path, labels, seed=None, variant="default"):
    """Cumulative error (and, right axis, protocol messages) over rounds, one seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pick = [r for r in rows if r["experiment"] == experiment and r["variant"] == variant]
    if seed is None:
        seed = min(r["seed"] for r in pick)
    pick = {r["label"]: r for r in pick if r["seed"] == seed}
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True)
    for i, label in enumerate(labels):
        r = pick.get(label)
        if r is None:
            continue
        tl = np.asarray(r["timeline"], dtype=float)
        ax.plot(tl[:, 0], tl[:, 1], label=label, color=f"C{i}", lw=1)
        if r["protocol"]["name"] not in SILENT:
            ax2.plot(tl[:, 0], tl[:, 3], label=label, color=f"C{i}", lw=1)
    drifts = next(iter(pick.values()))["drifts"] if pick else []
    for d in drifts:
        ax.axvline(d + 1, color="grey", lw=0.5, ls=":")
        ax2.axvline(d + 1, color="grey", lw=0.5, ls=":")
    ax.set_ylabel("cumulative online errors")
    ax2.set_ylabel("cumulative model messages")
    ax2.set_yscale("log")
    ax2.set_ylim(bottom=1)
    ax2.set_xlabel("round (dotted: target drifts)")
    ax.set_title(f"{experiment}, seed {seed}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def timelines(paths, out, names=None):
    """Cumulative error and bytes over rounds from timeline.csv files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True)
    for i, p in enumerate(paths):
        data = np.genfromtxt(p, delimiter=",", names=True)
        data = np.atleast_1d(data)
        name = names[i] if names else p
        ax.plot(data["round"], data["errors"], label=name, lw=1)
        ax2.plot(data["round"], data["bytes_total"], label=name, lw=1)
    ax.set_ylabel("cumulative online errors")
    ax2.set_ylabel("bytes sent")
    ax2.set_xlabel("round")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)


def _save(fig, path):
    import os

    from mpisgd.atomic import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=130, format=os.path.splitext(path)[1][1:] or "png")
