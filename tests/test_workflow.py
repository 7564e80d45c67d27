"""From raw data to a scored model: prep records its preprocessing, train and fit
copy it into model.h5, eval applies it to shards, a shard directory or LIBSVM;
train --test / --epochs; a run is never replaced by accident."""

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.cli import main
from mpisgd.model import LinearModel

MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
needs_mpiexec = pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside this Python")


def mpisgd(n, *args):
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", "-m", "mpisgd", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)


def libsvm(path, m, seed, n=8, labels=(0, 1)):
    """Rows on very different scales (so normalizing matters), 1-based indices."""
    rng = np.random.default_rng(seed)
    w = np.linspace(-1.0, 1.0, n)
    lines = []
    for _ in range(m):
        cols = np.sort(rng.choice(n, size=4, replace=False))
        vals = rng.normal(size=4) * rng.choice([0.1, 10.0])
        label = labels[1] if vals @ w[cols] > 0.0 else labels[0]
        lines.append(f"{label} " + " ".join(f"{c + 1}:{v:.6f}" for c, v in zip(cols, vals)))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def data(tmp_path):
    train = libsvm(tmp_path / "train.svm", 400, seed=0)
    test = libsvm(tmp_path / "test.svm", 200, seed=1)
    assert main(["prep", str(train), "--shards", "2", "--normalize", "--out", str(tmp_path / "shards")]) == 0
    assert main(["prep", str(test), "--normalize", "--split-name", "test", "--n-features", "8",
                 "--out", str(tmp_path / "testshards")]) == 0
    return train, test, tmp_path / "shards", tmp_path / "testshards"


def test_shards_record_their_preprocessing(data):
    from mpisgd.data.shard import open_shard, preprocessing_of

    _, _, shards, _ = data
    paths = sorted(str(p) for p in shards.glob("*.h5"))
    with open_shard(paths[0]) as shard:
        record = shard.preprocessing
    assert record["normalize"] == "l2" and record["zero_based_input"] is False
    assert record["n_features"] == 8 and record["label_mapping"] == {"0": -1, "1": 1}
    assert record["source"].endswith("train.svm")
    assert preprocessing_of(paths) == record


def test_shards_prepared_differently_are_refused(data, tmp_path):
    from mpisgd.data.shard import preprocessing_of
    from mpisgd.errors import MpisgdError

    train, _, shards, _ = data
    assert main(["prep", str(train), "--out", str(tmp_path / "raw")]) == 0
    raw = next((tmp_path / "raw").glob("*.h5"))
    with pytest.raises(MpisgdError, match="normalize='none'.*not prepared the same way"):
        preprocessing_of([str(next(shards.glob("*.h5"))), str(raw)])


def test_fit_records_normalization_and_eval_applies_it(data, tmp_path, capsys):
    train, test, _, testshards = data
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "--test", str(test), "--normalize", "--epochs", "3", "-o", str(out)]) == 0
    fit_error = capsys.readouterr().out.strip().splitlines()[-2].split("testError=")[1]
    model = LinearModel.load(out)
    assert model.preprocessing["normalize"] == "l2" and model.preprocessing["n_features"] == 8
    for where in (str(test), str(testshards), str(next(testshards.glob("*.h5")))):
        assert main(["eval", str(out), where]) == 0
        assert f"error={fit_error[:-1]}" in capsys.readouterr().out  # the same rows, the same error


def test_eval_refuses_what_does_not_fit_the_model(data, tmp_path, capsys):
    train, test, shards, testshards = data
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "-o", str(out), "--epochs", "1"]) == 0
    capsys.readouterr()
    # shards normalized by prep, a model trained on rows as given
    assert main(["eval", str(out), str(testshards)]) == 2
    assert "L2-normalized, but the model was trained on rows as given" in capsys.readouterr().err
    # n_features of a shard differs from the model's
    from mpisgd.data.shard import write_shard

    wide = tmp_path / "wide.h5"
    write_shard(wide, sp.random(5, 9, density=0.5, format="csr", random_state=0), np.ones(5))
    assert main(["eval", str(out), str(wide)]) == 2
    assert f"{wide}: shard has 9 features, but the model expects 8" in capsys.readouterr().err
    # a directory with two splits is ambiguous
    assert main(["prep", str(train), "--test-fraction", "0.3", "--out", str(tmp_path / "both")]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), str(tmp_path / "both")]) == 2
    assert "several splits (test, train)" in capsys.readouterr().err
    # a model file of another format version
    with h5py.File(out, "a") as f:
        f.attrs["format_version"] = 1
    assert main(["eval", str(out), str(test)]) == 2
    assert "model format version 1 is not supported" in capsys.readouterr().err


def test_fit_one_versus_rest_and_eval(tmp_path, capsys):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(600):  # four topics, each with its own block of words
        c = i % 4
        cols = np.sort(np.concatenate([10 + 10 * c + rng.choice(10, 4, replace=False),
                                       rng.choice(10, 3, replace=False)]))
        lines.append(f"{c + 1} " + " ".join(f"{j + 1}:{rng.exponential():.4f}" for j in cols))
    train = tmp_path / "topics.svm"
    train.write_text("\n".join(lines[:400]) + "\n")
    test = tmp_path / "topics.t.svm"
    test.write_text("\n".join(lines[400:]) + "\n")
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "--test", str(test), "--normalize", "--epochs", "5", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "classes   one-versus-rest over 4: 1, 2, 3, 4" in text
    model = LinearModel.load(out)
    assert model.coef.shape == (4, 50) and model.meta["classes"] == [1, 2, 3, 4]
    assert main(["eval", str(out), str(test)]) == 0
    error = float(capsys.readouterr().out.split("error=")[1].split("%")[0])
    assert error < 5.0


def test_fit_refuses_to_replace_a_model(data, tmp_path, capsys):
    train, _, _, _ = data
    out = tmp_path / "m.h5"
    out.write_bytes(b"an earlier model")
    assert main(["fit", str(train), "-o", str(out), "--epochs", "1"]) == 2
    assert "already exists (an earlier run): pass --overwrite" in capsys.readouterr().err
    assert out.read_bytes() == b"an earlier model"
    assert main(["fit", str(train), "-o", str(out), "--epochs", "1", "--overwrite"]) == 0
    assert LinearModel.load(out).n_features == 8


def test_simulate_refuses_to_replace_a_run(tmp_path, capsys):
    out = tmp_path / "sim"
    args = ["simulate", "--synthetic", "disjunction", "--learners", "4", "--rounds", "50", "--out", str(out), "-q"]
    assert main(args) == 0
    before = (out / "report.json").read_bytes()
    assert main(args) == 2
    assert "report.json already exists" in capsys.readouterr().err
    assert (out / "report.json").read_bytes() == before
    assert main(args + ["--overwrite"]) == 0


@needs_mpiexec
def test_train_test_epochs_and_eval(data, tmp_path):
    train, test, shards, testshards = data
    paths = sorted(str(p) for p in shards.glob("*.h5"))
    out = tmp_path / "run"
    done = mpisgd(2, "train", *paths, "--test", testshards, "--epochs", 3, "--protocol", "static",
                  "--period", 4, "--loss", "hinge", "--lam", 1e-3, "--schedule", "bottou", "--average",
                  "--out", out)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["configuration"]["rounds"] == 3 * 200  # three passes over each rank's 200 rows
    assert report["online"]["examples"] == 3 * 400
    heldout = report["heldout"]
    assert heldout["examples"] == 200 and 0.0 <= heldout["error"] < 0.2
    assert f"held-out error {heldout['error']:.4f}" in done.stdout
    model = LinearModel.load(out / "model.h5")
    assert model.preprocessing["normalize"] == "l2" and model.meta["classes"] == [0, 1]
    # eval on the raw LIBSVM test file normalizes it and maps its 0/1 labels: the same score
    from mpisgd.commands.eval import score

    for where in (str(test), str(testshards)):
        again = score(model, where)
        assert again["error"] == pytest.approx(heldout["error"], abs=1e-12)
        assert again["loss"] == pytest.approx(heldout["loss"], rel=1e-9)
    # a second run into the same --out is refused, the first left untouched
    before = (out / "model.h5").read_bytes()
    again = mpisgd(2, "train", *paths, "--out", out, "--quiet")
    assert again.returncode != 0 and "already exists (an earlier run)" in again.stderr
    assert (out / "model.h5").read_bytes() == before


@needs_mpiexec
def test_train_missing_test_path_fails_before_learning(data, tmp_path):
    _, _, shards, _ = data
    paths = sorted(str(p) for p in shards.glob("*.h5"))
    out = tmp_path / "run"
    done = mpisgd(2, "train", *paths, "--test", tmp_path / "nope.svm", "--out", out)
    assert done.returncode != 0
    assert f"--test {tmp_path / 'nope.svm'}: no such file or directory" in done.stderr
    assert "rounds" not in done.stderr  # no progress: nothing was learned
    assert not out.exists()  # no empty --out left behind


@needs_mpiexec
def test_train_test_shards_of_another_width_fail_before_learning(data, tmp_path):
    from mpisgd.data.shard import write_shard

    _, _, shards, _ = data
    wide = tmp_path / "wide.h5"
    write_shard(wide, sp.random(5, 9, density=0.5, format="csr", random_state=0), np.ones(5))
    out = tmp_path / "run"
    done = mpisgd(2, "train", *sorted(shards.glob("*.h5")), "--test", wide, "--out", out)
    assert done.returncode != 0
    assert f"--test {wide}: 9 features, but the training shards have 8" in done.stderr
    assert not out.exists()
