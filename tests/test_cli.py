"""The CLI dispatcher: help shows meaningful defaults, the tuning options only
under --help-all, options come from a --config TOML file too, and a user error
exits 2 with the message and no traceback."""

import ctypes
import re
import subprocess
import sys

import numpy as np
import pytest

from mpisgd.cli import _parse, build_parser, main
from mpisgd.model import LinearModel


def help_of(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return sub.format_help()


def test_help_shows_defaults_only_where_they_inform():
    text = help_of("train")
    assert "(default: 10000)" in text  # --rounds
    assert "(default: True)" not in text and "(default: False)" not in text  # flags
    assert "(default: None)" not in text
    assert "(default: the stream's) (default" not in text


def test_user_error_exits_2_with_the_message(tmp_path, capsys):
    code = main(["eval", str(tmp_path / "missing.h5"), str(tmp_path / "missing.svm")])
    err = capsys.readouterr().err
    assert code == 2
    assert "mpisgd: error:" in err and "missing" in err and "Traceback" not in err


def test_saved_files_are_readable_as_the_umask_allows(tmp_path):
    path = tmp_path / "m.h5"
    LinearModel(np.zeros(3), 0.0, "hinge", {}).save(path)
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["m.h5"]  # no temp file left


def test_a_command_builds_only_its_own_options():
    """`mpisgd prep` parses its arguments without importing what train's
    options come from (the protocol, the losses' kernels)."""
    code = ("import sys; from mpisgd.cli import build_parser; "
            "args = build_parser('prep').parse_args(['prep', 'in.svm', '--out', 'o', '--shards', '3']); "
            "print(args.shards, 'mpisgd.protocol' in sys.modules, 'mpisgd.kernels.losses' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["3", "False", "False"]
    assert "--delta" in help_of("train") and "--shards" in help_of("prep")  # every command's, with none named


def test_the_cli_keeps_freed_memory_for_the_next_allocations():
    """After ``_keep_freed_memory`` (as every `mpisgd` process starts) glibc
    serves a 16 MiB array from its heap, not a fresh mmap, and keeps the heap,
    those 16 MiB free in it, when it is freed (mallinfo2, glibc ≥ 2.33)."""
    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc ≥ 2.33: no mallinfo2 to look with")
    code = """
import ctypes, sys
import numpy as np
from mpisgd import cli
class Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "kept":
    cli._keep_freed_memory()
before = libc.mallinfo2()
a = np.ones(2 << 20)
during = libc.mallinfo2()
del a
after = libc.mallinfo2()
print(during.hblks - before.hblks, after.arena >= during.arena and after.fordblks >= 16 << 20)
"""
    kept = subprocess.run([sys.executable, "-c", code, "kept"], capture_output=True, text=True, timeout=120,
                          check=True).stdout.split()
    default = subprocess.run([sys.executable, "-c", code, "default"], capture_output=True, text=True, timeout=120,
                             check=True).stdout.split()
    assert kept == ["0", "True"]
    assert default[0] == "1"  # glibc's own policy maps it apart: the test can tell the two


TUNING = ("--poll-rows", "--poll-seconds", "--staleness", "--pace", "--block-rows", "--resident-mb",
          "--pilot-rounds", "--delta-scale", "--counter-counts", "--counter-reset", "--counter-limit",
          "--burst-fraction", "--augmentation", "--protocol-seed", "--stop-grace", "--timeline-every")


def options_listed(text):
    """The long options of a help text (in the column of the options, not in the texts)."""
    return {word.rstrip(",") for line in text.splitlines() if line.startswith("  -")
            for word in re.split(r"\s{2,}", line.strip())[0].split() if word.startswith("--")}


def long_options(command):
    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {s for a in sub._actions for s in a.option_strings if s.startswith("--")}


@pytest.mark.parametrize("command", ["train", "simulate"])
def test_help_lists_what_a_user_needs_and_help_all_every_option(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    short = options_listed(capsys.readouterr().out)
    assert done.value.code == 0
    with pytest.raises(SystemExit):
        main([command, "--help-all"])
    full = options_listed(capsys.readouterr().out)
    assert full == long_options(command)  # every option, the aliases (--lambda) too
    assert short < full and len(short) <= 30, sorted(short)
    assert {"--protocol", "--delta", "--period", "--loss", "--lam", "--eta0", "--out", "--config", "--help-all"} <= short
    hidden = set(TUNING) - ({"--poll-rows", "--poll-seconds", "--staleness", "--block-rows", "--resident-mb",
                             "--stop-grace"} if command == "simulate" else set())
    assert hidden <= full - short


def test_tuning_options_still_work_as_flags():
    args = build_parser("train").parse_args(["train", "--synthetic", "rcv1", "--poll-rows", "7", "--pace", "3",
                                             "--no-average"])
    assert (args.poll_rows, args.pace, args.average) == (7, 3, False)


def test_config_file_gives_options_and_the_command_line_wins(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('poll-rows = 512\npace = 64\naverage = false\ndelta = 0.5\nno-bias = true\n'
                    'hedge = "counter"\nlam = 0\n')
    args = _parse(build_parser("train"), ["train", "--config", str(path), "--pace", "32"])
    assert (args.poll_rows, args.pace, args.average, args.delta, args.fit_intercept, args.hedge, args.lam) == \
        (512, 32, False, 0.5, False, "counter", 0.0)
    assert args.config == str(path)


@pytest.mark.parametrize(
    "text, words",
    [
        ("poll-rowz = 3\n", ["unknown key 'poll-rowz'", "--help-all"]),
        ('poll-rows = "many"\n', ["key 'poll-rows'", "invalid int value: 'many'"]),
        ("poll-rows = 2.5\n", ["key 'poll-rows'", "invalid int value"]),
        ("average = 1\n", ["key 'average'", "true or false"]),
        ('hedge = "sometimes"\n', ["key 'hedge'", "'sometimes' is not one of"]),
        ('delta = "abc"\n', ["key 'delta'", "expected a number or 'auto'"]),
        ("[protocol]\nperiod = 2\n", ["key 'protocol'"]),
        ("config = 'other.toml'\n", ["unknown key 'config'"]),
        ("poll-rows = \n", ["not valid TOML", "line 1"]),
    ],
)
def test_a_bad_config_file_names_the_file_and_the_key(tmp_path, capsys, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as done:
        main(["train", "--synthetic", "disjunction", "--config", str(path)])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert str(path) in err and "Traceback" not in err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("option", ["--rounds", "--epochs", "--learners", "--block-rows", "--features"])
def test_counts_below_one_are_usage_errors(option, capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--synthetic", "disjunction", option, "0"])
    assert done.value.code == 2
    assert f"argument {option}: must be >= 1, got 0" in capsys.readouterr().err


def test_simulate_takes_the_rcv1_like_stream(tmp_path):
    from mpisgd.metrics import read_report

    out = tmp_path / "sim"
    assert main(["simulate", "--synthetic", "rcv1", "--learners", "2", "--rounds", "50", "--features", "500",
                 "--protocol", "static", "--period", "4", "--out", str(out), "-q"]) == 0
    report = read_report(out / "report.json")
    assert report["online"]["examples"] == 100 and report["configuration"]["data"]["synthetic"] == "rcv1"


def test_demo_without_matplotlib_exits_0_and_says_how_to_get_the_figures(tmp_path):
    """A plain `pip install mpisgd` has no matplotlib: the demo prints its table, skips the
    figures with one line naming the extra, and succeeds; `plot` says what it needs."""
    import os

    blocked = tmp_path / "site" / "matplotlib"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('matplotlib hidden by the test')\n")
    env = dict(os.environ, NUMBA_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "mpisgd", "demo", "--ranks", "2", "--rounds", "200",
                           "--out", str(tmp_path / "demo"), "--quiet"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == \
        "figures skipped: matplotlib is not installed (pip install 'mpisgd[plot]' to draw them)"
    assert not list((tmp_path / "demo").glob("*.png"))
    done = subprocess.run([sys.executable, "-m", "mpisgd", "plot", str(tmp_path / "demo" / "none"),
                           "--out", str(tmp_path / "fig")], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "pip install 'mpisgd[plot]'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["prep", "eval", "predict", "demo", "plot"])
def test_help_stands_on_its_own(command):
    """A pip install has no docs/ folder: help texts explain instead of citing its sections."""
    text = help_of(command)
    assert "§" not in text and "docs/ALGORITHMS" not in text, text
