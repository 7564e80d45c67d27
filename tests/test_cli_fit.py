"""`mpisgd fit` and `mpisgd eval` in one process, on small LIBSVM files."""

import bz2
import gzip

import numpy as np
import pytest

from mpisgd.cli import main
from mpisgd.model import LinearModel


def libsvm_text(m=200, n=6, seed=0, labels=(-1, 1)):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=n)
    lines = []
    for _ in range(m):
        cols = np.sort(rng.choice(n, size=3, replace=False))
        vals = rng.normal(size=3)
        label = labels[1] if vals @ w[cols] > 0 else labels[0]
        lines.append(f"{label} " + " ".join(f"{c + 1}:{v:.6f}" for c, v in zip(cols, vals)))
    return "\n".join(lines) + "\n"


@pytest.fixture
def files(tmp_path):
    train = tmp_path / "train.svm.gz"
    with gzip.open(train, "wt") as f:
        f.write(libsvm_text(seed=0))
    test = tmp_path / "test.svm.bz2"
    with bz2.open(test, "wt") as f:
        f.write(libsvm_text(m=80, seed=0))
    return train, test


def test_fit_prints_config_and_epochs_then_eval(files, tmp_path, capsys):
    train, test = files
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "--test", str(test), "-o", str(out), "--epochs", "3",
                 "--loss", "log", "--lambda", "1e-3"]) == 0
    text = capsys.readouterr().out
    assert text.index("resolved configuration") < text.index("# Using eta0=")
    assert "schedule         xu" in text and "labels    -1 -> -1, 1 -> +1" in text
    assert text.count("--------- Epoch") == 3 and "testError=" in text
    model = LinearModel.load(out)
    assert model.loss == "log" and model.meta["lambda"] == 1e-3
    assert model.meta["algorithm"] == "asgd" and model.meta["epochs"] == 3
    assert main(["eval", str(out), str(test)]) == 0
    assert "error=" in capsys.readouterr().out


def test_zero_one_labels_are_mapped_and_reported(tmp_path, capsys):
    train = tmp_path / "t.svm"
    train.write_text(libsvm_text(labels=(0, 1)))
    assert main(["fit", str(train), "-o", str(tmp_path / "m.h5"), "--epochs", "1",
                 "--algorithm", "dekel-casgd"]) == 0
    assert "labels    0 -> -1, 1 -> +1" in capsys.readouterr().out
    model = LinearModel.load(tmp_path / "m.h5")
    assert model.meta["classes"] == [0, 1] and model.meta["label_map"] == {"-1": 0, "+1": 1}
    assert main(["eval", str(tmp_path / "m.h5"), str(train)]) == 0


@pytest.mark.parametrize(
    "content,args,message",
    [
        (libsvm_text().replace("1:", "1:nan", 1), [], "train.svm"),
        (libsvm_text(labels=(1, 1)), [], "only one class"),
        ("", [], "no examples"),
        (libsvm_text(), ["--algorithm", "dekel-sgd", "--lambda", "0"], "must be > 0"),
        (libsvm_text(), ["--schedule", "optimal", "--lambda", "0"], "must be > 0"),
        (libsvm_text(), ["--loss", "squared", "--schedule", "constant", "--eta0", "1e6",
                         "--lambda", "0", "--epochs", "30"], "diverged"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_no_model(tmp_path, capsys, content, args,
                                                        message):
    train = tmp_path / "train.svm"
    train.write_text(content)
    if "diverged" in message:  # a regression target that blows up with a huge step
        train.write_text(content.replace("-1 ", "-100 ").replace("\n1 ", "\n100 "))
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "-o", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [train]


def test_unknown_loss_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "x.svm", "--loss", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_eval_rejects_more_features_than_the_model(files, tmp_path, capsys):
    train, _ = files
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "-o", str(out), "--epochs", "1"]) == 0
    wide = tmp_path / "wide.svm"
    wide.write_text("1 1:1 50:2\n-1 2:1\n")
    assert main(["eval", str(out), str(wide)]) == 2
    assert "wide.svm" in capsys.readouterr().err


def test_one_versus_rest_with_sgdqn_and_l1_prints_every_bias_and_nonzeros(tmp_path, capsys):
    train = tmp_path / "t.svm"
    train.write_text(libsvm_text(labels=(1, 2)) + libsvm_text(seed=1, labels=(3, 2)))
    for args in (["--algorithm", "sgdqn", "--lambda", "1e-3"],
                 ["--algorithm", "sgd", "--penalty", "l1", "--lambda", "1e-2"]):
        out = tmp_path / f"{args[1]}.h5"
        assert main(["fit", str(train), "-o", str(out), "--epochs", "2", *args]) == 0
        text = capsys.readouterr().out
        assert "one-versus-rest over 3: 1, 2, 3" in text
        last = [line for line in text.splitlines() if line.startswith("wNorm=")][-1]
        model = LinearModel.load(out)
        assert model.coef.shape == (3, 6)
        biases = last.split("wBias=[")[1].split("]")[0].split()
        np.testing.assert_allclose([float(b) for b in biases], model.intercept, rtol=1e-4)
        assert last.endswith(f"wNonzeros={np.count_nonzero(model.coef)}/18")
    assert main(["fit", str(train), "-o", str(tmp_path / "x.h5"), "--penalty", "l0"]) == 2
    assert "unknown penalty 'l0'; choose one of l2, l1, elasticnet" in capsys.readouterr().err
