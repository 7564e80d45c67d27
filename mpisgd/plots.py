"""Summaries and figures of protocol sweeps (``bench/reproduce/reproduce.py`` results)
and of runs (report.json and ``timeline.csv`` of ``mpisgd train`` / ``simulate``).

Every figure says what it shows without its command line: a title with the
run's settings (data, learners, rounds, learner), legends naming each
protocol with its parameters.

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

from mpisgd.protocol import REGISTRY, SILENT
from mpisgd.wire import dense_nbytes

MODEL_CATEGORIES = ("violation", "balance_reply", "balance_result")  # sparse-or-dense model messages
REFERENCE = "static b=8"


def _central(row):
    return REGISTRY[row["protocol"]["name"]].central


def protocol_bytes(row):
    if _central(row):
        return 0
    k, n = row["k"], row["n_features"]
    return sum(row["bytes_sent"].values()) - k * dense_nbytes(n) - k * 8


def all_messages(row):
    """Every MPI message sent, requests and control included (start and final left out)."""
    if _central(row):
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


STREAMS = {"disjunction": "drifting disjunction", "neuralnet": "drifting two-layer network",
           "linear": "sparse linear teacher", "rcv1": "RCV1-like stream"}
FAMILIES = {"static": "static: average every b rounds (label: b)",
            "dynamic b=1": "dynamic, check every round (label: Δ)",
            "dynamic b=8": "dynamic, check every 8 rounds (label: Δ)",
            "dynamic Δ_t b=1": "dynamic, Δ_t = Δ0/√t, check every round (label: Δ0/√t)",
            "dynamic b=1..8 (adaptive)": "dynamic, adaptive check period 1..8 (label: Δ)"}


SINGLE_COLOURS = (2, 4, 6, 8, 10, 12, 14, 16, 18, 3, 5, 7, 9, 11, 13, 15, 17, 19, 1)  # tab20, static's blue left out


def run_label(report):
    """A run's protocol and its parameters, from its report.json (train or simulate)."""
    config = report.get("configuration", {})
    p, learner = config.get("protocol", {}), config.get("learner", {})
    protocol = REGISTRY.get(p.get("name"))
    label = protocol.label(report) if protocol is not None else p.get("name", "?")
    if learner.get("compress", "none") != "none":
        label += f", {learner['compress']}"
    if p.get("node_size"):
        label += f", nodes of {p['node_size']}"
    return label


def run_settings(report):
    """What a run learned from and how: data, learners, rounds, learner."""
    config = report.get("configuration", {})
    data, learner = config.get("data", {}), config.get("learner", {})
    learners = config.get("ranks") or data.get("learners") or report.get("k")
    if data.get("synthetic"):
        n = data.get("features") or config.get("n_features") or report.get("n_features")
        what = f"{STREAMS.get(data['synthetic'], data['synthetic'])} (n={n}"
        what += f", drift {data['drift_prob']:g})" if data["synthetic"] in ("disjunction", "neuralnet") else ")"
        rounds = data.get("rounds") or config.get("rounds") or report.get("rounds")
        when = f"{rounds:,} rounds"
    else:
        shards = [s.rsplit("/", 1)[-1] for s in data.get("shards", [])]
        what = _common_prefix(shards).rstrip("0123456789-_.") or "shards"
        epochs = data.get("epochs", 1)
        when = f"{epochs} epoch{'s' if epochs != 1 else ''}"
    how = f"{learner.get('loss', '?')} loss, λ={learner.get('lam', 0):g}, {learner.get('schedule', '?')} " \
          f"η0={learner.get('eta0', 0):g}" + (", averaged" if learner.get("average") else "")
    return f"{what}, {learners} learners × {when}; {how}"


def _common_prefix(names):
    import os

    return os.path.commonprefix(names) if names else ""


def _title(reports):
    settings = {run_settings(r) for r in reports}
    return settings.pop() if len(settings) == 1 else "runs with different settings"


def _sweep_settings(rows, seeds=True):
    """A sweep experiment's settings: the stream, k, T, learner (and how many seeds)."""
    r = rows[0]
    learner = r.get("learner", {})
    n = len({x["seed"] for x in rows})
    eta = learner.get("eta0", 1.0)
    if learner.get("schedule", "constant") == "invscaling":  # the sweep's rows name what differs from constant
        power = learner.get("power", 0.5)
        step = f"step {eta:g}/√t" if power == 0.5 else f"step {eta:g}/t^{power:g}"
    else:
        step = f"η={eta:g}"
    return (f"{STREAMS.get(r['stream'], r['stream'])} (n={r['n_features']}, drift {r['drift_prob']:g}), "
            f"k={r['k']} learners × {r['rounds']:,} rounds; {learner.get('loss', '?')} loss, "
            f"λ={learner.get('lam', 0):g}, {step}" + (f"; {n} seed{'s' if n != 1 else ''}" if seeds else ""))


def _family(label):
    if label.startswith("static"):
        return "static"
    if label.startswith("dynamic Δ_t") and label.endswith("b=1"):
        return "dynamic Δ_t b=1"
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
    plt = _pyplot()
    rows = [r for r in per_stream(rows) if r["experiment"] == experiment and r["variant"] == variant]
    field, share = ("protocol_messages", "msg_share") if unit == "messages" else ("protocol_bytes", "byte_share")
    what = "model messages (the paper's count)" if unit == "messages" else "bytes"
    protocols = {r["label"]: r["protocol"]["name"] for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    panels = ((axes[0], "errors", field, f"{what} sent by the protocol", "cumulative online errors"),
              (axes[1], "err_ratio", share, f"{what} / static b=8's on the same stream", "errors / static b=8's"))
    styles = {"static": ("o-", "C0", (3, 3)), "dynamic b=1": ("s-", "C3", (0, -10)),
              "dynamic b=8": ("^-", "C2", (0, 5)), "dynamic b=1..8 (adaptive)": ("D-", "C4", (3, -10)),
              "dynamic Δ_t b=1": ("v-", "C1", (0, 5))}
    for ax, yfield, xfield, xlabel, ylabel in panels:
        err, com = summarize(rows, yfield), summarize(rows, xfield)
        ys, mids = [], []  # the range over seeds of every point drawn, and its median
        logs = [math.log10(v[0]) for v in com.values() if v[0] > 0]
        spread = (max(logs) - min(logs)) if logs else 1.0
        for fam, (marker, color, offset) in styles.items():
            keys = sorted((k for k in err if _family(k[2]) == fam and k in com and com[k][0] > 0),
                          key=lambda k: com[k][0])
            if not keys:
                continue
            x = np.array([com[k][0] for k in keys])
            y = np.array([err[k][0] for k in keys])
            yerr = np.array([[err[k][0] - err[k][1] for k in keys], [err[k][2] - err[k][0] for k in keys]])
            ax.errorbar(x, y, yerr=yerr, fmt=marker, color=color, label=FAMILIES[fam], ms=4, capsize=2, lw=1)
            ys += [err[k][1] for k in keys] + [err[k][2] for k in keys]
            mids += list(y)
            last = -math.inf
            for k, xi, yi in zip(keys, x, y):  # a label where it does not cover its neighbour's
                if math.log10(xi) - last > 0.05 * spread:
                    ax.annotate(k[2].split(" ")[1].split("=")[1], (xi, yi), fontsize=7, xytext=offset,
                                textcoords="offset points", color=color, ha="center" if offset[0] == 0 else "left")
                    last = math.log10(xi)
        singles = sorted((k for k in err if _family(k[2]) is None and k in com and com[k][0] > 0
                          and not k[2].startswith("dynamic") and k[2] not in SILENT),
                         key=lambda k: com[k][0])
        for i, k in enumerate(singles):  # configurations of their own (disjunction-beyond), a marker each
            name = protocols[k[2]]  # the legend names the protocol ("auto b=8" is dynamic's)
            ax.errorbar(com[k][0], err[k][0], yerr=[[err[k][0] - err[k][1]], [err[k][2] - err[k][0]]],
                        fmt="*PXDv^<>"[i % 8], color=plt.cm.tab20(SINGLE_COLOURS[i % 19]), ms=6, capsize=2, lw=1,
                        label=k[2] if k[2].startswith(name) else f"{name} {k[2]}")
            ys += [err[k][1], err[k][2]]
            mids.append(err[k][0])
        # none and central send nothing, so they have no place on the log axis: a level each. The
        # y-axis spans the points and the levels, except a central level far below the medians (it
        # would squeeze the protocols into a band): its value goes into the legend instead.
        top, bottom = max(ys, default=0.0), min(ys, default=0.0)
        for label, color, text, may_leave in (("none", "k", "none: no communication", False),
                                              ("central", "C7", "central: one learner sees every example", True)):
            k = (experiment, variant, label)
            if k not in err:
                continue
            level = err[k][0]
            lowest = min(mids, default=bottom)
            if may_leave and level < lowest - 0.25 * (top - lowest):
                value = f"{level:,.0f} errors" if yfield == "errors" else f"{level:.3g}×"
                ax.plot([], [], ls="--", color=color, lw=0.8, label=f"{text} ({value}: below the axis)")
                continue
            ax.axhline(level, color=color, ls="--", lw=0.8, label=text)
            top, bottom = max(top, level), min(bottom, level)
        if top > bottom:
            pad = 0.05 * (top - bottom)
            ax.set_ylim(bottom - pad, top + pad)
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel + "\n(median; bars: range over seeds)")
        ax.grid(True, which="major", lw=0.3, alpha=0.5)
    axes[0].set_title(f"Error against {what}")
    axes[1].set_title("The same, relative to static b=8")
    handles, names = axes[0].get_legend_handles_labels()
    below = len(names) > 6  # many configurations: a legend of its own under the panels
    if below:
        fig.legend(handles, names, fontsize=7, loc="lower center", ncol=3, frameon=False)
    else:
        axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"{experiment}: {_sweep_settings(rows)}", fontsize=10)
    fig.tight_layout(rect=(0, 0.03 * math.ceil(len(names) / 3) if below else 0, 1, 0.96))
    _save(fig, path)
    plt.close(fig)


def error_over_rounds(rows, experiment, path, labels, seed=None, variant="default"):
    """Cumulative error (and, below, protocol messages) over rounds, one seed."""
    plt = _pyplot()
    pick = [r for r in rows if r["experiment"] == experiment and r["variant"] == variant]
    if seed is None:
        seed = min(r["seed"] for r in pick)
    stream = [r for r in pick if r["seed"] == seed]
    pick = {r["label"]: r for r in stream}
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7.5, 6.6), sharex=True)
    for i, label in enumerate(labels):
        r = pick.get(label)
        if r is None:
            continue
        tl = np.asarray(r["timeline"], dtype=float)
        ax.plot(tl[:, 0], tl[:, 1], label=label, color=f"C{i}", lw=1)
        if not REGISTRY[r["protocol"]["name"]].silent:
            sent = tl[:, 3] > 0  # a log axis has no place for the rounds before the first message
            ax2.plot(tl[sent, 0], tl[sent, 3], label=label, color=f"C{i}", lw=1)
    drifts = next(iter(pick.values()))["drifts"] if pick else []
    for d in drifts:
        ax.axvline(d + 1, color="grey", lw=0.5, ls=":")
        ax2.axvline(d + 1, color="grey", lw=0.5, ls=":")
    ax.set_ylabel("cumulative online errors")
    ax2.set_ylabel("cumulative model messages\n(none and central send none)")
    ax2.set_yscale("log")
    ax2.set_xlabel("round (dotted: the target drifts)")
    ax.set_title(f"{experiment}, seed {seed}\n{_sweep_settings(stream, seeds=False)}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def comparison(runs, paths):
    """Runs side by side (``mpisgd compare``), three figures at ``paths``: the cumulative
    online error rate against the bytes sent, against time and over rounds. ``runs``:
    dicts with "report" (report.json), "timeline" (round, cumulative online error
    rate, cumulative bytes, seconds; NaN: no clock) and "online_error"."""
    plt = _pyplot()
    labels = [run_label(r["report"]) for r in runs]
    title = _title([r["report"] for r in runs])
    against_bytes, against_time, over_rounds = paths
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for i, (r, label) in enumerate(zip(runs, labels)):
        tl = r["timeline"]
        if len(tl):
            ax.plot(tl[:, 0], tl[:, 1], color=f"C{i}", lw=1.2, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("online error rate so far")
    _finish(fig, ax, title, "Online error over rounds", over_rounds)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    sent = []
    for i, (r, label) in enumerate(zip(runs, labels)):
        tl = r["timeline"]
        if len(tl) < 2 or np.ptp(tl[:-1, 2]) == 0:  # silent while learning (its start and final average aside)
            ax.axhline(r["online_error"], color=f"C{i}", ls="--", lw=1,
                       label=f"{label} (no communication while learning: its final error)")
            continue
        keep = tl[:, 2] > 0  # a log axis has no place for the rounds before the first byte
        ax.plot(tl[keep, 2], tl[keep, 1], color=f"C{i}", lw=1.2, label=label)
        ax.plot(tl[-1, 2], tl[-1, 1], "o", color=f"C{i}", ms=5)
        sent.extend(tl[keep, 2])
    if sent:
        _log_axis(ax.xaxis, sent, _bytes)
    ax.set_xlabel("bytes sent so far, all ranks (dot: end of run)")
    ax.set_ylabel("online error rate so far")
    _finish(fig, ax, title, "Online error against bytes sent", against_bytes)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    kinds, clocks = set(), []
    for i, (r, label) in enumerate(zip(runs, labels)):
        tl = r["timeline"]
        timed = tl[np.isfinite(tl[:, 3])] if len(tl) else tl
        if not len(timed):  # simulate without --network: rounds, but no clock
            ax.plot([], [], " ", label=f"{label}: no clock (simulate without --network)")
            continue
        kinds.add("predicted" if r["report"].get("command") == "simulate" else "wall")
        ax.plot(timed[:, 3], timed[:, 1], color=f"C{i}", lw=1.2, label=label)
        ax.plot(timed[-1, 3], timed[-1, 1], "o", color=f"C{i}", ms=5)
        clocks.extend(timed[timed[:, 3] > 0, 3])
    if clocks:  # runs ending at 0.05 s and at 5 s: a log axis shows both
        _log_axis(ax.xaxis, clocks, _seconds)
    clock = {"wall": "wall seconds", "predicted": "seconds predicted by the network model"}
    ax.set_xlabel(" / ".join(clock[k] for k in sorted(kinds, reverse=True)) + " since learning began, log "
                  "(dot: end)" if kinds else "seconds since learning began")
    ax.set_ylabel("online error rate so far")
    _finish(fig, ax, title, "Online error against time", against_time)
    return list(paths)


def timelines(paths, out, names=None):
    """Cumulative error and bytes over rounds from timeline.csv files; each run named by
    its protocol when its report.json lies beside the CSV, else by ``names`` or the path."""
    import json
    import os

    plt = _pyplot()
    reports = []
    for p in paths:
        report = os.path.join(os.path.dirname(os.path.abspath(p)), "report.json")
        reports.append(json.load(open(report, encoding="utf-8")) if os.path.exists(report) else None)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7.5, 6.6), sharex=True)
    sent = []
    for i, (p, report) in enumerate(zip(paths, reports)):
        data = np.atleast_1d(np.genfromtxt(p, delimiter=",", names=True))
        name = run_label(report) if report else (names[i] if names else p)
        ax.plot(data["round"], data["errors"], label=name, lw=1.2, color=f"C{i}")
        keep = data["bytes_total"] > 0
        ax2.plot(data["round"][keep], data["bytes_total"][keep], label=name, lw=1.2, color=f"C{i}")
        sent.extend(data["bytes_total"][keep])
    ax.set_ylabel("cumulative online errors")
    ax2.set_ylabel("bytes sent so far (log)")
    if sent:
        _log_axis(ax2.yaxis, sent, _bytes)
    ax2.set_xlabel("round")
    ax.legend(fontsize=7)
    known = [r for r in reports if r]
    if known:
        ax.set_title(_title(known), fontsize=9)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bytes(value, _pos=None):
    """A byte count as a tick label: 500 B, 20 kB, 1.5 MB."""
    if value <= 0:
        return "0"
    power = min(4, max(0, int(math.floor(math.log10(value) / 3))))
    return f"{value / 1000 ** power:g} {('B', 'kB', 'MB', 'GB', 'TB')[power]}"


def _seconds(value, _pos=None):
    """Seconds as a tick label: 20 ms, 1 s, 50 s."""
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def _log_axis(axis, values, label):
    """A log axis labelled by ``label`` (units) at 1, 2, 5 per decade when ``values``
    span a few decades, at every decade otherwise."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    (axis.axes.set_xscale if axis.axis_name == "x" else axis.axes.set_yscale)("log")
    decades = math.log10(max(values) / min(values))
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if decades > 3 else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def _finish(fig, ax, title, what, path):
    import matplotlib.pyplot as plt

    ax.set_title(f"{what}\n{title}", fontsize=9)
    ax.grid(True, which="major", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _save(fig, path):
    import os

    from mpisgd.atomic import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=130, format=os.path.splitext(path)[1][1:] or "png")
