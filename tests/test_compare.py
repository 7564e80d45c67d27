"""``mpisgd compare``: the table from run directories, and its figures."""

import json

import pytest

from mpisgd.cli import main
from mpisgd.commands.compare import FIGURES, compare, summary


@pytest.fixture
def runs(tmp_path):
    dirs = []
    for protocol, extra in (("none", []), ("static", ["--period", "4"])):
        out = tmp_path / protocol
        assert main(["simulate", "--synthetic", "disjunction", "--learners", "3", "--rounds", "200",
                     "--protocol", protocol, *extra, "--timeline-every", "50", "--out", str(out), "-q"]) == 0
        dirs.append(out)
    return dirs


def test_table_holds_each_reports_numbers(runs, tmp_path, capsys):
    text, paths = compare([str(d) for d in runs])
    assert paths == []
    lines = text.splitlines()
    assert lines[0].split() == ["run", "held-out", "error", "online", "error", "bytes", "messages", "wall", "s"]
    for line, d in zip(lines[1:], runs):
        report = json.loads((d / "report.json").read_text())
        fields = line.split()
        assert fields[0] == d.name and fields[1] == "-"
        assert float(fields[2]) == pytest.approx(report["online"]["error_rate"], abs=5e-5)
        assert int(fields[3]) == report["communication"]["total_bytes"]
        assert int(fields[4]) == report["communication"]["total_messages"]
    row = summary(str(runs[0]))
    assert row["timeline"][:, 0].tolist() == [50, 100, 150, 200]
    assert row["timeline"][-1, 1] == pytest.approx(row["online_error"])  # the last row is the whole run


def test_heldout_error_is_shown_when_scored(runs):
    report = json.loads((runs[1] / "report.json").read_text())
    report["heldout"] = {"error": 0.125, "loss": 0.3, "examples": 8, "data": "t.svm"}
    (runs[1] / "report.json").write_text(json.dumps(report))
    text, _ = compare([str(d) for d in runs])
    assert text.splitlines()[2].split()[1] == "0.1250"


def test_figures_and_bad_input(runs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "cmp"
    assert main(["compare", *map(str, runs), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FIGURES)
    assert all((out / name).stat().st_size > 1000 for name in FIGURES)
    capsys.readouterr()
    assert main(["compare", str(tmp_path)]) == 2
    assert "not a run directory (no report.json)" in capsys.readouterr().err


def test_a_timeline_without_a_clock_reads_as_nan(runs):
    """A timeline.csv written before it had a clock: its rows, no seconds."""
    csv = runs[1] / "timeline.csv"
    csv.write_text("\n".join(line.rsplit(",", 1)[0] for line in csv.read_text().splitlines()) + "\n")
    row = summary(str(runs[1]))
    assert row["timeline"][:, 0].tolist() == [50, 100, 150, 200]
    assert all(v != v for v in row["timeline"][:, 3])
