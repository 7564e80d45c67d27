"""LIBSVM parsing: the numba byte parser against the naive line parser and
scikit-learn, compressed inputs, byte ranges, and every kind of bad line."""

import bz2
import gzip
import lzma

import numpy as np
import pytest
from helpers.data import real_data

from mpisgd.data import libsvm, textio
from mpisgd.errors import MpisgdError
from naive import naive_csr, naive_parse_svmlight



def _random_text(rng, rows=300, n=50, crlf=False):
    """LIBSVM text with comments, qids, blank lines, unsorted rows, odd floats."""
    lines = []
    for r in range(rows):
        k = rng.integers(0, 8)
        idx = rng.choice(np.arange(1, n + 1), size=k, replace=False)
        if r % 3:
            idx.sort()
        vals = [repr(float(v)) for v in rng.standard_normal(k) * 10.0 ** rng.integers(-8, 8, k)]
        vals = [v if j % 4 else f"{float(v):.6e}" for j, v in enumerate(vals)]
        feats = " ".join(f"{i}:{v}" for i, v in zip(idx, vals))
        label = ["-1", "+1", "1", "-1.0"][r % 4]
        qid = f" qid:{r // 10}" if r % 7 == 0 else ""
        comment = "  # a comment" if r % 5 == 0 else ""
        lines.append(f"{label}{qid} {feats}{comment}")
        if r % 11 == 0:
            lines.append("")
        if r % 13 == 0:
            lines.append("# only a comment")
    sep = "\r\n" if crlf else "\n"
    return sep.join(lines) + sep


@pytest.mark.parametrize("crlf", [False, True])
def test_matches_naive_parser(tmp_path, crlf):
    text = _random_text(np.random.default_rng(1), crlf=crlf)
    p = tmp_path / "a.svm"
    p.write_text(text, newline="")
    X, y = libsvm.load_svmlight(p, n_features=60)
    rows, labels, zb = naive_parse_svmlight(text)
    assert not zb
    assert X.indptr.dtype == np.int64 and X.indices.dtype == np.int32
    assert X.data.dtype == np.float64 and y.dtype == np.float64
    np.testing.assert_array_equal(y, labels)
    np.testing.assert_array_equal(X.toarray(), naive_csr(rows, 60))  # bit-exact values
    assert X.has_sorted_indices


def test_small_chunks_and_long_lines(tmp_path):
    text = _random_text(np.random.default_rng(2), rows=200)
    text += "1 " + " ".join(f"{i}:{i / 7}" for i in range(1, 3000)) + "\n"  # longer than a chunk
    p = tmp_path / "a.svm"
    p.write_text(text)
    whole = list(libsvm.iter_parsed(str(p)))
    small = list(libsvm.iter_parsed(str(p), chunk_bytes=256))
    assert len(small) > len(whole)
    for k in (1, 2, 3):  # indices, data, labels
        np.testing.assert_array_equal(np.concatenate([part[k] for part in whole]),
                                      np.concatenate([part[k] for part in small]))
    lengths = [np.concatenate([np.diff(part[0]) for part in parts]) for parts in (whole, small)]
    np.testing.assert_array_equal(*lengths)
    assert sum(s[4].rows for s in small) == sum(s[4].rows for s in whole) == 201


def test_float_parsing_is_correctly_rounded(tmp_path):
    rng = np.random.default_rng(3)
    vals = np.concatenate([rng.standard_normal(400) * 10.0 ** rng.integers(-30, 30, 400),
                           [5e-324, 1.7976931348623157e308, 0.1, 1e22, 1e23, 123456789012345678]])
    toks = [repr(float(v)) for v in vals] + ["1.", ".5", "-0.0", "+2e+2", "0.000000000000000000001",
                                            "123456789012345678901234567890", "3.14159265358979323846",
                                            # the fast path's edges: 18 and 19 digits, 3 and 4 exponent digits
                                            "123456789.012345678", "1234567890.12345678", "9007199254740993",
                                            "1e022", "1E-022", "1e0022", "0.25e-0005", "000000000000000000001.5"]
    text = "".join(f"1 1:{t}\n" for t in toks)
    p = tmp_path / "f.svm"
    p.write_text(text)
    X, _ = libsvm.load_svmlight(p, n_features=1)
    expect = np.array([float(t) for t in toks])
    np.testing.assert_array_equal(X.toarray().ravel(), np.where(expect == 0, 0.0, expect))


@pytest.mark.parametrize("opener,ext", [(gzip.open, ".gz"), (bz2.open, ".bz2"),
                                        (lzma.open, ".xz")])
def test_compressed_inputs(tmp_path, opener, ext):
    text = _random_text(np.random.default_rng(4))
    plain = tmp_path / "a.svm"
    plain.write_text(text)
    packed = tmp_path / ("a.svm" + ext)
    with opener(packed, "wb") as f:
        f.write(text.encode())
    X1, y1 = libsvm.load_svmlight(plain)
    X2, y2 = libsvm.load_svmlight(packed)
    assert (X1 != X2).nnz == 0 and np.array_equal(y1, y2)
    # A truncated compressed file is an error naming it.
    data = packed.read_bytes()
    cut = tmp_path / ("cut.svm" + ext)
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(MpisgdError, match=r"cut\.svm.*truncated or corrupt"):
        libsvm.load_svmlight(cut)


def test_byte_ranges_tile_the_file(tmp_path):
    text = _random_text(np.random.default_rng(5), rows=120)
    p = tmp_path / "a.svm"
    p.write_text(text)
    size = textio.text_size(str(p))
    for parts in (1, 2, 3, 7, 50):
        got = b""
        for r in range(parts):
            lo, hi = size * r // parts, size * (r + 1) // parts
            for buf, n in textio.iter_line_chunks(str(p), lo, hi, chunk_bytes=64):
                got += bytes(buf[:n])
        assert got == text.encode(), parts


def test_zero_based_auto_and_explicit(tmp_path):
    p = tmp_path / "z.svm"
    p.write_text("1 0:1 3:2\n-1 2:5\n")
    X, _ = libsvm.load_svmlight(p)
    assert X.shape == (2, 4) and X[0, 0] == 1
    p.write_text("1 1:1 3:2\n-1 2:5\n")
    X, _ = libsvm.load_svmlight(p)
    assert X.shape == (2, 3) and X[0, 0] == 1  # one-based: index 1 is column 0
    X, _ = libsvm.load_svmlight(p, zero_based=True)
    assert X.shape == (2, 4) and X[0, 1] == 1
    X, _ = libsvm.load_svmlight(p, n_features=10)
    assert X.shape == (2, 10)


@pytest.mark.parametrize("name,nf", [("a9a/a9a.t.bz2", 123), ("w8a/w8a.t.bz2", 300),
                                     ("rcv1_ccat_subset/rcv1_small_test.svm.bz2", 47236)])
def test_real_data_matches_sklearn(name, nf):
    from sklearn.datasets import load_svmlight_file

    path = real_data(name)
    X, y = libsvm.load_svmlight(path, n_features=nf)
    X2, y2 = load_svmlight_file(str(path), n_features=nf)
    assert X.shape == X2.shape and (X != X2).nnz == 0
    np.testing.assert_array_equal(X.data, X2.data)
    np.testing.assert_array_equal(y, y2)


def test_writer_round_trip(tmp_path):
    import scipy.sparse as sp

    rng = np.random.default_rng(6)
    X = sp.random(200, 40, density=0.2, format="csr", random_state=7)
    X.data = rng.standard_normal(X.nnz) * 10.0 ** rng.integers(-5, 5, X.nnz)
    y = np.where(rng.random(200) < 0.5, -1.0, 1.0)
    p = tmp_path / "w.svm"
    libsvm.write_svmlight(str(p), X, y)
    X2, y2 = libsvm.load_svmlight(p, n_features=40)
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_allclose(X2.toarray(), X.toarray(), rtol=6e-7)  # 7 significant digits


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("mode", [("auto", None), ("auto", 60), (False, 60), (True, None)])
def test_counting_finds_what_the_parse_finds(tmp_path, crlf, mode):
    """iter_counted (values not read) against iter_parsed: the same row
    lengths and stats chunk by chunk, on good text with comments, qids, blank
    lines, unsorted rows and a line longer than a chunk."""
    text = _random_text(np.random.default_rng(4), rows=400, crlf=crlf)
    text = text.replace("-1.0 ", "0 ", 3)  # labels 0 too: their first line is recorded
    text += "1 " + " ".join(f"{i}:{i / 7}" for i in range(1, 61)) + "\n"  # raw index 60 (n_features)
    p = tmp_path / "a.svm"
    p.write_text(text, newline="")
    for start, stop in ((0, None), (1000, 9000)):
        parsed = list(libsvm.iter_parsed(str(p), *mode, start, stop, binary=True, chunk_bytes=512))
        counted = list(libsvm.iter_counted(str(p), *mode, start, stop, binary=True, chunk_bytes=512))
        assert len(parsed) == len(counted) > 2
        for (indptr, *_, ps), (lens, cs, ok) in zip(parsed, counted):
            assert ok
            np.testing.assert_array_equal(lens, np.diff(indptr))
            assert [getattr(cs, k) for k in vars(cs) if k not in ("sorted_rows", "qids")] == \
                [getattr(ps, k) for k in vars(ps) if k not in ("sorted_rows", "qids")]


@pytest.mark.parametrize("body,stops", [
    ("one 3:1\n", True), ("2 3:1\n", True), ("1 x:1\n", True), ("1 3\n", True),
    ("1 -2:1\n", True), ("1 0:1\n", True), ("1 99:1\n", True),
    ("1 3:abc\n", False), ("1 3:nan\n", False), ("1 3:1 3:2\n", False),  # values and repeats: the parse's
])
def test_counting_stops_at_a_label_or_index_the_parser_rejects(tmp_path, body, stops):
    p = tmp_path / "bad.svm"
    p.write_text("1 1:1\n\n-1 2:1 # fine\n" + body + "1 4:1\n")
    (lens, stats, ok), = libsvm.iter_counted(str(p), False, 60, binary=True)
    assert ok is not stops
    assert stats.rows == (2 if stops else 4)
    assert lens.tolist() == [1, 1, body.count(":"), 1][: stats.rows]


BAD = [
    ("1 3:abc\n", "non-numeric feature value"),
    ("1 x:1\n", "non-numeric feature index"),
    ("1 3\n", "missing ':'"),
    ("1 -2:1\n", "negative feature index"),
    ("1 3:nan\n", "NaN or infinite"),
    ("1 3:inf\n", "NaN or infinite"),
    ("1 3:1e999\n", "NaN or infinite"),
    ("1 3:1 3:2\n", "duplicate feature index"),
    ("one 3:1\n", "unparseable label"),
]


@pytest.mark.parametrize("body,message", BAD)
def test_bad_lines_name_file_and_line(tmp_path, body, message):
    p = tmp_path / "bad.svm"
    p.write_text("1 1:1\n\n-1 2:1 # fine\n" + body)
    with pytest.raises(MpisgdError, match=rf"bad\.svm:4: {message}"):
        libsvm.load_svmlight(p)


def test_index_errors_depend_on_mode(tmp_path):
    p = tmp_path / "b.svm"
    p.write_text("1 1:1\n-1 0:1\n")
    with pytest.raises(MpisgdError, match=r"b\.svm:2: feature index 0 in a one-based file"):
        libsvm.load_svmlight(p, zero_based=False)
    p.write_text("1 1:1\n-1 5:1\n")
    with pytest.raises(MpisgdError, match=r"b\.svm:2: feature index beyond n_features"):
        libsvm.load_svmlight(p, n_features=4)
    libsvm.load_svmlight(p, n_features=5)  # one-based: 5 is the last feature
    p.write_text("1 0:1\n-1 5:1\n")
    with pytest.raises(MpisgdError, match=r"b\.svm:2: feature index beyond n_features"):
        libsvm.load_svmlight(p, n_features=5)  # zero-based (auto): 5 is one too many


def test_missing_file(tmp_path):
    with pytest.raises(MpisgdError, match="nothere.svm"):
        libsvm.load_svmlight(tmp_path / "nothere.svm")
