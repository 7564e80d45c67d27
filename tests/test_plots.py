"""Figures say what they show: a legend names each run's protocol and its parameters, a title
the runs' settings (mpisgd/plots.py), from the report.json of train and simulate."""

import json

import pytest

from mpisgd.cli import main
from mpisgd.plots import run_label, run_settings


def simulate(tmp_path, name, *options):
    out = tmp_path / name
    assert main(["simulate", "--synthetic", "disjunction", "--learners", "3", "--rounds", "64",
                 "--loss", "log", "--lam", "0", "--schedule", "constant", "--eta0", "1", "--no-average",
                 *options, "--out", str(out), "-q"]) == 0
    return json.loads((out / "report.json").read_text())


def test_labels_name_the_protocol_and_its_parameters(tmp_path):
    assert run_label(simulate(tmp_path, "n", "--protocol", "none")) == "none"
    assert run_label(simulate(tmp_path, "s", "--protocol", "static", "--period", "4")) == "static b=4"
    fixed = simulate(tmp_path, "d", "--protocol", "dynamic", "--delta", "3", "--period", "2",
                     "--hedge", "counter", "--mode", "sync", "--compress", "q8")
    assert run_label(fixed) == "dynamic Δ=3.0 b=2, counter hedge, sync mode, q8"
    partial = simulate(tmp_path, "p", "--protocol", "dynamic", "--delta", "3", "--period", "2", "--partial", "0.5")
    assert run_label(partial) == "dynamic Δ=3.0 b=2, half hedge, partial θ=0.5"
    auto = simulate(tmp_path, "a", "--protocol", "dynamic", "--period", "1")
    assert run_label(auto).startswith(f"dynamic Δ=auto ({auto['delta_auto']['delta']:.3g}) b=1")


def test_settings_name_the_data_learners_and_learner(tmp_path):
    report = simulate(tmp_path, "s", "--protocol", "static", "--period", "4")
    assert run_settings(report) == ("drifting disjunction (n=100, drift 0.0002), 3 learners × 64 rounds; "
                                    "log loss, λ=0, constant η0=1")


def test_a_run_without_communication_is_a_level_on_the_bytes_axis(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mpisgd.commands.compare import summary
    from mpisgd.plots import comparison

    runs = []
    for name, options in (("none", ["--protocol", "none"]), ("static", ["--protocol", "static", "--period", "4"])):
        simulate(tmp_path, name, *options, "--timeline-every", "16")
        runs.append(summary(str(tmp_path / name)))
    drawn, close = [], plt.close
    monkeypatch.setattr(plt, "close", drawn.append)  # keep the figures to look at them
    comparison(runs, [str(tmp_path / name) for name in ("bytes.png", "time.png", "rounds.png")])
    monkeypatch.undo()
    (ax,) = [fig.axes[0] for fig in drawn if fig.axes[0].get_title().startswith("Online error against bytes")]
    assert ax.get_xscale() == "log"
    lines = {line.get_label(): line for line in ax.get_lines()}
    level = lines["none (no communication while learning: its final error)"]
    assert list(level.get_ydata()) == pytest.approx([runs[0]["online_error"]] * 2)
    assert min(lines["static b=4"].get_xdata()) > 0
    assert ax.get_title().endswith(run_settings(runs[0]["report"]))
    for fig in drawn:
        close(fig)


def test_plot_of_runs_names_them_by_protocol(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    simulate(tmp_path, "d", "--protocol", "dynamic", "--delta", "3", "--period", "2", "--timeline-every", "16")
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)
    assert main(["plot", str(tmp_path / "d"), "--out", str(tmp_path / "fig")]) == 0
    monkeypatch.undo()
    assert (tmp_path / "fig" / "error-over-rounds.png").stat().st_size > 1000
    errors, sent = drawn[0].axes
    assert [line.get_label() for line in errors.get_lines()] == ["dynamic Δ=3.0 b=2, half hedge"]
    assert sent.get_yscale() == "log" and min(sent.get_lines()[0].get_ydata()) > 0
    plt.close(drawn[0])


def test_error_against_time_is_a_curve_on_the_runs_clock(tmp_path, monkeypatch):
    """simulate --network writes the predicted time of each timeline row; compare draws the error
    against it as a curve, and names a run without a clock instead of placing it anywhere."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mpisgd.commands.compare import summary
    from mpisgd.plots import comparison

    timed = simulate(tmp_path, "timed", "--protocol", "static", "--period", "4", "--timeline-every", "16",
                     "--network", "10gbe")
    simulate(tmp_path, "untimed", "--protocol", "none", "--timeline-every", "16")
    runs = [summary(str(tmp_path / name)) for name in ("timed", "untimed")]
    clock = runs[0]["timeline"][:, 3]
    assert clock.tolist() == pytest.approx(timed["simulation"]["network"]["timeline_seconds"])
    assert len(clock) == 4 and all(0 < a < b for a, b in zip(clock, clock[1:]))
    assert all(v != v for v in runs[1]["timeline"][:, 3])  # NaN: no clock
    drawn, close = [], plt.close
    monkeypatch.setattr(plt, "close", drawn.append)
    comparison(runs, [str(tmp_path / name) for name in ("bytes.png", "time.png", "rounds.png")])
    monkeypatch.undo()
    (ax,) = [fig.axes[0] for fig in drawn if fig.axes[0].get_title().startswith("Online error against time")]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["static b=4"].get_xdata()) == pytest.approx(clock)
    assert list(lines["static b=4"].get_ydata()) == pytest.approx(runs[0]["timeline"][:, 1])
    assert not len(lines["none: no clock (simulate without --network)"].get_xdata())
    assert ax.get_xlabel().startswith("seconds predicted by the network model")
    for fig in drawn:
        close(fig)


def test_byte_ticks_read_as_units():
    from mpisgd.plots import _bytes

    assert [_bytes(v) for v in (0, 5, 500, 2e3, 1.5e6, 3e9)] == ["0", "5 B", "500 B", "2 kB", "1.5 MB", "3 GB"]


def sweep_row(label, name, errors, messages, seed=0):
    """One configuration's row of a sweep (bench/reproduce/reproduce.py's results.json), k = 4, n = 10."""
    from mpisgd.wire import CATEGORIES

    sent = dict.fromkeys(CATEGORIES, 0)
    return {"experiment": "exp", "seed": seed, "variant": "default", "label": label, "stream": "disjunction",
            "drift_prob": 0.0002, "k": 4, "n_features": 10, "rounds": 100, "protocol": {"name": name},
            "learner": {"loss": "log", "eta0": 1.0, "lam": 0.0}, "errors": errors, "protocol_messages": messages,
            "bytes_sent": dict(sent, violation=100 * messages, full_sync=4 * (16 + 8 * 10), control=32),
            "messages_sent": dict(sent, violation=messages, full_sync=4, control=4)}


def test_figure1_names_each_family_and_keeps_the_protocols_readable(tmp_path, monkeypatch):
    """Kamp et al.'s Figure 1 of a sweep: none (no communication) is a level; a central level far
    below every protocol is named in the legend with its value instead of squeezing the axis;
    the decaying threshold Δ_t is a family of its own, not a point on the constant Δ's curve;
    a configuration outside the families is named with its protocol."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mpisgd.plots import figure1

    rows = [row for seed in (0, 1) for row in (
        sweep_row("none", "none", 3000, 0, seed), sweep_row("central", "central", 10, 0, seed),
        sweep_row("static b=1", "static", 1400, 800, seed), sweep_row("static b=8", "static", 1500, 100, seed),
        sweep_row("dynamic Δ=3 b=1", "dynamic", 1490, 30, seed),
        sweep_row("dynamic Δ=1 b=1", "dynamic", 1450, 60, seed),
        sweep_row("dynamic Δ_t=0.2/√t b=1", "dynamic", 1420, 300, seed),
        sweep_row("auto b=8", "dynamic", 1510, 20, seed), sweep_row("fda Θ=1 b=8", "fda", 1500, 40, seed))]
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)
    figure1(rows, "exp", str(tmp_path / "fig.png"), "messages")
    monkeypatch.undo()
    (fig,) = drawn
    errors, ratios = fig.axes
    names = fig.legends[0].texts if fig.legends else errors.get_legend().texts
    names = [t.get_text() for t in names]
    assert "none: no communication" in names
    assert "central: one learner sees every example (10 errors: below the axis)" in names
    assert "dynamic, Δ_t = Δ0/√t, check every round (label: Δ0/√t)" in names
    assert "dynamic, check every round (label: Δ)" in names
    assert {"dynamic auto b=8", "fda Θ=1 b=8"} <= set(names)  # a configuration of its own, named by its protocol
    for ax, none, lowest, central in ((errors, 3000, 1400, 10), (ratios, 2, 1400 / 1500, 10 / 1500)):
        low, high = ax.get_ylim()
        assert central < low < lowest and none < high  # every point and none, not central
    (curve,) = [c for c in errors.containers if c.get_label() == "dynamic, check every round (label: Δ)"]
    assert list(curve.lines[0].get_xdata()) == [30, 60]
    plt.close(fig)
