"""One report schema for ``mpisgd train`` and ``mpisgd simulate`` (report.json):

    mpisgd_version, command        "train" or "simulate"
    configuration                  every value the run used
    online                         examples, errors, loss, mean_loss, error_rate (every learner)
    communication                  sent/received: {category: {messages, bytes}}; total_bytes,
                                   total_messages, model_bytes, model_messages_paper {…, total}
    protocol                       hedge, checks, violations, balancings, augmented,
                                   full_syncs {cause: count, total}, violation_counter
    per_rank                       [{rank, communication: {sent, received}, …}] (train: errors,
                                   loss, time, … of each rank too)
    delta_auto, budget             --delta auto's rule and inputs, --budget's last step (or None)
    time                           wall (train: compute, communication, … per rank, total and max)
    hierarchy                      --node-size: node_size, nodes, node_period, intra_node {sent, received}

``simulate`` adds ``model`` (coef, intercept: train writes model.h5) and
``simulation`` (the simulator's own: rounds, drifts and the phase breakdown,
the timeline, fda's diagnostics, the network model's prediction).
"""

from mpisgd.wire import CATEGORIES


def online(examples, errors, loss):
    examples, errors, loss = int(examples), int(errors), float(loss)
    return {"examples": examples, "loss": loss, "errors": errors, "mean_loss": loss / max(1, examples),
            "error_rate": errors / max(1, examples)}


def counted(per_rank):
    """{"sent"|"received": {category: {messages, bytes}}} summed over the ranks' own."""
    return {side: {c: {key: sum(r[side][c][key] for r in per_rank) for key in ("messages", "bytes")}
                   for c in CATEGORIES} for side in ("sent", "received")}


def communication(counts, model_messages):
    """The communication section from summed ``counts`` and the coordinator's count of model messages."""
    return {**counts,
            "total_bytes": sum(v["bytes"] for v in counts["sent"].values()),
            "total_messages": sum(v["messages"] for v in counts["sent"].values()),
            "model_bytes": sum(counts["sent"][c]["bytes"] for c in CATEGORIES if c != "control"),
            "model_messages_paper": {**model_messages, "total": sum(model_messages.values())}}


def protocol(stats, counter):
    """The protocol section from ``ProtocolStats.as_dict`` and the violation counter."""
    return {"hedge": stats["hedge"], "checks": stats["checks"], "violations": stats["violations"],
            "balancings": stats["balancings"], "augmented": stats["augmented"],
            "full_syncs": {**stats["full_syncs"], "total": sum(stats["full_syncs"].values())},
            "violation_counter": counter}


def train_report(configuration, summaries, stats, counter):
    """The report of a distributed run: ``summaries``, one per rank
    (``Run.rank_summary``), summed; ``stats`` and ``counter``, the
    coordinator's statistics (``ProtocolStats.as_dict``) and violation counter."""
    from mpisgd import __version__

    return {
        "mpisgd_version": __version__,
        "command": "train",
        "configuration": configuration,
        "online": online(sum(s["examples"] for s in summaries), sum(s["errors"] for s in summaries),
                         sum(s["loss"] for s in summaries)),
        "per_rank": summaries,
        "communication": communication(counted([s["communication"] for s in summaries]), stats["model_messages"]),
        "protocol": protocol(stats, counter),
        "time": {
            "wall": max(s["time"]["wall"] for s in summaries),
            **{key: {"total": sum(s["time"][key] for s in summaries),
                     "max": max(s["time"][key] for s in summaries)}
               for key in ("compute", "communication", "io", "checkpoint", "waiting", "other")},
        },
    }


def _per_rank(counters):
    """Per-rank counters of the simulator ({sent_bytes, recv_bytes, sent_msgs, recv_msgs}: rank × category)
    as the runner's: [{"sent"|"received": {category: {messages, bytes}}}]."""
    sides = (("sent", "sent_msgs", "sent_bytes"), ("received", "recv_msgs", "recv_bytes"))
    return [{side: {c: {"messages": int(counters[m][r][i]), "bytes": int(counters[b][r][i])}
                    for i, c in enumerate(CATEGORIES)} for side, m, b in sides}
            for r in range(len(counters["sent_bytes"]))]


SIMULATION = ("k", "n_features", "rounds", "order", "max_period", "drifts", "drift_window", "phase_messages",
              "phase_errors", "phase_rounds", "protocol_messages", "timeline", "fda", "network")


def simulate_report(result, configuration, wall):
    """The report of ``mpisgd simulate`` from ``Simulation.finish``'s ``result``."""
    from mpisgd import __version__

    ranks = _per_rank(result["per_rank"])
    report = {
        "mpisgd_version": __version__,
        "command": "simulate",
        "configuration": configuration,
        "online": online(result["examples"], result["errors"], result["loss"]),
        "per_rank": [{"rank": r, "communication": counts} for r, counts in enumerate(ranks)],
        "communication": communication(counted(ranks), result["stats"]["model_messages"]),
        "protocol": protocol(result["stats"], result["violation_counter"]),
        "delta_auto": result["delta_auto"],
        "budget": result["budget"],
        "time": {"wall": wall},
        "model": {"coef": result["coef"], "intercept": result["intercept"]},
        "simulation": {key: result[key] for key in SIMULATION if key in result},
    }
    if "hierarchy" in result:
        h = result["hierarchy"]
        intra = _per_rank(h["intra_node"]["per_rank"])
        report["hierarchy"] = {"node_size": h["node_size"], "nodes": h["nodes"], "node_period": h["node_period"],
                               "intra_node": counted(intra)}
        for rank, counts in zip(report["per_rank"], intra):
            rank["intra_node"] = counts
    return report
