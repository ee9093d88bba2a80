"""A server's step on attnscore.KvCache from Python: packed appends and
queries with a count per sequence (0: idle), and attend's window, ALiBi,
soft-cap, sinks and bias over sequences of different lengths, each sequence
against float64 math from docs/semantics.md (section 5)."""

import numpy as np
import pytest

import attnscore
from test_numpy_api import assert_output, assert_weights, ref_multihead, rounded_to_bf16

HQ, HKV, D = 4, 2, 16


@pytest.fixture
def engine():
    return attnscore.Engine()


def sequence_reference(k, v, q, **options):
    """Sequence's keys (L, Hkv, D), values (L, Hkv, Dv) and its newest
    positions' queries (N, Hq, D), causal bottom-right: out (N, Hq, Dv),
    weights (Hq, N, L)."""
    out, weights = ref_multihead(q[None], k[None], v[None], None, "bottom-right",
                                 1 / np.sqrt(D), **options)
    return out[0], weights[0]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("with_options", [False, True])
def test_one_call_prefills_decodes_and_idles(engine, precision, with_options):
    rng = np.random.default_rng(7)
    cache = attnscore.KvCache(3, 64, HKV, D, D, precision=precision)
    keys = [rng.standard_normal((n, HKV, D), dtype=np.float32) for n in (5, 40, 20)]
    values = [rng.standard_normal((n, HKV, D), dtype=np.float32) for n in (5, 40, 20)]
    for b in range(3):
        cache.append_to(b, keys[b], values[b])
    step_k = rng.standard_normal((31, HKV, D), dtype=np.float32)
    step_v = rng.standard_normal((31, HKV, D), dtype=np.float32)
    q = rng.standard_normal((31, HQ, D), dtype=np.float32)
    cache.append(step_k, step_v, counts=np.array([30, 1, 0]))
    assert [cache.length(b) for b in range(3)] == [35, 41, 20]
    keys[0] = np.concatenate([keys[0], step_k[:30]])
    values[0] = np.concatenate([values[0], step_v[:30]])
    keys[1] = np.concatenate([keys[1], step_k[30:]])
    values[1] = np.concatenate([values[1], step_v[30:]])
    options = {}
    if with_options:
        options = dict(window=(8, -1), alibi=np.array([0.25, 0.125, 0.0625, 0.5], np.float32),
                       softcap=2.5, sinks=np.array([0.5, -1.0, 2.0, 0.0], np.float32))
    keywords = {("alibi_slopes" if name == "alibi" else name): value
                for name, value in options.items()}
    out = cache.attend(engine, q, query_counts=[30, 1, 0], **keywords)
    assert out.shape == (31, HQ, D)
    held = (lambda x: x) if precision == "fp32" else rounded_to_bf16
    for b, rows in ((0, slice(0, 30)), (1, slice(30, 31))):
        want, _ = sequence_reference(held(keys[b]), held(values[b]), q[rows], **options)
        assert_output(out[rows], want, values[b])
    # Sequence 2, idle, holds what it held: a later step on it alone sees it.
    k2 = rng.standard_normal((1, HKV, D), dtype=np.float32)
    v2 = rng.standard_normal((1, HKV, D), dtype=np.float32)
    q2 = rng.standard_normal((1, HQ, D), dtype=np.float32)
    cache.append(k2, v2, counts=[0, 0, 1])
    out2 = cache.attend(engine, q2, query_counts=np.array([0, 0, 1], np.int32), **keywords)
    want2, _ = sequence_reference(held(np.concatenate([keys[2], k2])),
                                  held(np.concatenate([values[2], v2])), q2, **options)
    assert_output(out2, want2, values[2])


def test_attend_places_each_sequence_at_its_own_length(engine):
    rng = np.random.default_rng(11)
    lengths, n = (23, 40, 9), 3
    cache = attnscore.KvCache(3, 64, HKV, D, D)
    keys = [rng.standard_normal((m, HKV, D), dtype=np.float32) for m in lengths]
    values = [rng.standard_normal((m, HKV, D), dtype=np.float32) for m in lengths]
    for b in range(3):
        cache.append_to(b, keys[b], values[b])
    q = rng.standard_normal((3, n, HQ, D), dtype=np.float32)
    slopes = np.array([0.25, 0.125, 0.0625, 0.5], np.float32)
    bias = rng.standard_normal((3, 1, n, 40)).astype(np.float32)  # broadcast over heads
    out, weights = cache.attend(engine, q, return_weights=True, window=(8, -1),
                                alibi_slopes=slopes, bias=bias)
    assert weights.shape == (3, HQ, n, 40)
    for b, m in enumerate(lengths):
        want, want_w = sequence_reference(keys[b], values[b], q[b], window=(8, -1),
                                          alibi=slopes, bias=bias[b:b + 1, :, :, :m])
        assert_output(out[b], want, values[b])
        assert_weights(weights[b, :, :, :m], want_w)
        assert np.all(weights[b, :, :, m:] == 0)
    mask = np.ones((3, HQ, n, 40), bool)
    mask[:, 1, :, ::3] = False
    out, weights = cache.attend(engine, q, return_weights=True, bias=mask)
    for b, m in enumerate(lengths):
        want, want_w = sequence_reference(keys[b], values[b], q[b], bias=mask[b:b + 1, :, :, :m])
        assert_output(out[b], want, values[b])
        assert_weights(weights[b, :, :, :m], want_w)


def test_bad_counts_are_refused_changing_nothing(engine):
    rng = np.random.default_rng(3)
    cache = attnscore.KvCache(2, 8, HKV, D, D)
    k = rng.standard_normal((4, HKV, D), dtype=np.float32)
    with pytest.raises(ValueError, match="KvCache: counts sum to 3; the packed rows are 4"):
        cache.append(k, k, counts=[1, 2])
    with pytest.raises(ValueError, match=r"counts\[1\] is -1; a count is >= 0"):
        cache.append(k, k, counts=[5, -1])
    with pytest.raises(TypeError, match="counts must be \\(B,\\) integers"):
        cache.append(k, k, counts=[2.0, 2.0])
    with pytest.raises(ValueError, match="sequence 0 holds 0 of its 8 positions; 9 more"):
        cache.append(np.zeros((9, HKV, D), np.float32), np.zeros((9, HKV, D), np.float32),
                     counts=[9, 0])
    assert cache.length(0) == 0 and cache.length(1) == 0
    cache.append(k, k, counts=[4, 0])
    q = rng.standard_normal((2, HQ, D), dtype=np.float32)
    with pytest.raises(ValueError, match=r"query_counts\[1\] is 1 but sequence 1 holds 0"):
        cache.attend(engine, q, query_counts=[1, 1])
    with pytest.raises(ValueError, match="packed queries return no weights"):
        cache.attend(engine, q, query_counts=[2, 0], return_weights=True)
    with pytest.raises(TypeError, match="pass return_weights= by name"):
        cache.attend(engine, q, True)
    with pytest.raises(ValueError, match="packed queries take neither"):
        cache.attend(engine, q[:1], query_counts=[1, 0], bias=np.zeros((1, 1, 1, 4), np.float32))


def test_the_catalogues_step_appends_and_attends_or_refuses_changing_nothing(engine):
    """Op("kv_cache_step") is append(counts=) then attend(query_counts=) on a
    cache of its own; a refused step appends nothing, as the next step shows."""
    rng = np.random.default_rng(5)
    op = attnscore.Op("kv_cache_step", batch=2, capacity=8, kv_heads=HKV, key_dim=D, value_dim=D)
    twin = attnscore.KvCache(2, 8, HKV, D, D)
    k = rng.standard_normal((5, HKV, D), dtype=np.float32)
    v = rng.standard_normal((5, HKV, D), dtype=np.float32)
    q = rng.standard_normal((3, HQ, D), dtype=np.float32)
    counts, query_counts = np.array([4, 1]), np.array([2, 1])
    with pytest.raises(ValueError, match="keys, values and counts are appended together"):
        op(engine, queries=q, query_counts=query_counts, keys=k, values=v)
    with pytest.raises(ValueError, match="sequence 0 holds 0 of its 8 positions; 9 more"):
        op(engine, queries=q, query_counts=query_counts, keys=np.zeros((9, HKV, D), np.float32),
           values=np.zeros((9, HKV, D), np.float32), counts=np.array([9, 0]))
    with pytest.raises(ValueError, match=r"query_counts\[1\] is 2 but sequence 1 will hold 1"):
        op(engine, queries=q, query_counts=np.array([1, 2]), keys=k, values=v, counts=counts)
    # What only the attend would see, refused before the append too.
    with pytest.raises(ValueError, match="query_counts sum to 2; the packed rows are 3"):
        op(engine, queries=q, query_counts=np.array([1, 1]), keys=k, values=v, counts=counts)
    with pytest.raises(ValueError, match="have 3 heads; the cache's 2 key-value heads"):
        op(engine, queries=q[:, :3], query_counts=query_counts, keys=k, values=v, counts=counts)
    got = op(engine, queries=q, query_counts=query_counts, keys=k, values=v, counts=counts,
             window_left=2)
    twin.append(k, v, counts=counts)
    want = twin.attend(engine, q, query_counts=query_counts, window=(2, -1))
    assert np.array_equal(got, want)
