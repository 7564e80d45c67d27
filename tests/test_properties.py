"""Property-based tests (hypothesis) of everything that decodes outside
input: the LIBSVM parser, the shard reader and the wire decoder. Random and
mutated inputs must end in a clear ``MpisgdError`` or in a correct result
(the same as a slow, obviously correct twin here), never in another
exception, a crash or silently wrong numbers.

Examples: the hypothesis profile of tests/conftest.py ("ci" under CI=true,
"dev" locally) sets a budget per decoder, 10,000 and 1,000, shared among
its tests (``share``): the wire decoder's plain messages, its compressed
messages and its pairs blocks, the LIBSVM parser and the shard reader each
get the whole budget. CI runs this module in a step of its own, beside the
rest of the suite (``make test-properties``, .ci/run). Every case writes
its file to a tmpfs (/dev/shm) where there is one: the shard reader's cases
cost mostly h5py's per-call work, not the disk. A shard case that hangs
inside libhdf5 ends the run after ``HANG`` s (``check_read``).
"""

import os
import shutil
import tempfile

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mpisgd import wire  # noqa: E402
from mpisgd.errors import MpisgdError  # noqa: E402


def share(fraction):
    """Settings for a test that runs ``fraction`` of its decoder's examples."""
    return settings(max_examples=max(1, int(settings().max_examples * fraction)),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# -- wire ----------------------------------------------------------------------------


def naive_decode(buf, n):
    """The wire format of mpisgd/wire.py read field by field; None if invalid."""
    raw = bytes(buf)
    size = len(raw)
    z = [0.0] * (n + 2)
    if size == 16 + 8 * n:
        vals = np.frombuffer(raw, "<f8")
        alpha, bias, u = vals[0], vals[1], list(vals[2:])
        z[:n] = u
    elif size >= 16 and (size - 16) % 12 == 0 and size < 16 + 8 * n:
        m = (size - 16) // 12
        vals = np.frombuffer(raw[: 16 + 8 * m], "<f8")
        idx = [int(i) for i in np.frombuffer(raw[16 + 8 * m :], "<i4")]
        if any(not 0 <= i < n for i in idx) or any(b <= a for a, b in zip(idx, idx[1:])):
            return None
        alpha, bias = vals[0], vals[1]
        for i, v in zip(idx, vals[2:]):
            z[i] = v
    else:
        return None
    z[n], z[n + 1] = bias, alpha
    return np.array(z, dtype=np.float64)


def naive_encode(alpha, bias, u, scale, n):
    """The wire format of mpisgd/wire.py written field by field: the non-zeros
    of u (NaN included) as [α, b, values…] float64 then [indices…] int32 when
    12·nnz < 8·n, else [α, b, scale·u] float64 with +0.0 where u is zero."""
    u = [float(x) for x in u]  # Python floats: scale·u overflows to ±inf silently, as in the kernel
    idx = [j for j in range(n) if u[j] != 0.0]
    if 12 * len(idx) < 8 * n:
        head = np.array([alpha, bias] + [scale * u[j] for j in idx], "<f8").tobytes()
        return np.frombuffer(head + np.array(idx, "<i4").tobytes(), np.uint8)
    dense = [scale * u[j] if u[j] != 0.0 else 0.0 for j in range(n)]
    return np.frombuffer(np.array([alpha, bias] + dense, "<f8").tobytes(), np.uint8)


def check_decode(buf, n):
    expected = naive_decode(buf, n)
    if expected is None:
        with pytest.raises(MpisgdError, match="wire: "):
            wire.decode(buf, n)
    else:
        np.testing.assert_array_equal(wire.decode(buf, n), expected)  # NaN == NaN here


SPECIAL = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, 1.7976931348623157e308])


def message_of(seed):
    """(n, idx, vals, alpha, bias): a valid message's parts, from a seed
    (numpy draws them: cheaper than hypothesis draws, so more cases in the time)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 65))
    idx = np.flatnonzero(rng.random(n) < rng.random()).astype(np.int32)
    vals = rng.standard_normal(len(idx)) * 10.0 ** rng.integers(-300, 300, len(idx))
    odd = rng.random(len(idx)) < 0.1
    vals[odd] = rng.choice(SPECIAL, odd.sum())
    alpha, bias = rng.choice(SPECIAL) if rng.random() < 0.1 else rng.standard_normal(), rng.standard_normal()
    return n, idx, vals, float(alpha), float(bias)


def messages():
    return st.integers(0, 2**63).map(message_of)


def dense(idx, vals, n):
    u = np.zeros(n)
    u[idx] = vals
    return u


@share(0.2)
@given(messages(), st.sampled_from([1.0, -0.5, 3.0, 1e-300]))
def test_wire_encode_is_its_twin_and_round_trips(message, scale):
    """The message of scale·u has the twin's bytes, and decodes to scale·u."""
    n, idx, vals, alpha, bias = message
    u = dense(idx, vals, n)
    buf = wire.encode(alpha, bias, u, scale, n)
    assert buf.dtype == np.uint8 and buf.tobytes() == naive_encode(alpha, bias, u, scale, n).tobytes()
    with np.errstate(over="ignore"):
        expected = np.append(np.where(u != 0.0, scale * u, 0.0), [bias, alpha])
    np.testing.assert_array_equal(wire.decode(buf, n), expected)  # NaN == NaN here


@share(0.5)
@given(messages(), st.lists(st.tuples(st.sampled_from(["flip", "cut", "add", "idx"]), st.integers(0, 10**6),
                                      st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=4))
def test_wire_mutated_messages(message, mutations):
    """Bytes flipped, cut, added, or an index overwritten with any int32."""
    n, idx, vals, alpha, bias = message
    buf = bytearray(wire.encode(alpha, bias, dense(idx, vals, n), 1.0, n).tobytes())
    for kind, pos, value in mutations:
        if kind == "flip" and buf:
            buf[pos % len(buf)] ^= 1 << (value % 8)
        elif kind == "cut" and buf:
            del buf[pos % len(buf):]
        elif kind == "add":
            buf += bytes([value % 256]) * (1 + pos % 12)
        elif kind == "idx" and len(buf) >= 28 and (len(buf) - 16) % 12 == 0 and len(buf) < 16 + 8 * n:
            m = (len(buf) - 16) // 12
            at = 16 + 8 * m + 4 * (pos % m)
            buf[at : at + 4] = np.int32(value).tobytes()
    check_decode(np.frombuffer(bytes(buf), np.uint8), n)


@share(0.3)
@given(st.binary(max_size=600), st.integers(0, 80))
def test_wire_random_bytes(raw, n):
    check_decode(np.frombuffer(raw, np.uint8), n)


def test_wire_refuses_what_is_not_a_byte_buffer():
    with pytest.raises(MpisgdError, match="1-D uint8"):
        wire.decode(np.zeros(3, np.float64), 1)


# compressed messages (--compress) and the pairs blocks of a full sync

WIDTH = {"fp16": 2, "q8": 1}


def naive_decode_compressed(buf, n, compress):
    """The compressed format of mpisgd/wire.py read field by field; None if invalid."""
    raw, w = bytes(buf), WIDTH[compress]
    if len(raw) < 24:
        return None
    alpha, bias = np.frombuffer(raw[:16], "<f8")
    c = float(np.frombuffer(raw[16:20], "<f4")[0])
    m = int(np.frombuffer(raw[20:24], "<i4")[0])
    body = raw[24:]
    if not (np.isfinite(c) and c >= 0):
        return None

    def values(b):
        return [c * (v / 127 if compress == "q8" else float(v))
                for v in np.frombuffer(b, "<i1" if compress == "q8" else "<f2")]

    z = [0.0] * (n + 2)
    if m >= 0 and len(body) == (4 + w) * m:
        idx = [int(i) for i in np.frombuffer(body[: 4 * m], "<i4")]
        if any(not 0 <= i < n for i in idx) or any(b <= a for a, b in zip(idx, idx[1:])):
            return None
        for i, v in zip(idx, values(body[4 * m :])):
            z[i] = v
    elif m == -2 and len(body) >= (n + 7) // 8:
        nb = (n + 7) // 8
        bits = [(body[j // 8] >> (j % 8)) & 1 for j in range(8 * nb)]
        if any(bits[n:]) or sum(bits) * w != len(body) - nb:
            return None
        for i, v in zip([j for j in range(n) if bits[j]], values(body[nb:])):
            z[i] = v
    elif m == -1 and len(body) == w * n:
        z[:n] = values(body)
    else:
        return None
    z[n], z[n + 1] = bias, alpha
    return np.array(z, dtype=np.float64)


def check_decode_compressed(buf, n, compress):
    expected = naive_decode_compressed(buf, n, compress)
    if expected is None:
        with pytest.raises(MpisgdError, match="wire: "):
            wire.decode_compressed(buf, n, compress)
    else:
        np.testing.assert_array_equal(wire.decode_compressed(buf, n, compress), expected)


def compressed_of(seed):
    """(n, idx, vals, alpha, bias, compress, uniform): a valid compressed message's parts."""
    rng = np.random.default_rng(seed)
    n, idx, _vals, alpha, bias = message_of(seed)
    vals = rng.standard_normal(len(idx)) * 10.0 ** rng.integers(-30, 30)
    return n, idx, vals, alpha, bias, ("fp16", "q8")[seed % 2], rng.random(len(idx))


@share(0.2)
@given(st.integers(0, 2**63).map(compressed_of))
def test_wire_compressed_round_trip(message):
    """Decoded within one level of u, α and b exact, the size of model_nbytes."""
    n, idx, vals, alpha, bias, compress, uniform = message
    buf = wire.encode_compressed(alpha, bias, idx, vals, n, compress, uniform)
    assert len(buf) == wire.model_nbytes(len(idx), n, compress)
    z = wire.decode_compressed(buf, n, compress)
    check_decode_compressed(buf, n, compress)
    c = float(np.float32(np.abs(vals).max())) * (1 + 1e-7) if len(idx) else 0.0
    assert np.all(np.abs(z[idx] - vals) <= c / 127 + 1e-300)
    np.testing.assert_array_equal(z[[n, n + 1]], [bias, alpha])


@share(0.5)
@given(st.integers(0, 2**63).map(compressed_of),
       st.lists(st.tuples(st.sampled_from(["flip", "cut", "add", "head"]), st.integers(0, 10**6),
                          st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=4))
def test_wire_compressed_mutated_messages(message, mutations):
    """Bytes flipped, cut, added, or the layout word overwritten with any int32."""
    n, idx, vals, alpha, bias, compress, uniform = message
    buf = bytearray(wire.encode_compressed(alpha, bias, idx, vals, n, compress, uniform).tobytes())
    for kind, pos, value in mutations:
        if kind == "flip" and buf:
            buf[pos % len(buf)] ^= 1 << (value % 8)
        elif kind == "cut" and buf:
            del buf[pos % len(buf):]
        elif kind == "add":
            buf += bytes([value % 256]) * (1 + pos % 12)
        elif kind == "head" and len(buf) >= 24:
            buf[20:24] = np.int32(value % 4 - 2 if pos % 2 else value).tobytes()
    check_decode_compressed(np.frombuffer(bytes(buf), np.uint8), n, compress)


@share(0.3)
@given(st.binary(max_size=400), st.integers(0, 80), st.sampled_from(["fp16", "q8"]))
def test_wire_compressed_random_bytes(raw, n, compress):
    check_decode_compressed(np.frombuffer(raw, np.uint8), n, compress)


def naive_sum_blocks(raw, n, m):
    """Σz of pairs blocks read field by field; None if invalid."""
    size = 24 + 12 * m
    if len(raw) % size:
        return None
    total = np.zeros(n + 2)
    for b in range(len(raw) // size):
        block = raw[b * size : (b + 1) * size]
        head = np.frombuffer(block[: 24 + 8 * m], "<f8")
        count = head[2]
        if not (0 <= count <= m and count == int(count)):
            return None
        count = int(count)
        idx = [int(i) for i in np.frombuffer(block[24 + 8 * m :], "<i4")[:count]]
        if any(not 0 <= i < n for i in idx) or any(b2 <= a for a, b2 in zip(idx, idx[1:])):
            return None
        for i, v in zip(idx, head[3 : 3 + count]):
            total[i] += v
        total[n] += head[1]
        total[n + 1] += head[0]
    return total


@share(1.0)
@given(st.integers(0, 2**63), st.integers(0, 6), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)),
                                                        max_size=3))
def test_wire_pairs_blocks(seed, m, flips):
    """Valid blocks (3 ranks) with bits flipped: the twin's sum, or refused."""
    blocks = []
    for r in range(3):
        n, idx, vals, alpha, bias = message_of(seed + r)
        u = np.zeros(n)
        u[idx[:m]] = vals[:m]
        blocks.append(wire.encode_block(alpha, bias, u, m))
    n = 64
    raw = bytearray(np.concatenate(blocks).tobytes())
    for pos, bit in flips:
        raw[pos % len(raw)] ^= 1 << bit
    with np.errstate(invalid="ignore", over="ignore"):
        expected = naive_sum_blocks(bytes(raw), n, m)
    buf = np.frombuffer(bytes(raw), np.uint8)
    if expected is None:
        with pytest.raises(MpisgdError, match="wire: "):
            wire.sum_blocks(buf, n, m)
    else:
        np.testing.assert_array_equal(wire.sum_blocks(buf, n, m), expected)


def naive_union_of_blocks(raw, n, m):
    """S = ∪ S_l of partial sync index blocks read field by field; None if invalid."""
    size = 4 * (m + 1)
    if len(raw) % size:
        return None
    chosen = set()
    for b in range(len(raw) // size):
        block = [int(i) for i in np.frombuffer(raw[b * size : (b + 1) * size], "<i4")]
        count = block[0]
        if not 0 <= count <= m:
            return None
        idx = block[1 : 1 + count]
        if any(not 0 <= i < n for i in idx) or any(b2 <= a for a, b2 in zip(idx, idx[1:])):
            return None
        chosen.update(idx)
    return np.array(sorted(chosen), dtype=np.int64)


@share(1.0)
@given(st.integers(0, 2**63), st.integers(0, 6), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)),
                                                        max_size=3))
def test_wire_index_blocks(seed, m, flips):
    """Valid index blocks of a partial sync (3 ranks) with bits flipped: the twin's union, or refused."""
    n = 64
    blocks = []
    for r in range(3):
        rng = np.random.default_rng([seed, r])
        idx = np.sort(rng.choice(n, int(rng.integers(0, m + 1)), replace=False)).astype(np.int32)
        blocks.append(wire.fill_index_block(np.empty(m + 1, np.int32), idx, m))
    raw = bytearray(np.concatenate(blocks).tobytes())
    for pos, bit in flips:
        raw[pos % len(raw)] ^= 1 << bit
    expected = naive_union_of_blocks(bytes(raw), n, m)
    buf = np.frombuffer(bytes(raw), np.int32)
    if expected is None:
        with pytest.raises(MpisgdError, match="wire: "):
            wire.union_of_blocks(buf, n, m)
    else:
        np.testing.assert_array_equal(wire.union_of_blocks(buf, n, m), expected)


def naive_decode_partial(raw, n):
    """(z, ρ, S_l) of an uncompressed partial model message read field by field; None if invalid."""
    if len(raw) < 8:
        return None
    rho = float(np.frombuffer(raw[-8:], "<f8")[0])
    model = raw[:-8]
    if not (np.isfinite(rho) and rho >= 0) or len(model) < 16:
        return None
    alpha, bias = np.frombuffer(model[:16], "<f8")
    z, support = np.zeros(n + 2), np.zeros(n, bool)
    if len(model) == 16 + 8 * n:
        z[:n] = np.frombuffer(model[16:], "<f8")
        support[:] = True
    elif (len(model) - 16) % 12 == 0 and len(model) < 16 + 8 * n:
        count = (len(model) - 16) // 12
        vals = np.frombuffer(model[16 : 16 + 8 * count], "<f8")
        idx = [int(i) for i in np.frombuffer(model[16 + 8 * count :], "<i4")]
        if any(not 0 <= i < n for i in idx) or any(b <= a for a, b in zip(idx, idx[1:])):
            return None
        z[idx] = vals
        support[idx] = True
    else:
        return None
    if alpha != 1.0:
        return None
    z[n], z[n + 1] = bias, alpha
    return z, rho, support


@share(1.0)
@given(st.integers(0, 2**63), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=3),
       st.integers(-2, 2))
def test_wire_partial_model_messages(seed, flips, cut):
    """A valid partial model message (a violation or balance reply under --partial)
    with bits flipped and bytes cut or added: the twin's (z, ρ, S_l), or refused."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    idx = np.sort(rng.choice(n, int(rng.integers(0, n + 1)), replace=False)).astype(np.int32)
    vals = np.where(rng.random(len(idx)) < 0.2, 0.0, rng.standard_normal(len(idx)))  # zeros asked for, kept
    raw = bytearray(wire.encode_partial(float(rng.standard_normal()), idx, vals, float(rng.random()), n, "none")
                    .tobytes())
    for pos, bit in flips:
        raw[pos % len(raw)] ^= 1 << bit
    raw = raw[: len(raw) + cut] if cut < 0 else raw + bytes(cut)
    expected = naive_decode_partial(bytes(raw), n)
    buf = np.frombuffer(bytes(raw), np.uint8)
    if expected is None:
        with pytest.raises(MpisgdError, match="wire: "):
            wire.decode_partial(buf, n)
    else:
        part = wire.decode_partial(buf, n)
        np.testing.assert_array_equal(part.z, expected[0])
        assert part.rho == expected[1]
        np.testing.assert_array_equal(part.support, expected[2])


def naive_decode_result(raw, support, compress):
    """z of a partial balance result for the member of S_l = ``support``, read field by field; None if invalid."""
    n, idx = len(support), np.flatnonzero(support)
    head, width = (8, 8) if compress == "none" else (12, 1)
    if len(raw) != head + width * len(idx):
        return None
    z = np.zeros(n + 2)
    z[n], z[n + 1] = np.frombuffer(raw[:8], "<f8")[0], 1.0
    if compress == "none":
        z[idx] = np.frombuffer(raw[8:], "<f8")
        return z
    c = float(np.frombuffer(raw[8:12], "<f4")[0])
    if not (np.isfinite(c) and c >= 0):
        return None
    z[idx] = c * (np.frombuffer(raw[12:], "<i1").astype(np.float64) / 127)
    return z


@share(1.0)
@given(st.integers(0, 2**63), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=3),
       st.integers(-2, 2), st.sampled_from(["none", "q8"]))
def test_wire_partial_results(seed, flips, cut, compress):
    """A valid partial balance result (--partial: a member's own values on its S_l)
    with bits flipped and bytes cut or added: the twin's z, or refused."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    support = rng.random(n) < 0.4
    vals = rng.standard_normal(int(support.sum()))
    raw = bytearray(wire.encode_result(float(rng.standard_normal()), vals, compress,
                                       wire.uniforms([0], [seed % 1000], len(vals))[0]).tobytes())
    for pos, bit in flips:
        raw[pos % len(raw)] ^= 1 << bit
    raw = raw[: len(raw) + cut] if cut < 0 else raw + bytes(cut)
    expected = naive_decode_result(bytes(raw), support, compress)
    buf = np.frombuffer(bytes(raw), np.uint8)
    if expected is None:
        with pytest.raises(MpisgdError, match="wire: "):
            wire.decode_result(buf, support, n, compress)
    else:
        np.testing.assert_array_equal(wire.decode_result(buf, support, n, compress), expected)


@share(1.0)
@given(st.integers(0, 2**63), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=3),
       st.integers(-2, 2))
def test_wire_balance_requests(seed, flips, cut):
    """A balance request asking for S_B with bits flipped and bytes cut or added:
    its (results, S_B) read field by field, or refused."""
    rng = np.random.default_rng(seed)
    n = 50
    asked = np.sort(rng.choice(n, int(rng.integers(0, 8)), replace=False))
    raw = bytearray(wire.encode_request(int(rng.integers(0, 100)), asked).tobytes())
    for pos, bit in flips:
        raw[pos % len(raw)] ^= 1 << bit
    raw = raw[: len(raw) + cut] if cut < 0 else raw + bytes(cut)
    buf = np.frombuffer(bytes(raw), np.uint8)
    idx = [int(i) for i in np.frombuffer(bytes(raw[8:]), "<i4")] if len(raw) >= 8 and len(raw) % 4 == 0 else None
    if idx is None or any(not 0 <= i < n for i in idx) or any(b <= a for a, b in zip(idx, idx[1:])):
        with pytest.raises(MpisgdError, match="wire: "):
            wire.decode_request(buf, n)
    else:
        results, got = wire.decode_request(buf, n)
        assert results == int(np.frombuffer(bytes(raw[:8]), "<i8")[0]) and got.tolist() == idx


# -- LIBSVM ----------------------------------------------------------------------------


def naive_parse(text):
    """tests/naive.py's line parser, stricter where the format is (None: invalid).
    Returns (rows, labels, n_features) with zero-based indices."""
    from naive import naive_parse_svmlight

    try:
        rows, labels, _zb = naive_parse_svmlight(text)
    except (ValueError, IndexError):
        return None
    if any(i < 0 for row in rows for i, _v in row):
        return None
    n = max((i + 1 for row in rows for i, _v in row), default=0)
    return rows, labels, n


SPELLINGS = (lambda v: repr(float(v)), lambda v: f"{v:.6e}", lambda v: f"{v:.3g}", lambda v: str(int(v * 1000)),
             lambda v: f"{v:.17E}")


def svm_text_of(seed):
    """LIBSVM text from a seed: labels, sorted unique index:value pairs, numbers
    in many spellings, comments, blank lines, tabs (numpy draws it, as above)."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rng.integers(0, 9)):
        label = rng.choice(["1", "-1", "+1", "0", "2.5", "-1.0"])
        idx = np.flatnonzero(rng.random(40) < rng.random() * 0.3) + 1
        vals = rng.standard_normal(len(idx)) * 10.0 ** rng.integers(-30, 30, len(idx))
        feats = " ".join(f"{i}:{SPELLINGS[rng.integers(len(SPELLINGS))](v)}" for i, v in zip(idx, vals))
        lines.append(f"{label} {feats}{rng.choice(['', ' # note', '  ', chr(9)])}")
        if rng.random() < 0.3:
            lines.append(rng.choice(["", "# comment"]))
    return "\n".join(lines) + rng.choice(["", "\n"])


def svm_text():
    return st.integers(0, 2**63).map(svm_text_of)


# Characters for mutations: the format's own (digits, separators, signs,
# exponents, comments) and bytes that are never part of it.
MUTANTS = st.sampled_from(list("0123456789:. \t\n-+e#") + ["\r", "\x00", "\xff", "x", "E"])


@st.composite
def mutated_svm_text(draw):
    text = draw(svm_text())
    edits = st.tuples(st.integers(0, 10**6), st.sampled_from(["insert", "replace", "delete"]), MUTANTS)
    for pos, kind, c in draw(st.lists(edits, min_size=1, max_size=5)):
        pos %= len(text) + 1
        if kind == "insert":
            text = text[:pos] + c + text[pos:]
        elif kind == "replace":
            text = text[:pos] + c + text[pos + 1 :]
        else:
            text = text[:pos] + text[pos + 1 :]
    return text


def check_parse(tmp_dir, text):
    from mpisgd.data.libsvm import load_svmlight

    p = os.path.join(tmp_dir, "x.svm")
    with open(p, "wb") as f:
        f.write(text.encode("latin-1"))
    expected = naive_parse(text)
    try:
        X, y = load_svmlight(p)
    except MpisgdError as exc:
        assert "x.svm" in str(exc)  # the error names the file
        return
    # Accepted: the naive parser must read the same rows, labels and width.
    assert expected is not None, f"accepted text the format does not allow: {text!r}"
    rows, labels, n = expected
    assert X.shape == (len(rows), n)
    np.testing.assert_array_equal(y, labels)
    for r, row in enumerate(rows):
        a, b = X.indptr[r], X.indptr[r + 1]
        assert list(X.indices[a:b]) == [i for i, _v in row]
        np.testing.assert_array_equal(X.data[a:b], [v for _i, v in row])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A directory for each case's file: in memory (a tmpfs) where there is one."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="mpisgd-properties-", dir="/dev/shm")
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield str(tmp_path_factory.mktemp("properties"))


@pytest.fixture(scope="module", autouse=True)
def small_chunks():
    """Text in chunks of 256 bytes: lines cross chunk boundaries, and a tiny
    file costs no 16 MiB buffer per example."""
    from mpisgd.data import textio

    chunks = textio.iter_line_chunks

    def small(path, start=0, stop=None, chunk_bytes=None):
        return chunks(path, start, stop, 256)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(textio, "iter_line_chunks", small)
        yield


@share(0.3)
@given(svm_text())
def test_libsvm_valid_text(scratch, text):
    from mpisgd.data.libsvm import load_svmlight

    p = os.path.join(scratch, "x.svm")
    with open(p, "w") as f:
        f.write(text)
    X, y = load_svmlight(p)  # valid text is never refused
    rows, labels, n = naive_parse(text)
    assert X.shape == (len(rows), n)
    np.testing.assert_array_equal(y, labels)
    np.testing.assert_array_equal(X.toarray(), np.array(
        [[dict(row).get(j, 0.0) for j in range(n)] for row in rows]).reshape(len(rows), n))


@share(0.7)
@given(mutated_svm_text())
def test_libsvm_mutated_text(scratch, text):
    check_parse(scratch, text)


# -- shards ------------------------------------------------------------------------------


N_FEATURES = 12


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """A small valid shard in each layout: {layout: (path, X, y)}."""
    from mpisgd.data.shard import write_shard

    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    X = sp.random(40, N_FEATURES, density=0.3, format="csr", random_state=1)
    X.data = rng.standard_normal(X.nnz)
    y = np.where(rng.random(40) < 0.5, -1.0, 1.0)
    return {c: (str(write_shard(d / f"{c}.h5", X, y, compression=c)), X, y) for c in ("none", "gzip")}


def read_all(path, block_rows):
    """Every row of a shard through the block reader (as training reads it)."""
    from mpisgd.data.reader import iter_blocks

    parts = list(iter_blocks(path, block_rows, readahead=0))
    if not parts:
        return sp.csr_matrix((0, N_FEATURES)), np.zeros(0)
    X = sp.vstack([sp.csr_matrix((b.data, b.indices, b.indptr), shape=(b.n_rows, N_FEATURES)) for b in parts])
    return X.tocsr(), np.concatenate([b.y for b in parts])


HANG = 60  # seconds: a shard case still reading after this has hung (a case takes milliseconds)


def check_read(path, X, y, block_rows):
    """MpisgdError naming the file, or exactly the rows that were written.

    At 10,000 cases one flipped bit (a size in HDF5's global heap, which holds
    the shard's string attributes) sent libhdf5 2.0.0 into an endless loop that
    no Python code can interrupt: faulthandler's own thread then ends the whole
    run after HANG s, with every thread's stack, instead of CI waiting forever
    (the mutant stays in the scratch directory)."""
    import faulthandler

    faulthandler.dump_traceback_later(HANG, exit=True)
    try:
        return _check_read(path, X, y, block_rows)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _check_read(path, X, y, block_rows):
    from mpisgd.data import shard

    # Every example rewrites the same path within a clock tick, at the same
    # size: forget which segments this process has verified.
    shard._VERIFIED.clear()
    try:
        Xr, yr = read_all(path, block_rows)
    except MpisgdError as exc:
        assert os.path.basename(path) in str(exc)
        return False
    assert Xr.shape == X.shape and (Xr != X).nnz == 0
    np.testing.assert_array_equal(yr, y)
    return True


@share(0.6)
@given(st.sampled_from(["none", "gzip"]), st.sampled_from([16, 40]),
       st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 7)), min_size=1, max_size=3),
       st.one_of(st.none(), st.integers(0, 10**9)))
def test_shard_with_flipped_bits_or_truncated(shards, scratch, layout, block_rows, flips, cut):
    """Bits flipped anywhere in the file, and maybe the file cut short."""
    src, X, y = shards[layout]
    raw = bytearray(open(src, "rb").read())
    for pos, bit in flips:
        raw[pos % len(raw)] ^= 1 << bit
    if cut is not None:
        del raw[cut % len(raw):]
    p = os.path.join(scratch, "mutant.h5")
    with open(p, "wb") as f:
        f.write(raw)
    check_read(p, X, y, block_rows)


def naive_valid(indptr, indices, n_features):
    """Whether CSR arrays describe rows, checked one entry at a time."""
    if len(indptr) == 0 or indptr[0] != 0 or indptr[-1] != len(indices):
        return False
    if any(b < a for a, b in zip(indptr, indptr[1:])):
        return False
    return all(0 <= j < n_features for j in indices)


@share(0.4)
@given(st.sampled_from(["none", "gzip"]), st.sampled_from([16, 40]), st.sampled_from(["indptr", "indices"]),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(-3, 60)), min_size=1, max_size=3))
def test_shard_with_bad_csr_and_valid_checksums(shards, scratch, layout, block_rows, name, edits):
    """indptr or indices rewritten as a buggy writer would (checksums recomputed,
    so only the reader's structural checks stand between them and the kernel)."""
    import h5py

    from mpisgd.data.shard import checksums

    src, X, y = shards[layout]
    p = os.path.join(scratch, "edited.h5")
    shutil.copyfile(src, p)
    with h5py.File(p, "r+") as f:
        arr = f[name][:]
        for pos, value in edits:
            arr[pos % len(arr)] = value
        f[name][:] = arr
        if "checksums" in f:
            f["checksums"][name][:] = checksums(arr)
        indptr, indices = f["indptr"][:], f["indices"][:]
    valid = naive_valid(indptr, indices, N_FEATURES)
    if valid:  # still a matrix: read as it now is
        X = sp.csr_matrix((stored_data(p), indices, indptr), shape=(len(indptr) - 1, N_FEATURES))
    assert check_read(p, X, y, block_rows) == valid


def stored_data(path):
    import h5py

    with h5py.File(path, "r") as f:
        return f["data"][:]


@pytest.mark.parametrize("layout", ["none", "gzip"])
@pytest.mark.parametrize("name,dtype", [("data", "<u8"), ("data", ">f8"), ("indices", "<u4"), ("indptr", ">i8"),
                                        ("labels", "<i8")])
def test_shard_with_a_dataset_of_another_type_is_refused(shards, scratch, layout, name, dtype):
    """The same bytes under another type, checksums still matching: what one
    flipped bit of a type message does (found by the flipped-bits test above
    at 10,000 cases: ``data`` read as uint64). Refused, the dataset named."""
    import h5py

    from mpisgd.data.shard import open_shard

    src, _X, _y = shards[layout]
    p = os.path.join(scratch, "retyped.h5")
    shutil.copyfile(src, p)
    with h5py.File(p, "r+") as f:
        arr = f[name][:]
        del f[name]
        f.create_dataset(name, data=arr.view(dtype))
    with pytest.raises(MpisgdError, match=f"retyped.h5: dataset '{name}' is of type"):
        with open_shard(p) as shard:
            shard.read(0, 40)
