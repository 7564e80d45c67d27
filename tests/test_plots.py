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
