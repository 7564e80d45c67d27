"""From raw data to a scored model: prep records its preprocessing, train and fit
copy it into model.h5, eval and predict apply it to shards, a shard folder, LIBSVM
or VW text; train --test / --epochs; a run is never replaced by accident; prep
writes into an empty --out, and a shard set mixed from two prep runs, a shard
named twice or missing are refused; the one rule for multiclass files."""

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
    from mpisgd.evaluation import score

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


def cli(*args):
    """``python -m mpisgd ARGS`` in a subprocess (one process, no mpiexec)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "mpisgd", *map(str, args)], capture_output=True,
                          text=True, timeout=180, env=env)


def test_prep_refuses_a_non_empty_out_and_overwrite_replaces_only_shards(tmp_path):
    train = libsvm(tmp_path / "train.svm", 200, seed=0)
    out = tmp_path / "D"
    assert cli("prep", train, "--shards", 4, "--out", out).returncode == 0
    four = sorted(os.listdir(out))
    done = cli("prep", train, "--shards", 2, "--out", out)
    assert done.returncode == 2
    assert f"--out {out} is not empty (train-00000.h5, train-00001.h5, train-00002.h5 ...): " \
        "pass --overwrite" in done.stderr
    assert sorted(os.listdir(out)) == four  # untouched
    done = cli("prep", train, "--shards", 2, "--out", out, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(out)) == ["train-00000.h5", "train-00001.h5", "train.json"]  # no stale shard
    (out / "notes.txt").write_text("mine")
    done = cli("prep", train, "--shards", 3, "--out", out, "--overwrite")
    assert done.returncode == 2
    assert "holds files that are not mpisgd shards (notes.txt)" in done.stderr
    assert sorted(os.listdir(out)) == ["notes.txt", "train-00000.h5", "train-00001.h5", "train.json"]


def test_shard_sets_are_checked_where_they_are_named(tmp_path):
    """A folder, files and --test go through one resolver: duplicates, shards of two prep runs,
    a missing shard, several splits and paths that are not shards are refused, naming files."""
    from mpisgd.data.shardset import resolve_shards
    from mpisgd.errors import MpisgdError

    train = libsvm(tmp_path / "train.svm", 200, seed=0)
    for name, k in (("A", 4), ("B", 2)):
        assert main(["prep", str(train), "--shards", str(k), "--out", str(tmp_path / name)]) == 0
    a = [str(tmp_path / "A" / f"train-{k:05d}.h5") for k in range(4)]
    b = [str(tmp_path / "B" / f"train-{k:05d}.h5") for k in range(2)]
    assert resolve_shards([str(tmp_path / "A")]) == a
    assert resolve_shards(a[::-1]) == a[::-1]  # files in the order given
    with pytest.raises(MpisgdError, match=f"SHARD {a[1]} is named twice"):
        resolve_shards(a + [a[1]])
    with pytest.raises(MpisgdError, match=r"A/\.\./A/train-00000.h5 is named twice \(also named as "
                       f"{a[0]}"):
        resolve_shards(a + [str(tmp_path / "A" / ".." / "A" / "train-00000.h5")])
    # the stale set: shards 0, 1 of a 2-shard run beside shards 2, 3 of a 4-shard run
    with pytest.raises(MpisgdError, match="come from different `mpisgd prep` runs"):
        resolve_shards(b + a[2:])
    with pytest.raises(MpisgdError, match=r"incomplete shard set: .*train-00000.h5 is one of 4 shards "
                       r"of its prep run, but shard\(s\) 2, 3 of them are not among the 2 given"):
        resolve_shards(a[:2])
    with pytest.raises(MpisgdError, match=f"SHARD {train}: not a shard .*: make shards with `mpisgd prep"):
        resolve_shards([str(train)])
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "train.svm").write_bytes(train.read_bytes())
    with pytest.raises(MpisgdError, match=r"raw: a folder without shards \(\*\.h5\) \(it holds train.svm\)"):
        resolve_shards([str(tmp_path / "raw")])
    with pytest.raises(MpisgdError, match=r"a folder without shards \(\*\.h5\) of its own: give one of "
                       r"its folders of shards \(A, B\)"):
        resolve_shards([str(tmp_path)])
    # shards without a run id (written before run ids): taken as named, duplicates refused
    import h5py

    for path in a:
        with h5py.File(path, "a") as f:
            del f.attrs["prep_run"]
    assert resolve_shards(a[:2]) == a[:2]
    with pytest.raises(MpisgdError, match="is named twice"):
        resolve_shards(a[:2] + a[:1])


def test_train_and_eval_refuse_what_is_not_a_shard_set(data, tmp_path):
    train, test, shards, _ = data
    model = tmp_path / "m.h5"
    assert main(["fit", str(train), "-o", str(model), "--epochs", "1", "--normalize"]) == 0
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a9a.bz2").write_bytes(b"BZh91AY&SY")
    for bad, message in ((train, "not a shard (not an HDF5 file; LIBSVM or VW text?): make shards "
                          "with `mpisgd prep INPUT --out DIR`"),
                         (tmp_path / "raw", "a folder without shards (*.h5) (it holds a9a.bz2): make "
                          "shards with `mpisgd prep")):
        done = cli("train", bad, "--out", tmp_path / "run", "-q")
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    one = sorted(str(p) for p in shards.glob("*.h5"))[0]
    done = cli("eval", model, one, one)
    assert done.returncode == 2 and f"{one} is named twice" in done.stderr
    done = cli("eval", model, one)
    assert done.returncode == 2 and "incomplete shard set" in done.stderr
    done = cli("eval", model, shards)  # the folder: the whole set
    assert done.returncode == 0 and "# data  2 shards" in done.stdout


@needs_mpiexec
def test_train_takes_a_folder_and_refuses_a_stale_set(data, tmp_path):
    train, _, shards, testshards = data
    done = mpisgd(2, "train", shards, "--test", testshards, "--out", tmp_path / "run", "-q")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["online"]["examples"] == 400 and report["heldout"]["examples"] == 200
    # a stale set: shard 1 replaced by shard 1 of another prep run
    assert main(["prep", str(train), "--shards", "2", "--normalize", "--out", str(tmp_path / "other")]) == 0
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    os.link(shards / "train-00000.h5", mixed / "train-00000.h5")
    os.link(tmp_path / "other" / "train-00001.h5", mixed / "train-00001.h5")
    done = mpisgd(2, "train", mixed, "--out", tmp_path / "run2", "-q")
    assert done.returncode != 0 and "come from different `mpisgd prep` runs" in done.stderr
    assert str(mixed / "train-00000.h5") in done.stderr and str(mixed / "train-00001.h5") in done.stderr
    assert not (tmp_path / "run2" / "model.h5").exists()
    paths = sorted(shards.glob("*.h5"))
    done = mpisgd(2, "train", *paths, paths[0], "--out", tmp_path / "run3", "-q")
    assert done.returncode != 0 and f"SHARD {paths[0]} is named twice" in done.stderr


def test_predict_writes_labels_and_scores_and_load_model_preprocesses(data, tmp_path):
    import mpisgd
    from mpisgd.data.libsvm import load_svmlight

    train, test, _, testshards = data
    model_path = tmp_path / "m.h5"
    assert main(["fit", str(train), "--normalize", "--epochs", "3", "-o", str(model_path)]) == 0
    out = tmp_path / "p.csv"
    done = cli("predict", model_path, test, "-o", out)
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "label,score" and len(lines) == 201
    labels = np.array([float(line.split(",")[0]) for line in lines[1:]])
    scores = np.array([float(line.split(",")[1]) for line in lines[1:]])
    # load_model's predict takes the file's rows as they are and normalizes them itself
    model = mpisgd.load_model(model_path)
    X, y = load_svmlight(test, n_features=8)
    np.testing.assert_allclose(scores, model.decision_function(X), rtol=1e-12, atol=1e-15)
    assert np.array_equal(labels, model.predict(X)) and set(labels) <= {0.0, 1.0}
    assert np.array_equal(labels, np.where(scores > 0, 1.0, 0.0))
    evaluated = float(cli("eval", model_path, test).stdout.split("error=")[1].split("%")[0])
    assert 100 * np.mean(model.predict(X) != y) == pytest.approx(evaluated, abs=0.005)
    # the rows as given would score differently: the preprocessing is what makes the difference
    raw = model.decision_function(X, preprocessed=True)
    assert not np.allclose(raw, scores)
    # the same rows from the test shards, and the refusal to replace the output
    done = cli("predict", model_path, testshards, "-o", out)
    assert done.returncode == 2 and "already exists" in done.stderr
    assert cli("predict", model_path, testshards, "-o", out, "--overwrite").returncode == 0
    again = np.array([float(line.split(",")[1]) for line in out.read_text().splitlines()[1:]])
    np.testing.assert_allclose(again, scores, rtol=1e-6, atol=1e-9)  # float64 shards, prep's normalization


def test_predict_one_versus_rest_and_regression(tmp_path):
    rng = np.random.default_rng(1)
    rows = [(c, np.sort(10 * c + rng.choice(10, 3, replace=False))) for c in rng.integers(0, 3, 90)]
    multi = tmp_path / "multi.svm"
    multi.write_text("".join(f"{c + 1} " + " ".join(f"{j + 1}:1" for j in cols) + "\n" for c, cols in rows))
    assert main(["fit", str(multi), "--epochs", "3", "-o", str(tmp_path / "m.h5")]) == 0
    assert cli("predict", tmp_path / "m.h5", multi, "-o", tmp_path / "m.csv").returncode == 0
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0] == "label,score_1,score_2,score_3" and len(lines) == 91
    first = [float(v) for v in lines[1].split(",")]
    assert first[0] == 1 + int(np.argmax(first[1:]))
    reg = tmp_path / "reg.svm"
    reg.write_text("".join(f"{c + 0.5} " + " ".join(f"{j + 1}:1" for j in cols) + "\n" for c, cols in rows))
    assert main(["fit", str(reg), "--loss", "squared", "--epochs", "2", "-o", str(tmp_path / "r.h5")]) == 0
    done = cli("predict", tmp_path / "r.h5", reg, "-o", "-")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == "score" and len(lines) == 91
    float(lines[1])


def vw(path, m, seed):
    """VW text with named features: the label follows 'good' words."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)]
    lines = []
    for _ in range(m):
        chosen = rng.choice(30, 4, replace=False)
        label = 1 if np.sum(chosen < 15) >= 2 else -1
        lines.append(f"{label} |words " + " ".join(f"{words[j]}:{rng.uniform(0.5, 2):.3f}" for j in chosen))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_vw_text_in_fit_eval_predict_with_the_hashing_of_prep(tmp_path):
    train, test = vw(tmp_path / "train.vw", 400, 0), vw(tmp_path / "test.vw", 100, 1)
    model = tmp_path / "m.h5"
    done = cli("fit", train, "-o", model)
    assert done.returncode == 2
    assert "train.vw:1: non-numeric feature index" in done.stderr and "--vw-hash-bits B" in done.stderr
    done = cli("fit", train, "--test", test, "--vw-hash-bits", 10, "--epochs", 3, "-o", model)
    assert done.returncode == 0, done.stderr
    fit_error = done.stdout.strip().splitlines()[-2].split("testError=")[1][:-2]
    m = LinearModel.load(model)
    assert m.n_features == 1024 and m.preprocessing["vw_hash_bits"] == 10
    done = cli("eval", model, test)
    assert done.returncode == 0 and f"error={fit_error}%" in done.stdout, (done.stdout, fit_error)
    # prep hashes the same way: the test shards score the same
    assert main(["prep", str(test), "--vw-hash-bits", "10", "--out", str(tmp_path / "T")]) == 0
    done = cli("eval", model, tmp_path / "T")
    assert done.returncode == 0 and f"error={fit_error}%" in done.stdout
    done = cli("predict", model, test, "-o", "-")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 101


@needs_mpiexec
def test_train_test_vw_is_hashed_like_the_shards_and_checked_before_learning(tmp_path):
    train, test = vw(tmp_path / "train.vw", 400, 0), vw(tmp_path / "test.vw", 100, 1)
    assert main(["prep", str(train), "--vw-hash-bits", "10", "--shards", "2", "--out", str(tmp_path / "S")]) == 0
    assert main(["prep", str(test), "--vw-hash-bits", "10", "--out", str(tmp_path / "T")]) == 0
    out = tmp_path / "run"
    done = mpisgd(2, "train", tmp_path / "S", "--test", test, "--out", out, "--epochs", 3, "-q")
    assert done.returncode == 0, done.stderr
    heldout = json.loads((out / "report.json").read_text())["heldout"]
    model = LinearModel.load(out / "model.h5")
    assert model.preprocessing["vw_hash_bits"] == 10 and heldout["examples"] == 100
    from mpisgd.evaluation import score

    assert score(model, str(tmp_path / "T"))["error"] == heldout["error"] < 0.3
    bad = tmp_path / "bad.vw"
    bad.write_text("1 |f w1:1\n-1 w2:1\n")
    for path, message in ((bad, f"--test {bad}:2: missing '|'"),
                          (tmp_path / "none.vw", f"--test {tmp_path / 'none.vw'}: no such file")):
        done = mpisgd(2, "train", tmp_path / "S", "--test", path, "--out", tmp_path / "run2")
        assert done.returncode != 0 and message in done.stderr, done.stderr
        assert "rounds" not in done.stderr and not (tmp_path / "run2" / "model.h5").exists()


def test_multiclass_rule_fit_one_versus_rest_prep_says_why_shards_are_binary(tmp_path):
    three = tmp_path / "three.svm"
    three.write_text("".join(f"{c} {c}:1 {c + 3}:0.5\n" for c in (1, 2, 3) * 20))
    done = cli("fit", three, "--epochs", 2, "-o", tmp_path / "m.h5")
    assert done.returncode == 0 and "one-versus-rest over 3: 1, 2, 3" in done.stdout
    done = cli("prep", three, "--out", tmp_path / "S")
    assert done.returncode == 2
    assert "three.svm:2: label is not a binary class (expected -1/+1, or 0/1) ('2'); shards hold one " \
        "binary task, as `mpisgd train` learns one linear model: train 3 or more classes " \
        "one-versus-rest in one process with `mpisgd fit`" in done.stderr, done.stderr
    assert not (tmp_path / "S").exists()
