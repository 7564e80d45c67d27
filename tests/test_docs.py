"""The guide cannot drift from the CLI: every ``mpisgd SUBCOMMAND ...`` command quoted in a
code block of README.md and docs/RESULTS.md parses with that subcommand's parser (parsed, not
run), and every bench script a document names exists."""

import re
import shlex

import pytest
from helpers.env import ROOT

from mpisgd.cli import COMMANDS, build_parser

GUIDES = ("README.md", "docs/RESULTS.md")
SCRIPT_DOCS = ("README.md", "docs/RESULTS.md", "docs/REPRODUCTION.md", "bench/README.md")


def code_lines(text):
    """The lines of a Markdown text's code blocks (fenced, or indented by 4 spaces), each
    continued line (ending in a backslash) joined to the next."""
    lines, fenced, joined = [], False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not (fenced or line.startswith("    ") or joined):
            continue
        joined += line.rstrip()
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        lines.append(joined.strip())
        joined = ""
    return lines


def mpisgd_commands(text):
    """(line, argv after ``mpisgd``) of every command that runs mpisgd: ``mpisgd``,
    ``.venv/bin/mpisgd`` or ``python [-m mpi4py] -m mpisgd``, up to the end of the shell
    command (a comment, ``;``, ``&&``, ``|``)."""
    found = []
    for line in code_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, word in enumerate(words):
            if word.split("/")[-1] == "mpisgd" and i + 1 < len(words) and words[i + 1] in COMMANDS:
                argv = []
                for w in words[i + 1:]:
                    if w in (";", "&&", "||", "|") or w.startswith(">"):
                        break
                    argv.append(w)
                found.append((line, argv))
                break
    return found


def quoted_commands():
    return [(f"{name}: {line}", argv) for name in GUIDES
            for line, argv in mpisgd_commands((ROOT / name).read_text(encoding="utf-8"))]


def test_the_guides_quote_commands():
    """The extraction finds the guides' commands (else the test below would check nothing)."""
    names = {argv[0] for _line, argv in quoted_commands()}
    assert {"prep", "train", "eval", "compare", "fit", "simulate"} <= names


@pytest.mark.parametrize("where, argv", quoted_commands(), ids=lambda v: v if isinstance(v, str) else None)
def test_quoted_command_parses(where, argv, capsys):
    parser = build_parser(argv[0])
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}\n  does not parse (exit {exc.code}): {capsys.readouterr().err.strip()}")


def test_every_named_bench_script_exists():
    missing = sorted({(name, path) for name in SCRIPT_DOCS
                      for path in re.findall(r"\bbench/[\w/]+\.py\b", (ROOT / name).read_text(encoding="utf-8"))
                      if not (ROOT / path).exists()})
    assert not missing, f"documents name bench scripts that do not exist: {missing}"


def test_the_extraction_joins_lines_and_stops_at_the_shell():
    text = "prose mpisgd eval x\n\n    .venv/bin/mpiexec -n 2 python -m mpi4py -m mpisgd train a.h5 \\\n" \
           "        --period 8 --out r   # note\n    mpisgd eval m.h5 t.svm && ls\n"
    assert [argv for _line, argv in mpisgd_commands(text)] == [
        ["train", "a.h5", "--period", "8", "--out", "r"], ["eval", "m.h5", "t.svm"]]
