"""Model messages: encode/decode round trips, the sparse/dense choice, and
sizes that match model_nbytes."""

import numpy as np
import pytest

from mpisgd import wire
from mpisgd.errors import MpisgdError


@pytest.mark.parametrize("n, nnz", [(10, 0), (10, 3), (10, 6), (10, 7), (10, 10), (1000, 17), (3, 3)])
def test_round_trip_and_size(n, nnz):
    rng = np.random.default_rng(n * 100 + nnz)
    idx = np.sort(rng.choice(n, size=nnz, replace=False)).astype(np.int32)
    vals = rng.normal(size=nnz)
    u = np.zeros(n)
    u[idx] = vals
    buf = wire.encode(0.75, -1.5, u, 1.0, n)
    assert buf.dtype == np.uint8
    assert len(buf) == wire.model_nbytes(nnz, n)
    assert len(buf) == (16 + 12 * nnz if 12 * nnz < 8 * n else 16 + 8 * n)
    z = wire.decode(buf, n)
    expected = np.zeros(n + 2)
    expected[idx] = vals
    expected[n], expected[n + 1] = -1.5, 0.75
    np.testing.assert_array_equal(z, expected)


def test_wrong_length_is_refused():
    with pytest.raises(MpisgdError, match="n_features=10"):
        wire.decode(np.zeros(21, dtype=np.uint8), 10)


@pytest.mark.parametrize("idx", [[-1], [-2], [10], [11], [2**31 - 1], [3, 3], [5, 2]])
def test_sparse_indices_outside_u_or_out_of_order_are_refused(idx):
    """A negative index would land in the bias or scale slot of z, an index
    >= n in them or beyond: refused, as are repeats and disorder."""
    buf = wire.encode(1.0, 0.0, (np.arange(10) < len(idx)).astype(float), 1.0, 10)
    buf[16 + 8 * len(idx):].view(np.int32)[:] = idx
    with pytest.raises(MpisgdError, match=r"indices outside \[0, 10\) or not strictly increasing"):
        wire.decode(buf, 10)


# -- compressed messages --------------------------------------------------------------------


def _parts(n, nnz, seed):
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, size=nnz, replace=False)).astype(np.int32)
    return idx, rng.normal(size=nnz) * 10.0 ** rng.integers(-3, 3)


@pytest.mark.parametrize("compress", ["fp16", "q8"])
@pytest.mark.parametrize("n, nnz, layout", [(10, 0, 0), (10, 1, -2), (10, 10, -1), (1000, 17, 17), (1000, 300, -2),
                                            (1000, 1000, -1), (3, 3, -1), (64, 1, 1), (64, 5, -2)])
def test_compressed_round_trip_size_and_layout(compress, n, nnz, layout):
    idx, vals = _parts(n, nnz, n + nnz)
    uniform = wire.uniforms([4], [9], nnz)[0]
    buf = wire.encode_compressed(0.75, -1.5, idx, vals, n, compress, uniform)
    assert len(buf) == wire.model_nbytes(nnz, n, compress)
    assert int(buf[20:24].view(np.int32)[0]) == layout
    z = wire.decode_compressed(buf, n, compress)
    assert (z[n], z[n + 1]) == (-1.5, 0.75)  # α and b exact
    assert np.count_nonzero(z[:n][np.setdiff1d(np.arange(n), idx)]) == 0
    c = np.abs(vals).max() if nnz else 0.0
    step = c / 127 if compress == "q8" else c * 2.0**-10  # one level; the float16 spacing below 1
    assert np.all(np.abs(z[idx] - vals) <= step * (1 + 1e-6))


def naive_round(x, uniform, compress):
    """Stochastic rounding of each x_i ∈ [−1, 1], one at a time: the two
    representable neighbours, the upper with probability (x − lo)/(hi − lo)."""
    out = []
    for xi, ui in zip(x, uniform):
        if compress == "q8":
            grid = np.arange(-127, 128) / 127
        else:
            f = np.float16(xi)
            grid = np.array([np.nextafter(f, np.float16(-np.inf)), f, np.nextafter(f, np.float16(np.inf))],
                            dtype=np.float64)
        if np.any(grid == xi):
            out.append(float(xi))
            continue
        lo, hi = grid[grid < xi].max(), grid[grid > xi].min()
        out.append(hi if ui < (xi - lo) / (hi - lo) else lo)
    return np.array(out)


@pytest.mark.parametrize("compress", ["fp16", "q8"])
def test_quantizer_matches_its_numpy_twin(compress):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-1, 1, 500), [-1.0, 1.0, 0.0, 1e-9, -3e-8, 0.5]])
    uniform = wire.uniforms([2], [3], len(x))[0]
    q = wire.quantize(x, uniform, compress)
    got = q.astype(np.float64) / 127 if compress == "q8" else q.astype(np.float64)
    np.testing.assert_array_equal(got, naive_round(x, uniform, compress))


@pytest.mark.parametrize("compress", ["fp16", "q8"])
def test_compressed_messages_are_unbiased(compress):
    """E[decoded] = u: the mean of 4,000 messages of one model (learner 7's
    messages 0 … 3999) within 4.5 standard errors of u on every coordinate."""
    n, trials = 12, 4000
    u = np.array([0.3, -0.7, 1e-3, 0.9999, -0.25, 0.126, 0.0049, -0.5, 0.77, 1.0, -0.01, 0.33]) * 2.5
    idx = np.arange(n, dtype=np.int32)
    draws = wire.uniforms(np.full(trials, 7), np.arange(trials), n)
    got = np.array([wire.decode_compressed(wire.encode_compressed(1.0, 0.0, idx, u, n, compress, d), n,
                                           compress)[:n] for d in draws])
    spread = got.std(axis=0) / np.sqrt(trials)
    assert np.all(np.abs(got.mean(axis=0) - u) <= 4.5 * spread + 1e-15)
    assert got.std(axis=0).max() > 0  # really random


def test_uniforms_are_per_message_and_in_range():
    a = wire.uniforms([1, 2, 1], [0, 0, 1], 1000)
    assert a.shape == (3, 1000) and a.min() >= 0 and a.max() < 1
    np.testing.assert_array_equal(a[1], wire.uniforms([2], [0], 1000)[0])  # a row does not depend on the others
    assert not np.array_equal(a[0], a[2]) and not np.array_equal(a[0], a[1])
    assert abs(a.mean() - 0.5) < 0.02


@pytest.mark.parametrize("compress", ["fp16", "q8"])
def test_compressed_bad_messages_are_refused(compress):
    n = 100
    idx = np.array([3, 50], np.int32)
    good = wire.encode_compressed(1.0, 0.0, idx, np.array([1.0, -2.0]), n, compress, np.zeros(2))
    assert int(good[20:24].view(np.int32)[0]) == 2  # the list layout
    for bad_idx in ([50, 3], [3, 3], [-1, 3], [3, 100]):
        buf = good.copy()
        buf[24:32].view(np.int32)[:] = bad_idx
        with pytest.raises(MpisgdError, match=r"indices outside \[0, 100\)"):
            wire.decode_compressed(buf, n, compress)
    for c in (np.nan, -1.0, np.inf):
        buf = good.copy()
        buf[16:20].view(np.float32)[0] = c
        with pytest.raises(MpisgdError, match="scale"):
            wire.decode_compressed(buf, n, compress)
    for m in (-3, 3, 2**31 - 1):
        buf = good.copy()
        buf[20:24].view(np.int32)[0] = m
        with pytest.raises(MpisgdError, match="does not fit n_features=100"):
            wire.decode_compressed(buf, n, compress)
    with pytest.raises(MpisgdError, match="shorter than its header"):
        wire.decode_compressed(good[:23], n, compress)
    mask = wire.encode_compressed(1.0, 0.0, np.arange(0, 100, 3, dtype=np.int32), np.ones(34), n, compress,
                                  np.zeros(34))
    assert int(mask[20:24].view(np.int32)[0]) == -2
    beyond = mask.copy()
    beyond[24 + 12] |= 0x80  # bit 103 ≥ n
    with pytest.raises(MpisgdError, match="mask does not fit"):
        wire.decode_compressed(beyond, n, compress)
    extra = mask.copy()
    extra[24] |= 0x02  # one more set bit than values
    with pytest.raises(MpisgdError, match="mask does not fit"):
        wire.decode_compressed(extra, n, compress)


def test_compress_names_are_checked():
    with pytest.raises(MpisgdError, match="compress: unknown 'int4'"):
        wire.check_compress("int4")


# -- full syncs -------------------------------------------------------------------------------


def test_pairs_blocks_sum_in_order_and_refuse_bad_blocks():
    n, m = 20, 4

    def u_of(idx, vals):
        u = np.zeros(n)
        u[idx] = vals
        return u

    blocks = [wire.encode_block(1.0, 0.5, u_of([1, 7], [2.0, 3.0]), m),
              wire.encode_block(0.5, -1.0, u_of([0, 1, 19], [1.0, 1.0, 4.0]), m),
              wire.encode_block(1.0, 0.0, np.zeros(n), m)]
    assert all(len(b) == wire.sync_block_nbytes(m) == 24 + 12 * m for b in blocks)
    total = wire.sum_blocks(np.concatenate(blocks), n, m)
    want = np.zeros(n + 2)
    want[[1, 7]] += [2.0, 3.0]
    want[[0, 1, 19]] += [1.0, 1.0, 4.0]
    want[n], want[n + 1] = -0.5, 2.5
    np.testing.assert_array_equal(total, want)
    for count, idx in ((5, [0, 1]), (-1, [0, 1]), (1.5, [0, 1]), (2, [1, 1]), (2, [0, 20]), (2, [-1, 0])):
        bad = blocks[0].copy()
        bad[16:24].view(np.float64)[0] = count
        bad[24 + 8 * m : 24 + 8 * m + 8].view(np.int32)[:] = idx
        with pytest.raises(MpisgdError, match="pairs block"):
            wire.sum_blocks(bad, n, m)
    with pytest.raises(MpisgdError, match="whole pairs blocks"):
        wire.sum_blocks(blocks[0][:-1], n, m)
    with pytest.raises(MpisgdError, match="at most m = 4 non-zeros"):
        wire.encode_block(1.0, 0.0, u_of([0, 1, 2, 3, 4], 1.0), m)
    bad = blocks[0].copy()
    bad[16:24].view(np.float64)[0] = np.nan
    with pytest.raises(MpisgdError, match="pairs block"):
        wire.sum_blocks(bad, n, m)


@pytest.mark.parametrize("m", [3, 4])  # every other block unaligned, or none
def test_filled_blocks_are_the_encoded_ones_and_add_up_with_their_indices(m):
    n = 20
    rng = np.random.default_rng(3)
    us = [np.where(rng.random(n) < 0.15, rng.standard_normal(n), 0.0)[:n] for _ in range(3)]
    for u in us:
        u[np.flatnonzero(u)[m:]] = 0.0  # at most m non-zeros
    encoded = [wire.encode_block(0.5 + l, -l, u, m) for l, u in enumerate(us)]
    for l, u in enumerate(us):
        j = np.flatnonzero(u).astype(np.int32)
        buf = np.full(wire.sync_block_nbytes(m), 255, np.uint8)  # the padding is zeroed
        np.testing.assert_array_equal(wire.fill_block(buf, 0.5 + l, -l, u[j], j, m), encoded[l])
    total = np.zeros(n + 2)
    counts = np.empty(3, np.int64)
    index = wire.add_blocks(np.concatenate(encoded), n, m, total, counts)
    np.testing.assert_array_equal(total, wire.sum_blocks(np.concatenate(encoded), n, m))
    for l, u in enumerate(us):
        np.testing.assert_array_equal(index[l, : counts[l]], np.flatnonzero(u))


def test_index_blocks_unite_and_refuse_bad_blocks():
    n, m = 20, 3
    blocks = [wire.fill_index_block(np.empty(m + 1, np.int32), np.array(idx, np.int32), m)
              for idx in ([1, 7], [0, 1, 19], [])]
    assert all(b.nbytes == wire.index_block_nbytes(m) == 4 * (m + 1) for b in blocks)
    np.testing.assert_array_equal(wire.union_of_blocks(np.concatenate(blocks), n, m), [0, 1, 7, 19])
    for count, idx in ((4, [0, 1]), (-1, [0, 1]), (2, [1, 1]), (2, [0, 20]), (2, [-1, 0]), (2, [3, 2])):
        bad = blocks[0].copy()
        bad[0], bad[1:3] = count, idx
        with pytest.raises(MpisgdError, match="index block of a partial sync"):
            wire.union_of_blocks(bad, n, m)
    with pytest.raises(MpisgdError, match="whole index blocks"):
        wire.union_of_blocks(blocks[0][:-1], n, m)
    with pytest.raises(MpisgdError, match="at most m = 3 indices"):
        wire.fill_index_block(np.empty(m + 1, np.int32), np.arange(4, dtype=np.int32), m)
    assert wire.partial_pays(n, 2, m) == (2 * 4 * (m + 1) < wire.dense_nbytes(n))


@pytest.mark.parametrize("k", [1, 2, 3, 258, 259, 512, 4095, 4096, 10**5])
@pytest.mark.parametrize("compress", ["fp16", "q8"])
def test_quantized_sums_cannot_overflow(k, compress):
    dtype, levels = wire.sync_format(k, compress)
    assert k * levels <= np.iinfo(dtype).max and levels >= 8
    assert wire.sync_dense_nbytes(10, k, compress) == 12 * np.dtype(dtype).itemsize


def test_quantized_sum_is_unbiased():
    """E[c·Σq/L] = Σx for the levels of a full sync (3 learners, 3,000 syncs)."""
    k, n, trials = 3, 6, 3000
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (k, n + 2))
    c = np.abs(x).max(axis=0)[[0, n, n + 1]]
    c[0] = np.abs(x[:, :n]).max()
    sums = np.empty((trials, n + 2))
    for t in range(trials):
        q = wire.sync_levels_of(x, c, k, wire.uniforms(np.arange(k), np.full(k, t), n + 2), "q8")
        sums[t] = wire.sync_unlevel(q.sum(axis=0), c, k, 0.0, "q8")
        sums[t, n + 1] -= k  # x holds α − 1 already
    se = sums.std(axis=0) / np.sqrt(trials)
    assert np.all(np.abs(sums.mean(axis=0) - x.sum(axis=0)) <= 4.5 * se)



def _walk(first, forward):
    """Every (rank, message, hops) a relayed message reaches from rank 0's
    message ``first`` (to its first rank), handed on by ``forward(rank, buf)``
    -> (what the rank keeps, [(child, buf), …])."""
    seen, frontier = {}, [(*first, 1)]
    while frontier:
        rank, buf, hops = frontier.pop()
        assert rank not in seen  # handed on once
        kept, onward = forward(rank, buf)
        assert len(onward) <= 2
        seen[rank] = (kept, buf, hops)
        frontier += [(child, part, hops + 1) for child, part in onward]
    return seen


@pytest.mark.parametrize("m, k", [(9, 600), (10, 600), (31, 600), (255, 600), (9, 10), (255, 256)])
def test_a_relayed_result_reaches_every_member_once_in_log_depth(m, k):
    """Rank 0's one message reaches each of the m members exactly once, with
    the model message intact, after ⌈log2(m + 1)⌉ hops at most; each member's
    message has the size the simulator counts (relay_result_nbytes, by position)."""
    rng = np.random.default_rng(m)
    members = np.sort(rng.choice(np.arange(1, k), size=m, replace=False))
    message = wire.encode(1.0, 0.5, np.array([1.0, 0, -2.0, 0, 0, 0, 0, 0, 0, 0]), 1.0, 10)
    first = (int(members[0]), np.concatenate([message, wire.relay_trailer(members, k)]))
    seen = _walk(first, lambda rank, buf: wire.relay_result(buf, rank, k))
    assert sorted(seen) == members.tolist()
    assert max(h for _kept, _buf, h in seen.values()) == int(np.ceil(np.log2(m + 1)))
    sizes = wire.relay_result_nbytes(len(message), m, k)
    for p, rank in enumerate(members.tolist()):
        kept, buf, _h = seen[rank]
        np.testing.assert_array_equal(kept, message)
        assert len(buf) == sizes[p]


@pytest.mark.parametrize("m, k", [(1, 2), (1, 600), (3, 4), (8, 9), (8, 600)])
def test_a_small_set_gets_its_result_from_rank_0_directly(m, k):
    """Up to RELAY_ABOVE members: one message from rank 0 to each, naming only
    its receiver, which hands it on to no one; commands to at most that many
    followers are the plain int64."""
    assert not wire.relayed(m) and wire.relayed(m + 1) == (m == wire.RELAY_ABOVE)
    message = wire.encode(1.0, 0.5, np.array([1.0, 0, -2.0, 0, 0, 0, 0, 0, 0, 0]), 1.0, 10)
    for rank, size in zip(range(1, m + 1), wire.relay_result_nbytes(len(message), m, k)):
        buf = np.concatenate([message, wire.relay_trailer([rank], k)])
        kept, onward = wire.relay_result(buf, rank, k)
        np.testing.assert_array_equal(kept, message)
        assert onward == [] and len(buf) == size
    if k - 1 <= wire.RELAY_ABOVE:
        assert list(wire.fullsync_nbytes(k)) == [wire.CONTROL_BYTES] * (k - 1)


@pytest.mark.parametrize("k", [10, 11, 64, 65, 300])
def test_fullsync_brings_each_rank_its_own_parity(k):
    """FULLSYNC from rank 1 down the implicit heap: every rank gets it once,
    reads its own bit of the parity rank 0 packed, and each message has the
    size the simulator counts (fullsync_nbytes)."""
    parity = np.random.default_rng(k).integers(0, 2, size=k)
    seen = _walk((1, wire.fullsync_command(2, parity)), lambda rank, buf: wire.fullsync_forward(buf, rank, k))
    assert sorted(seen) == list(range(1, k))
    assert max(h for _b, _buf, h in seen.values()) == int(np.ceil(np.log2(k)))
    sizes = wire.fullsync_nbytes(k)
    for rank, (bit, buf, _h) in seen.items():
        assert bit == parity[rank] and len(buf) == sizes[rank - 1]
        assert buf[:8].view(np.int64)[0] == 2


@pytest.mark.parametrize("trailer", [np.array([5], np.int32), np.array([3, 2, 2], np.int32),
                                     np.array([0, 1], np.int32), np.array([3, 9, 2], np.int32),
                                     np.array([4, 3, 2], np.int32), np.array([-2], np.int32),
                                     np.array([4, 5, 2], np.int32), np.array([4, 1], np.int32),
                                     np.array([1], np.int32)])
def test_a_relayed_result_with_a_bad_set_is_refused(trailer):
    """Rank 3 receives it: its set must start with 3, increase, and stay in [1, 8)."""
    message = wire.encode(1.0, 0.0, np.eye(10)[1], 1.0, 10)
    with pytest.raises(MpisgdError, match="relayed result"):
        wire.relay_result(np.concatenate([message, trailer.view(np.uint8)]), 3, 8)
    with pytest.raises(MpisgdError, match="relayed result"):
        wire.relay_result(np.zeros(3, np.uint8), 3, 8)
    with pytest.raises(MpisgdError, match="FULLSYNC"):
        wire.fullsync_forward(np.zeros(12, np.uint8), 3, 8)


def test_a_check_points_messages_are_defined_once_for_both_modes():
    """wire.SEQUENCE: the same steps in both modes, each a Message (or nothing);
    the simulator's transport counts them from there, with no mode of its own."""
    import inspect

    from mpisgd import simulator

    assert wire.SEQUENCE["sync"].keys() == wire.SEQUENCE["async"].keys()
    for mode, steps in wire.SEQUENCE.items():
        for step, message in steps.items():
            assert message is None or (message.category in wire.CATEGORIES and message.route in wire.ROUTES), step
    assert wire.SEQUENCE["sync"]["end"].code == wire.END and wire.SEQUENCE["async"]["end"] is None
    assert wire.SEQUENCE["sync"]["count"].nbytes(0, 0, 3) == wire.CONTROL_BYTES
    assert list(wire.SEQUENCE["async"]["fullsync_command"].nbytes(0, 11, 12)) == list(wire.fullsync_nbytes(12))
    source = inspect.getsource(simulator.SimTransport)
    assert "mode ==" not in source and "mode !=" not in source


# -- partial model messages and balance requests (--partial, docs/WIRE.md) ------------------------


@pytest.mark.parametrize("compress", ["none", "q8", "fp16"])
@pytest.mark.parametrize("count", [0, 1, 5, 40, 60])  # none: sparse below 12·count < 8·n (n = 60), then dense
def test_partial_round_trip_keeps_the_support_with_its_zeros(compress, count):
    n = 60
    rng = np.random.default_rng(count)
    idx = np.sort(rng.choice(n, count, replace=False)).astype(np.int32)
    vals = rng.standard_normal(count)
    vals[::3] = 0.0  # a coordinate asked for where the learner has no divergence: sent, as 0
    uniform = wire.uniforms([1], [0], count)[0]
    buf = wire.encode_partial(0.25, idx, vals, 3.5, n, compress, uniform)
    assert len(buf) == wire.partial_nbytes(count, n, compress)
    part = wire.decode_partial(buf, n, compress)
    support = np.zeros(n, bool)
    support[idx] = True
    if compress == "none" and 12 * count >= 8 * n:
        support[:] = True  # dense: every coordinate sent
    np.testing.assert_array_equal(part.support, support)
    assert part.rho == 3.5 and part.z[n] == 0.25 and part.z[n + 1] == 1.0
    assert np.all(part.z[:n][~support] == 0.0)
    if compress == "none":
        np.testing.assert_array_equal(part.z[idx], vals)
    else:
        np.testing.assert_allclose(part.z[idx], vals, atol=2 * np.max(np.abs(vals), initial=0) / 127)


@pytest.mark.parametrize("compress", ["none", "q8"])
def test_partial_bad_messages_are_refused(compress):
    n = 60
    good = wire.encode_partial(0.0, np.array([2, 7], np.int32), np.array([1.0, -1.0]), 0.5, n, compress,
                               wire.uniforms([0], [0], 2)[0])
    cases = {"shorter than its ρ": good[:5], "not finite and >= 0": None, "not 1": None}
    rho = good.copy()
    rho[-8:] = np.array([-1.0]).view(np.uint8)
    cases["not finite and >= 0"] = rho
    alpha = good.copy()
    alpha[:8] = np.array([2.0]).view(np.uint8)
    cases["not 1"] = alpha
    for match, buf in cases.items():
        with pytest.raises(MpisgdError, match=match):
            wire.decode_partial(buf, n, compress)
    with pytest.raises(MpisgdError, match="wire: "):
        wire.decode_partial(good[:-9], n, compress)  # the model message cut short
    swapped = good.copy()  # indices out of order: after float64 [1, b, 2 values], or the compressed header
    head = 32 if compress == "none" else wire.HEAD
    swapped[head : head + 8] = np.array([7, 2], np.int32).view(np.uint8)
    with pytest.raises(MpisgdError, match="not strictly increasing"):
        wire.decode_partial(swapped, n, compress)


@pytest.mark.parametrize("compress", ["none", "q8", "fp16"])
@pytest.mark.parametrize("count", [0, 1, 7, 60])
def test_partial_results_carry_the_receivers_coordinates_only(compress, count):
    """A partial balance result holds b̄ and the values on its receiver's S_l,
    no indices: the receiver decodes it on the S_l it sent."""
    n = 60
    rng = np.random.default_rng(count)
    support = np.zeros(n, bool)
    support[rng.choice(n, count, replace=False)] = True
    vals = rng.standard_normal(count)
    vals[::4] = 0.0
    buf = wire.encode_result(-0.5, vals, compress, wire.uniforms([0], [3], count)[0])
    assert len(buf) == wire.result_nbytes(count, compress) == (8 + 8 * count if compress == "none" else
                                                               12 + {"q8": 1, "fp16": 2}[compress] * count)
    z = wire.decode_result(buf, support, n, compress)
    assert z[n] == -0.5 and z[n + 1] == 1.0 and np.all(z[:n][~support] == 0.0)
    if compress == "none":
        np.testing.assert_array_equal(z[:n][support], vals)
    else:
        np.testing.assert_allclose(z[:n][support], vals, atol=2 * np.max(np.abs(vals), initial=0) / 127)


@pytest.mark.parametrize("compress", ["none", "q8"])
def test_partial_bad_results_are_refused(compress):
    n = 60
    support = np.zeros(n, bool)
    support[[2, 7, 30]] = True
    good = wire.encode_result(0.5, np.array([1.0, -1.0, 0.25]), compress, wire.uniforms([0], [0], 3)[0])
    wire.decode_result(good, support, n, compress)
    for buf in (good[:-1], np.concatenate([good, good[:1]]), good[:4]):
        with pytest.raises(MpisgdError, match="does not fit its receiver's 3 coordinates"):
            wire.decode_result(buf, support, n, compress)
    fewer = support.copy()
    fewer[30] = False  # a result meant for a member of another S_l
    with pytest.raises(MpisgdError, match="does not fit its receiver's 2 coordinates"):
        wire.decode_result(good, fewer, n, compress)
    if compress != "none":
        scale = good.copy()
        scale[8:12] = np.array([np.inf], np.float32).view(np.uint8)
        with pytest.raises(MpisgdError, match="not finite and >= 0"):
            wire.decode_result(scale, support, n, compress)


def test_balance_requests_round_trip_and_refuse_bad_indices():
    assert len(wire.encode_request(5)) == wire.request_nbytes(0) == wire.CONTROL_BYTES
    results, asked = wire.decode_request(wire.encode_request(5), 10)
    assert results == 5 and len(asked) == 0
    buf = wire.encode_request(3, np.array([1, 4, 9]))
    assert len(buf) == wire.request_nbytes(3)
    results, asked = wire.decode_request(buf, 10)
    assert results == 3 and asked.tolist() == [1, 4, 9]
    # [2, 279, -2³¹ + 28]: the last step wraps to a positive one in int32
    for bad in ([4, 1], [1, 10], [-1, 2], [3, 3], [2, 279, -2147483620]):
        with pytest.raises(MpisgdError, match="not strictly increasing"):
            wire.decode_request(wire.encode_request(0, np.array(bad)), 10)
    with pytest.raises(MpisgdError, match="is not int64 then int32"):
        wire.decode_request(buf[:-1], 10)
