"""The CLI dispatcher: help shows meaningful defaults, and a user error exits 2
with the message and no traceback."""

import numpy as np

from mpisgd.cli import build_parser, main
from mpisgd.model import LinearModel


def help_of(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return sub.format_help()


def test_help_shows_defaults_only_where_they_inform():
    text = help_of("train")
    assert "(default: 1.0)" in text  # --eta0
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
