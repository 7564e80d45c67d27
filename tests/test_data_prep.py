"""``mpisgd prep``: conversions and their options, VW and .npz inputs,
synthetic streams, and bad input through the CLI (exit code 2, a message
naming file and line, nothing left behind)."""

import bz2
import gzip
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from helpers.data import real_data, small_chunks

from mpisgd.cli import main
from mpisgd.data.libsvm import load_svmlight, write_svmlight
from mpisgd.data.shard import open_shard



def _read(paths):
    """All rows of the shards, concatenated: (csr, y, per-shard attrs)."""
    Xs, ys, attrs = [], [], []
    for p in paths:
        with open_shard(p, verify=True) as s:
            indptr, indices, data, y = s.read(0, s.n_rows)
            Xs.append(sp.csr_matrix((data, indices, indptr), shape=(s.n_rows, s.n_features)))
            ys.append(y)
            attrs.append(s.attrs)
    return Xs, ys, attrs


def _input(tmp_path, rows=500, n=40, seed=0, labels=(-1, 1)):
    rng = np.random.default_rng(seed)
    X = sp.random(rows, n, density=0.15, format="csr", random_state=seed)
    z = rng.standard_normal(X.nnz)
    X.data = np.sign(z) * (np.floor(np.abs(z) * 8) + 1) / 8  # exact in text, never 0
    X.sort_indices()
    y = rng.choice(labels, rows).astype(float)
    p = tmp_path / "in.svm"
    write_svmlight(str(p), X, y)
    return p, X, y


def _files(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_round_robin_and_contiguous(tmp_path):
    p, X, y = _input(tmp_path)
    out = tmp_path / "out"
    assert main(["prep", str(p), "--out", str(out), "--shards", "3", "--n-features", "45"]) == 0
    assert _files(out) == ["in-00000.h5", "in-00001.h5", "in-00002.h5", "in.json"]
    Xs, ys, attrs = _read([out / f"in-{k:05d}.h5" for k in range(3)])
    for k in range(3):  # round-robin: global row j is row j // 3 of shard j % 3
        assert Xs[k].shape[1] == 45 and (Xs[k][:, :40] != X[k::3]).nnz == 0
        assert np.array_equal(ys[k], y[k::3])
        assert attrs[k]["shard_index"] == k and attrs[k]["shard_count"] == 3
        assert json.loads(attrs[k]["label_mapping"]) == {"-1": -1, "1": 1}
        assert json.loads(attrs[k]["command"])["prep"]["shards"] == 3
    manifest = json.loads((out / "in.json").read_text())
    assert manifest["n_features"] == 45 and manifest["rows"] == 500
    out = tmp_path / "contiguous"
    assert main(["prep", str(p), "--out", str(out), "--shards", "3", "--layout",
                 "contiguous", "--name", "c"]) == 0
    Xs, ys, _ = _read([out / f"c-{k:05d}.h5" for k in range(3)])
    assert [x.shape[0] for x in Xs] == [166, 167, 167]
    assert all(x.shape[1] == 40 for x in Xs)  # one feature count for every shard
    assert (sp.vstack(Xs) != X).nnz == 0 and np.array_equal(np.concatenate(ys), y)


def test_shuffle_split_normalize_float32(tmp_path):
    p, X, y = _input(tmp_path, rows=800)
    out = tmp_path / "out"
    args = ["prep", str(p), "--out", str(out), "--shards", "2", "--shuffle-seed", "7",
            "--test-fraction", "0.25", "--test-shards", "2", "--normalize", "--dtype", "float32"]
    assert main(args) == 0
    names = _files(out)
    assert names == ["in-test-00000.h5", "in-test-00001.h5", "in-train-00000.h5",
                     "in-train-00001.h5", "in.json"]
    Xs, ys, attrs = _read([out / n for n in names[:4]])
    R = sp.vstack(Xs).tocsr()
    assert R.shape[0] == 800 and 150 < sum(x.shape[0] for x in Xs[:2]) < 250
    norms = np.sqrt(np.asarray(R.multiply(R).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms[norms > 0], 1.0, rtol=1e-6)
    # Same rows (normalized) as a multiset; the order is shuffled.
    Xn = sp.diags(1 / np.maximum(np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel()),
                                 1e-300)) @ X
    Xn = Xn.tocsr()
    Xn.sort_indices()
    want = {}
    for r in range(Xn.shape[0]):
        row = Xn.getrow(r)
        want.setdefault(tuple(row.indices), []).append(row.data)
    for r in range(R.shape[0]):
        row = R.getrow(r)
        cands = want[tuple(row.indices)]
        k = next(k for k, c in enumerate(cands) if np.allclose(c, row.data, rtol=1e-6))
        cands.pop(k)
    assert not np.array_equal(np.concatenate(ys[2:]), y[: sum(x.shape[0] for x in Xs[2:])])
    assert attrs[2]["split"] == "train" and attrs[0]["split"] == "test"
    # Deterministic: the same command gives the same shards.
    again = tmp_path / "again"
    assert main(args[:3] + [str(again)] + args[4:]) == 0
    Xa, ya, _ = _read([again / n for n in names[:4]])
    assert all((a != b).nnz == 0 for a, b in zip(Xa, Xs))
    assert all(np.array_equal(a, b) for a, b in zip(ya, ys))


def test_zero_one_labels_are_mapped(tmp_path, capsys):
    p, X, y = _input(tmp_path, labels=(0, 1))
    out = tmp_path / "out"
    assert main(["prep", str(p), "--out", str(out)]) == 0
    assert "labels {0, 1} mapped to {-1, +1}" in capsys.readouterr().out
    _, ys, attrs = _read([out / "in-00000.h5"])
    assert np.array_equal(ys[0], np.where(y == 0, -1.0, 1.0))
    assert json.loads(attrs[0]["label_mapping"]) == {"0": -1, "1": 1}
    p.write_text("3.5 1:1\n-2 2:1\n")
    out = tmp_path / "regression"
    assert main(["prep", str(p), "--out", str(out), "--task", "regression", "--name", "r"]) == 0
    assert np.array_equal(_read([out / "r-00000.h5"])[1][0], [3.5, -2])


def test_reports_index_base(tmp_path, capsys):
    p = tmp_path / "z.svm"
    p.write_text("1 0:1 2:1\n-1 1:1\n")
    assert main(["prep", str(p), "--out", str(tmp_path / "o")]) == 0
    assert "zero-based (auto-detected: smallest index is 0)" in capsys.readouterr().out


def test_crlf_blank_lines_unsorted_and_qid_are_accepted(tmp_path, capsys):
    p = tmp_path / "ok.svm"
    p.write_bytes(b"1 qid:3 3:1 1:2\r\n\r\n# comment\r\n-1 2:1.5\r\n")
    out = tmp_path / "out"
    assert main(["prep", str(p), "--out", str(out)]) == 0
    assert "sorted the indices of 1 rows" in capsys.readouterr().out
    Xs, ys, _ = _read([out / "ok-00000.h5"])
    assert Xs[0].toarray().tolist() == [[2, 0, 1], [0, 1.5, 0]] and ys[0].tolist() == [1, -1]


BAD = [
    ("1 1:1\n-1 2:x\n", [], "bad.svm:2: non-numeric feature value"),
    ("1 1:1\n-1 x:1\n", [], "bad.svm:2: non-numeric feature index"),
    ("1 1:1\n-1 2\n", [], "bad.svm:2: missing ':'"),
    ("1 1:1\n-1 0:1\n", ["--zero-based", "false"], "bad.svm:2: feature index 0 in a one-based"),
    ("1 1:1\n-1 -4:1\n", [], "bad.svm:2: negative feature index"),
    ("1 1:1\n-1 9:1\n", ["--n-features", "5"], "bad.svm:2: feature index beyond n_features"),
    ("1 1:1\n-1 2:1 2:3\n", [], "bad.svm:2: duplicate feature index"),
    ("1 1:1\n-1 2:nan\n", [], "bad.svm:2: NaN or infinite value"),
    ("1 1:1\n-1 2:-inf\n", [], "bad.svm:2: NaN or infinite value"),
    ("1 1:1\nfoo 2:1\n", [], "bad.svm:2: unparseable label"),
    ("1 1:1\n2 2:1\n", [], "bad.svm:2: label is not a binary class"),
    ("1 1:1\n-1 1:1\n0 2:1\n", [], "bad.svm:3: more than two classes"),
    ("\n# nothing\n", [], "bad.svm: no examples"),
]


@pytest.mark.parametrize("body,extra,message", BAD)
def test_bad_input_fails_cleanly(tmp_path, capsys, body, extra, message):
    p = tmp_path / "bad.svm"
    p.write_text(body)
    out = tmp_path / "out"
    assert main(["prep", str(p), "--out", str(out), "--shards", "1"] + extra) == 2
    assert message in capsys.readouterr().err
    assert _files(out) == []


def test_bad_input_leaves_no_output_directory_prep_made(tmp_path):
    p = tmp_path / "bad.svm"
    p.write_text("1 1:1\n-1 2:x\n")
    assert main(["prep", str(p), "--out", str(tmp_path / "new" / "out")]) == 2
    assert os.listdir(tmp_path / "new") == []


def test_the_input_is_parsed_once(tmp_path):
    from mpisgd.data.convert import convert
    from mpisgd.data.sources import open_source

    p, X, y = _input(tmp_path)
    source = open_source(str(p), "libsvm", "auto", None, True)
    calls = []
    chunks = source.chunks
    source.chunks = lambda *a: calls.append(a) or chunks(*a)
    convert(source, str(tmp_path / "out"), "in", n_shards=2, test_fraction=0.2, log=lambda s: 0)
    assert len(calls) == 1
    Xs, ys, _ = _read(sorted((tmp_path / "out").glob("in-*.h5")))
    assert sum(len(v) for v in ys) == len(y)


def test_plain_text_goes_into_the_shards_as_parsed(tmp_path):
    """Plain LIBSVM text without a shuffle: counted first, then each parsed
    block written into the shards at once (no binary piece of the rows), the
    same shards as the piece's way (gzip input)."""
    from mpisgd.data.convert import convert
    from mpisgd.data.sources import open_source

    p, X, y = _input(tmp_path, rows=2000)
    source = small_chunks(open_source(str(p), "libsvm", "auto", None, True))
    out = tmp_path / "out"
    seen = []
    chunks = source.chunks

    def spy(*a):
        for chunk in chunks(*a):
            yield chunk
            seen.append((_files(out / ".in.prep-tmp"), [n for n in _files(out) if ".h5." in n]))

    source.chunks = spy
    convert(source, str(out), "in", n_shards=3, test_fraction=0.2, test_shards=2, log=lambda s: 0)
    assert len(seen) > 10
    assert all(tmp == ["parsed.000000.lens"] and len(shards) == 5 for tmp, shards in seen)
    with gzip.open(tmp_path / "in.svm.gz", "wb") as f:
        f.write(p.read_bytes())
    convert(open_source(str(tmp_path / "in.svm.gz")), str(tmp_path / "gz"), "in", n_shards=3,
            test_fraction=0.2, test_shards=2, log=lambda s: 0)
    names = [n for n in _files(out) if n.endswith(".h5")]
    assert len(names) == 5 and names == [n for n in _files(tmp_path / "gz") if n.endswith(".h5")]
    for n in names:
        a, b = _read([out / n]), _read([tmp_path / "gz" / n])
        assert (a[0][0] != b[0][0]).nnz == 0 and np.array_equal(a[1][0], b[1][0])


@pytest.mark.parametrize("bad,message", [("2:x", "non-numeric feature value"),
                                         ("2:1 2:1", "duplicate feature index"),
                                         ("x:1", "non-numeric feature index")])
def test_a_bad_line_after_rows_were_written_leaves_nothing(tmp_path, bad, message):
    from mpisgd.data.convert import convert
    from mpisgd.data.sources import open_source
    from mpisgd.errors import MpisgdError

    p, X, y = _input(tmp_path, rows=2000)
    lines = p.read_text().split("\n")
    lines[1900] = "1 " + bad
    p.write_text("\n".join(lines))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(MpisgdError, match=rf"in\.svm:1901: {message}"):
        convert(small_chunks(open_source(str(p))), str(out), "in", n_shards=2, log=lambda s: 0)
    assert _files(out) == []


@pytest.mark.parametrize("opener,ext", [(gzip.open, ".gz"), (bz2.open, ".bz2")])
def test_truncated_compressed_input(tmp_path, capsys, opener, ext):
    p, _, _ = _input(tmp_path, rows=3000)
    packed = tmp_path / f"in.svm{ext}"
    with opener(packed, "wb") as f:
        f.write(p.read_bytes())
    raw = packed.read_bytes()
    packed.write_bytes(raw[: len(raw) // 2])
    out = tmp_path / "out"
    assert main(["prep", str(packed), "--out", str(out)]) == 2
    assert f"in.svm{ext}: truncated or corrupt" in capsys.readouterr().err
    assert _files(out) == []


def test_missing_input(tmp_path, capsys):
    assert main(["prep", str(tmp_path / "none.svm"), "--out", str(tmp_path / "o")]) == 2
    assert "none.svm: input not found" in capsys.readouterr().err


def test_npz_input(tmp_path):
    _, X, y = _input(tmp_path)
    p = tmp_path / "m.npz"
    np.savez(p, data=X.data, indices=X.indices, indptr=X.indptr, shape=X.shape, format="csr",
             y=y)
    out = tmp_path / "out"
    assert main(["prep", str(p), "--out", str(out), "--shards", "2", "--layout",
                 "contiguous"]) == 0
    Xs, ys, _ = _read([out / "m-00000.h5", out / "m-00001.h5"])
    assert (sp.vstack(Xs) != X).nnz == 0 and np.array_equal(np.concatenate(ys), y)


def test_vw_input(tmp_path, capsys):
    p = tmp_path / "a.vw"
    p.write_text("1 |f 1:0.5 3:2\n-1 2.0 'tag|f 2:1 4\n")
    out = tmp_path / "out"
    assert main(["prep", str(p), "--out", str(out)]) == 0
    Xs, ys, _ = _read([out / "a-00000.h5"])
    assert Xs[0].toarray().tolist() == [[0.5, 0, 2, 0], [0, 1, 0, 1]] and ys[0].tolist() == [1, -1]
    out = tmp_path / "hashed"
    assert main(["prep", str(p), "--out", str(out), "--vw-hash-bits", "4", "--name", "h"]) == 0
    Xs, _, _ = _read([out / "h-00000.h5"])
    assert Xs[0].shape == (2, 16) and Xs[0].nnz == 4
    p.write_text("1 |f 1:1\n-1 |f a:1\n")
    assert main(["prep", str(p), "--out", str(tmp_path / "x"), "--name", "x"]) == 2
    assert "a.vw:2: non-numeric feature index ('a:1'): VW feature names that are not integers " \
        "need hashing (--vw-hash-bits B)" in capsys.readouterr().err


@pytest.mark.parametrize("body,message", [
    ("1 |f 1:1\n-1 2:1\n", "a.vw:2: missing '|'"),
    ("1 |f 1:1\n\n-1 |a 2:1 |b 3:1\n", "a.vw:3: more than one namespace"),
    ("1 |f 1:1\n-1 |f 2:x\n", "a.vw:2: non-numeric feature value"),
])
def test_bad_vw_input(tmp_path, capsys, body, message):
    p = tmp_path / "a.vw"
    p.write_text(body)
    out = tmp_path / "out"
    assert main(["prep", str(p), "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert _files(out) == []


def test_vw_and_libsvm_copies_of_rcv1_agree(tmp_path):
    d = real_data("rcv1_ccat_subset")
    out = tmp_path / "out"
    for f, name in (("rcv1_small_test.vw.bz2", "vw"), ("rcv1_small_test.svm.bz2", "svm")):
        assert main(["prep", str(d / f), "--out", str(out / name), "--name", name,
                     "--n-features", "47236"]) == 0
    (Xv,), (yv,), _ = _read([out / "vw" / "vw-00000.h5"])
    (Xs,), (ys,), _ = _read([out / "svm" / "svm-00000.h5"])
    X, y = load_svmlight(d / "rcv1_small_test.svm.bz2", n_features=47236)
    assert (Xv != Xs).nnz == 0 and (Xs != X).nnz == 0 and np.array_equal(yv, y)


def test_synthetic_shards(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["prep", "--synthetic", "disjunction", "--learners", "3", "--rounds", "200",
                 "--features", "30", "--drift-prob", "0.01", "--seed", "2", "--out",
                 str(out)]) == 0
    assert "drifts after rounds" in capsys.readouterr().out
    assert _files(out) == ["disjunction-000.h5", "disjunction-001.h5", "disjunction-002.h5"]
    Xs, _, attrs = _read([out / f for f in _files(out)])
    assert all(x.shape == (200, 30) for x in Xs)
    assert json.loads(attrs[0]["stream"])["seed"] == 2


def test_group_matches_a_python_grouping():
    """convert._group (pass 2's routing copy) against rows regrouped one by one."""
    from mpisgd.data.convert import _group

    rng = np.random.default_rng(3)
    X = sp.random(300, 50, density=0.1, format="csr", random_state=4)
    X.indices += 1  # one-based, as parsed
    y = rng.choice([-1.0, 1.0], 300)
    key = rng.integers(0, 5, 300)
    ip, ix, d, yw, order, rows, ents = _group(X.indptr.astype(np.int64), X.indices.astype(np.int32),
                                              X.data, y, key, 6, 1)
    expect = [r for k in range(6) for r in range(300) if key[r] == k]  # stable, by key
    assert order.tolist() == expect
    assert rows.tolist() == [0, *np.cumsum(np.bincount(key, minlength=6)).tolist()]
    for q, r in enumerate(expect):
        a, b = X.indptr[r], X.indptr[r + 1]
        assert ix[ip[q] : ip[q + 1]].tolist() == (X.indices[a:b] - 1).tolist()
        assert d[ip[q] : ip[q + 1]].tolist() == X.data[a:b].tolist()
        assert yw[q] == y[r]
    for k in range(6):
        assert ents[k] == ip[rows[k]] and ents[k + 1] == ip[rows[k + 1]]
