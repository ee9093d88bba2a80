"""The attnscore Python package's NumPy API (python/): the engine's ops and the
models on NumPy arrays, against an independent float64 NumPy reference
within docs/semantics.md section 7's tolerances, the golden data PyTorch
recorded (tests/golden), and the CLI; strided inputs read in place; out= and
weights_out= written in place; bad input refused with the engine's message
and nothing written; the GIL released during calls; the installed package.

Run from the repository root, with the build's python folder on the path:

    PYTHONPATH=BUILD/python ATTNSCORE_BUILD_DIR=BUILD \\
        /usr/bin/python3 -m pytest -q tests/python/test_numpy_api.py

(ctest runs it so: the test python_numpy_api). Without ATTNSCORE_BUILD_DIR
the CLI and install tests are skipped.
"""

import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

import attnscore

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
BUILD = os.environ.get("ATTNSCORE_BUILD_DIR")
ADDITIVE_KEYS = ("W_q.weight", "W_k.weight", "w_v.weight")
CONCAT_KEYS = ("attn.weight", "attn.bias", "attn_combine.weight", "attn_combine.bias")
SENTINEL = np.float32(-7.25)


# ---------------------------------------------------------------- references
# float64, written from docs/semantics.md; the engine's code is not consulted.

def row_lengths(lens, batch, queries, keys):
    """Each query row's valid length, clamped to M (section 1.2)."""
    if lens is None:
        return np.full((batch, queries), keys, np.int64)
    lens = np.asarray(lens, np.int64)
    if lens.ndim == 1:
        lens = np.repeat(lens[:, None], queries, axis=1)
    return np.minimum(lens, keys)


def ref_masked_softmax(x, lens):
    x = np.asarray(x, np.float64)
    batch, queries, keys = x.shape
    rows = row_lengths(lens, batch, queries, keys)
    y = np.zeros_like(x)
    for b in range(batch):
        for i in range(queries):
            n = rows[b, i]
            if n == 0:
                y[b, i] = 1.0 / keys  # no valid score: uniform
                continue
            e = np.exp(x[b, i, :n] - x[b, i, :n].max())
            y[b, i, :n] = e / e.sum()
    return y


def ref_dot(q, k, v, lens):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    w = ref_masked_softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), lens)
    return w @ v, w


def ref_additive(sd, q, k, v, lens):
    wq, wk, wv = (np.asarray(sd[n], np.float64) for n in ADDITIVE_KEYS)
    qh = np.asarray(q, np.float64) @ wq.T
    kh = np.asarray(k, np.float64) @ wk.T
    scores = np.tanh(qh[:, :, None, :] + kh[:, None, :, :]) @ wv[0]
    w = ref_masked_softmax(scores, lens)
    return w @ np.asarray(v, np.float64), w


def ref_concat(sd, q, k, v, lens):
    """Output, weights and the output's bound (section 7.1)."""
    aw, ab, cw, cb = (np.asarray(sd[n], np.float64) for n in CONCAT_KEYS)
    q64, v64 = np.asarray(q, np.float64), np.asarray(v, np.float64)
    scores = np.concatenate([q64, np.asarray(k, np.float64)], -1) @ aw.T + ab
    w = ref_masked_softmax(scores, lens)
    joined = np.concatenate([q64, w @ v64], -1)
    out = joined @ cw.T + cb
    attention_bound = 1e-5 * (1 + np.abs(v64).max())
    bound = (1e-4 * (np.abs(joined) @ np.abs(cw).T + np.abs(cb))
             + attention_bound * np.abs(cw[:, q64.shape[-1]:]).sum(axis=1))
    return out, w, bound


def assert_weights(got, want):
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def assert_output(got, want, v):
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * (1 + np.abs(v).max()))


# ------------------------------------------------------------------- helpers

def read_safetensors(path):
    """{name: float32 array} from a .safetensors file, read by hand."""
    data = pathlib.Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    arrays = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32"
        first, last = entry["data_offsets"]
        arrays[name] = np.frombuffer(body[first:last], "<f4").reshape(entry["shape"]).copy()
    return arrays


def write_safetensors(arrays, path):
    """Writes {name: array} as F32 .safetensors, by hand."""
    header, chunks, offset = {}, [], 0
    for name in sorted(arrays):
        blob = np.ascontiguousarray(arrays[name], "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(arrays[name])),
                        "data_offsets": [offset, offset + len(blob)]}
        chunks.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def golden(case):
    folder = GOLDEN / case
    return {p.stem: np.load(p) for p in folder.glob("*.npy")}


def toy_inputs(rng):
    """d2l's dot-product toy: keys all ones, values arange(40) per entry."""
    q = rng.standard_normal((2, 1, 2), dtype=np.float32)
    k = np.ones((2, 10, 2), np.float32)
    v = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))
    return q, k, v


def numpy_bytes_allocated_during(fn):
    """The peak of NumPy memory (as tracemalloc sees it) allocated while fn runs."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


@pytest.fixture(scope="module")
def engine():
    return attnscore.Engine()


@pytest.fixture()
def rng():
    return np.random.default_rng(22)


# ------------------------------------------------------------------- engine

def test_version_and_engine_properties(engine):
    assert re.fullmatch(r"\d+\.\d+\.\d+", attnscore.__version__)
    assert (engine.threads, engine.precision) == (1, "fp32")
    assert engine.isa in ("scalar", "sse4", "avx2", "avx512", "best")
    e = attnscore.Engine(threads=2, isa=engine.isa, precision="bf16")
    assert (e.threads, e.isa, e.precision) == (2, engine.isa, "bf16")
    assert "Engine(threads=2" in repr(e)
    for name in ("threads", "isa", "precision"):
        with pytest.raises(AttributeError):
            setattr(e, name, getattr(e, name))
    text = engine.describe()
    assert isinstance(text, str) and text.count("\n") >= 2


def test_masked_softmax_d2l_seed(engine, rng):
    # d2l's masked_softmax(torch.rand(2, 2, 4), ...) examples (section 1.7).
    x = rng.random((2, 2, 4), dtype=np.float32)
    y = engine.masked_softmax(x, np.array([2, 3]))
    assert y.shape == (2, 2, 4) and y.dtype == np.float32
    assert np.all(y[0, :, 2:] == 0) and np.all(y[1, :, 3:] == 0)
    np.testing.assert_allclose(y.sum(-1), 1, atol=1e-6)
    assert_weights(y, ref_masked_softmax(x, [2, 3]))
    y = engine.masked_softmax(x, np.array([[1, 3], [2, 4]], np.int32))
    np.testing.assert_array_equal(y[0, 0], [1, 0, 0, 0])
    assert_weights(y, ref_masked_softmax(x, [[1, 3], [2, 4]]))


def test_dot_product_d2l_toy(engine, rng):
    q, k, v = toy_inputs(rng)
    out, weights = engine.dot_product_attention(q, k, v, np.array([2, 6]), return_weights=True)
    assert_output(out, [[[2, 3, 4, 5]], [[10, 11, 12, 13]]], v)
    want = np.zeros((2, 1, 10))
    want[0, 0, :2], want[1, 0, :6] = 1 / 2, 1 / 6
    assert_weights(weights, want)
    only_out = engine.dot_product_attention(q, k, v, np.array([2, 6]))
    assert isinstance(only_out, np.ndarray)
    np.testing.assert_array_equal(only_out, out)


LENGTHS = {
    "none": None,
    "per_batch": [3, 9],
    "per_batch_zero_and_past_m": [0, 15],  # L = 0: uniform; L > M: every key
    "per_query": [[1, 0, 9], [11, 4, 2]],
}


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("form", sorted(LENGTHS))
def test_lengths_against_reference(engine, rng, form, dtype):
    lens = None if LENGTHS[form] is None else np.array(LENGTHS[form], dtype)
    x = rng.standard_normal((2, 3, 9), dtype=np.float32) * 4
    assert_weights(engine.masked_softmax(x, lens), ref_masked_softmax(x, LENGTHS[form]))
    q = rng.standard_normal((2, 3, 5), dtype=np.float32)
    k = rng.standard_normal((2, 9, 5), dtype=np.float32)
    v = rng.standard_normal((2, 9, 6), dtype=np.float32)
    out, w = engine.dot_product_attention(q, k, v, lens, return_weights=True)
    want_out, want_w = ref_dot(q, k, v, LENGTHS[form])
    assert_weights(w, want_w)
    assert_output(out, want_out, v)
    if form == "per_batch_zero_and_past_m":
        np.testing.assert_allclose(w[0], 1 / 9, atol=1e-6)


@pytest.mark.parametrize("case", ["softmax_seed_per_batch", "softmax_per_query_mixed",
                                  "softmax_odd_int32", "softmax_no_lens"])
def test_masked_softmax_golden(engine, case):
    g = golden(case)
    assert_weights(engine.masked_softmax(g["x"], g.get("valid_lens")), g["y"])


@pytest.mark.parametrize("case", ["dot_toy", "dot_no_lens", "dot_odd_per_query",
                                  "dot_per_batch_int32"])
def test_dot_product_golden(engine, case):
    g = golden(case)
    out, w = engine.dot_product_attention(g["queries"], g["keys"], g["values"],
                                          g.get("valid_lens"), return_weights=True)
    assert_weights(w, g["weights"])
    assert_output(out, g["out"], g["values"])


def test_transposed_keys_read_in_place(engine, rng):
    # K stored as (B, D, M) and passed as its (B, M, D) transpose: strides
    # (D*M, 1, M) floats, read where it lies. tracemalloc sees every NumPy
    # allocation, so a copy of K (8 MiB) would show; the engine's own scratch
    # is not NumPy's.
    kt = rng.standard_normal((2, 512, 2048), dtype=np.float32)
    k = kt.transpose(0, 2, 1)
    assert not k.flags.c_contiguous
    q = rng.standard_normal((2, 4, 512), dtype=np.float32)
    v = rng.standard_normal((2, 2048, 3), dtype=np.float32)
    lens = np.array([2048, 700])
    out = np.empty((2, 4, 3), np.float32)
    weights = np.empty((2, 4, 2048), np.float32)

    def call(keys):
        return lambda: engine.dot_product_attention(q, keys, v, lens, out=out, weights_out=weights)

    grown = numpy_bytes_allocated_during(call(k))
    assert grown < k.nbytes // 8, "K was copied: %d bytes allocated" % grown
    want_out, want_w = ref_dot(q, k, v, lens)
    assert_weights(weights, want_w)
    assert_output(out, want_out, v)
    # The measure does see a copy: negative strides force one.
    reversed_k = kt[:, ::-1].transpose(0, 2, 1)
    assert numpy_bytes_allocated_during(call(reversed_k)) >= k.nbytes
    assert_weights(weights, ref_dot(q, reversed_k, v, lens)[1])


def test_strided_and_unaligned_inputs(engine, rng):
    q = rng.standard_normal((3, 4, 6), dtype=np.float32)
    k = rng.standard_normal((3, 7, 6), dtype=np.float32)
    v = rng.standard_normal((3, 7, 5), dtype=np.float32)
    want_out, want_w = ref_dot(q, k, v, [3, 7, 0])
    # Every-other-column views, a Fortran-order copy, a broadcast (zero strides).
    padded = np.zeros((3, 7, 12), np.float32)
    padded[:, :, ::2] = k
    fortran = np.asfortranarray(v)
    out, w = engine.dot_product_attention(q, padded[:, :, ::2], fortran, np.array([3, 7, 0]),
                                          return_weights=True)
    assert_weights(w, want_w)
    assert_output(out, want_out, v)
    # Negative strides and unaligned data: copied to C order, so the same
    # bits as C-order inputs.
    out, w = engine.dot_product_attention(q, k, v, np.array([3, 7, 0]), return_weights=True)
    unaligned = np.frombuffer(b"\0\0" + q.tobytes(), np.float32, count=q.size, offset=2)
    unaligned = unaligned.reshape(q.shape)
    assert unaligned.ctypes.data % 4 != 0
    backwards = k[:, ::-1].copy()[:, ::-1]
    assert backwards.strides[1] < 0
    out2, w2 = engine.dot_product_attention(unaligned, backwards, v, np.array([3, 7, 0]),
                                            return_weights=True)
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_array_equal(out2, out)
    # Valid lengths that are not contiguous, per batch and per query.
    every_other = np.array([3, -1, 7, -1, 0, -1], np.int32)[::2]
    np.testing.assert_array_equal(
        engine.dot_product_attention(q, k, v, every_other), out)
    per_query = np.asfortranarray(np.array([[1, 2, 3, 4]] * 3, np.int64))
    assert_weights(engine.masked_softmax(w, per_query), ref_masked_softmax(w, per_query))
    # A broadcast input is read through its zero strides.
    x = np.broadcast_to(rng.standard_normal((1, 1, 9), dtype=np.float32), (2, 3, 9))
    assert_weights(engine.masked_softmax(x), ref_masked_softmax(x, None))


def test_out_and_weights_out_written_in_place(engine, rng):
    q, k, v = toy_inputs(rng)
    lens = np.array([2, 6])
    out = np.full((2, 1, 4), SENTINEL, np.float32)
    weights = np.full((2, 1, 10), SENTINEL, np.float32)
    result = engine.dot_product_attention(q, k, v, lens, out=out, weights_out=weights)
    assert isinstance(result, tuple) and result[0] is out and result[1] is weights
    assert_output(out, [[[2, 3, 4, 5]], [[10, 11, 12, 13]]], v)
    assert np.all(weights[0, 0, 2:] == 0) and np.all(weights[1, 0, 6:] == 0)
    # Only out given: out alone comes back, written in place.
    out[...] = SENTINEL
    assert engine.dot_product_attention(q, k, v, lens, out=out) is out
    assert_output(out, [[[2, 3, 4, 5]], [[10, 11, 12, 13]]], v)
    # Strided outputs: every other element of a bigger buffer, a transpose.
    big = np.full((2, 3, 20), SENTINEL, np.float32)
    strided_w = big[:, 1, ::2][:, None, :]
    tout = np.full((4, 1, 2), SENTINEL, np.float32).transpose(2, 1, 0)
    engine.dot_product_attention(q, k, v, lens, out=tout, weights_out=strided_w)
    assert_weights(strided_w, weights)  # another path: the same within the bounds
    assert_output(tout, out, v)
    assert np.all(big[:, 1, 1::2] == SENTINEL) and np.all(big[:, [0, 2]] == SENTINEL)
    # masked_softmax in place: out=x.
    x = rng.standard_normal((2, 2, 4), dtype=np.float32)
    want = ref_masked_softmax(x, [1, 3])
    assert engine.masked_softmax(x, np.array([1, 3]), out=x) is x
    assert_weights(x, want)


# -------------------------------------------------------------------- models

def test_additive_from_numpy_torch_and_files(engine, tmp_path):
    g = golden("additive_toy")
    path = GOLDEN / "additive_toy" / "model.safetensors"
    sd = read_safetensors(path)
    args = (g["queries"], g["keys"], g["values"], g["valid_lens"])
    model = attnscore.AdditiveAttention.from_state_dict(sd)
    assert (model.query_size, model.key_size, model.hidden_size) == (20, 2, 8)
    assert "hidden_size=8" in repr(model)
    out, w = model(engine, *args, return_weights=True)
    assert_weights(w, g["weights"])
    assert_output(out, g["out"], g["values"])
    want_out, want_w = ref_additive(sd, *args)
    assert_weights(w, want_w)
    assert_output(out, want_out, g["values"])
    # The same model from a file (the golden one, and one written here, by
    # str and by pathlib.Path) gives the same bits.
    write_safetensors(sd, tmp_path / "mine.safetensors")
    for source in (str(path), tmp_path / "mine.safetensors"):
        loaded = attnscore.AdditiveAttention.load(source)
        again, w_again = loaded(engine, *args, return_weights=True)
        np.testing.assert_array_equal(again, out)
        np.testing.assert_array_equal(w_again, w)
    # Strided weights (a transposed copy viewed back) are read as well.
    strided = {name: np.ascontiguousarray(a.T).T for name, a in sd.items()}
    np.testing.assert_array_equal(
        attnscore.AdditiveAttention.from_state_dict(strided)(engine, *args), out)

    torch = pytest.importorskip("torch")
    torch_sd = {name: torch.nn.Parameter(torch.from_numpy(a)) for name, a in sd.items()}
    from_torch = attnscore.AdditiveAttention.from_state_dict(torch_sd)
    np.testing.assert_array_equal(from_torch(engine, *args), out)


def test_models_from_the_torch_modules(engine, rng):
    """state_dict() of the reference modules (tools/seed_modules.py), as given."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import seed_modules
    finally:
        sys.path.remove(str(ROOT / "tools"))
    torch.manual_seed(3)
    module = seed_modules.AdditiveAttention(key_size=3, query_size=5, num_hiddens=16).eval()
    model = attnscore.AdditiveAttention.from_state_dict(module.state_dict())
    q = rng.standard_normal((2, 4, 5), dtype=np.float32)
    k = rng.standard_normal((2, 6, 3), dtype=np.float32)
    v = rng.standard_normal((2, 6, 7), dtype=np.float32)
    lens = np.array([[1, 2, 6, 0], [3, 9, 4, 5]])
    out, w = model(engine, q, k, v, lens, return_weights=True)
    with torch.no_grad():
        want = module(*(torch.from_numpy(a) for a in (q, k, v, lens)))
    assert_output(out, want.numpy(), v)
    assert_weights(w, module.attention_weights.numpy())

    attn = seed_modules.Attn(6, 4, 5, 3, 8).eval()
    concat = attnscore.ConcatAttention.from_state_dict(attn.state_dict(), query_size=6)
    assert (concat.query_size, concat.key_size, concat.value_rows, concat.value_size,
            concat.output_size) == (6, 4, 5, 3, 8)
    q = rng.standard_normal((2, 3, 6), dtype=np.float32)
    k = rng.standard_normal((2, 3, 4), dtype=np.float32)
    v = rng.standard_normal((2, 5, 3), dtype=np.float32)
    lens = np.array([2, 5], np.int32)
    out, w = concat(engine, q, k, v, lens, return_weights=True)
    with torch.no_grad():
        want_out, want_w = attn(*(torch.from_numpy(a) for a in (q, k, v, lens)))
    assert_weights(w, want_w.numpy())
    sd = {name: t.detach().numpy() for name, t in attn.state_dict().items()}
    ref_out, _, bound = ref_concat(sd, q, k, v, [2, 5])
    assert np.all(np.abs(out - ref_out) <= bound)
    # PyTorch's float32 result has an error of its own, of the same order.
    assert np.all(np.abs(out - want_out.numpy()) <= 2 * bound)


def test_concat_golden_from_numpy_and_file(engine, tmp_path):
    g = golden("concat_tutorial")
    path = GOLDEN / "concat_tutorial" / "model.safetensors"
    sd = read_safetensors(path)
    args = (g["queries"], g["keys"], g["values"])
    model = attnscore.ConcatAttention.from_state_dict(sd, query_size=32)
    out, w = model(engine, *args, return_weights=True)
    assert_weights(w, g["weights"])
    want_out, want_w, bound = ref_concat(sd, *args, None)
    assert_weights(w, want_w)
    assert np.all(np.abs(out - want_out) <= bound)
    assert np.all(np.abs(out - g["out"]) <= 2 * bound)
    write_safetensors(sd, tmp_path / "attn.safetensors")
    for source in (path, str(tmp_path / "attn.safetensors")):
        loaded = attnscore.ConcatAttention.load(source, 32)
        np.testing.assert_array_equal(loaded(engine, *args), out)
    # weights_out alone asks for the weights too.
    weights = np.full((1, 1, 32), SENTINEL, np.float32)
    result = model(engine, *args, weights_out=weights)
    assert result[1] is weights
    np.testing.assert_array_equal(weights, w)


# --------------------------------------------------------------- bad inputs

def _toy(rng):
    q, k, v = toy_inputs(rng)
    return {"q": q, "k": k, "v": v, "lens": np.array([2, 6])}


def _view_of(buffer, shape, strides, offset=0):
    return np.lib.stride_tricks.as_strided(buffer[offset:], shape, strides)


# (id, call(engine, args, out, weights), exception, message). `out` (2, 1, 4)
# and `weights` (2, 1, 10) start as SENTINEL and must stay so.
BAD_CALLS = [
    ("q_float64", lambda e, a, o, w: e.dot_product_attention(
        a["q"].astype(np.float64), a["k"], a["v"], out=o),
     TypeError, "q must be a float32 array, got float64"),
    ("k_list", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"].tolist(), a["v"], out=o),
     TypeError, "k must be a float32 array, got list"),
    ("v_int32", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"].astype(np.int32), out=o),
     TypeError, "v must be a float32 array, got int32"),
    ("q_big_endian", lambda e, a, o, w: e.dot_product_attention(
        a["q"].astype(">f4"), a["k"], a["v"], out=o),
     TypeError, "q must be a float32 array, got >f4"),
    ("q_scalar", lambda e, a, o, w: e.dot_product_attention(1.0, a["k"], a["v"], out=o),
     TypeError, "q must be a float32 array, got float"),
    ("q_rank_2", lambda e, a, o, w: e.dot_product_attention(a["q"][0], a["k"], a["v"], out=o),
     ValueError, "DotProductAttention: queries must have rank 3 (B, N, D) but has rank 2"),
    ("k_rank_5", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"].reshape(1, 2, 10, 2, 1), a["v"], out=o),
     ValueError, "keys must have rank 3"),
    ("k_wrong_d", lambda e, a, o, w: e.dot_product_attention(
        a["q"], np.ones((2, 10, 3), np.float32), a["v"], out=o),
     ValueError, "keys has shape (2, 10, 3) but must be (B, M, D) = (2, *, 2)"),
    ("v_wrong_m", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"][:, :9], out=o),
     ValueError, "values has shape (2, 9, 4)"),
    ("empty_dim", lambda e, a, o, w: e.dot_product_attention(
        a["q"][:, :0], a["k"], a["v"], out=o),
     ValueError, "every dim must be >= 1"),
    ("lens_negative", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], np.array([2, -6]), out=o, weights_out=w),
     ValueError, "DotProductAttention: valid_lens[1] is -6; lengths must be >= 0"),
    ("lens_per_query_negative", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], np.array([[2], [-1]], np.int32), out=o),
     ValueError, "valid_lens[1, 0] is -1"),
    ("lens_float", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], np.array([2.0, 6.0], np.float32), out=o),
     TypeError, "valid_lens must be None or an int32 or int64 array, got float32"),
    ("lens_list", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], [2, 6], out=o),
     TypeError, "valid_lens must be None or an int32 or int64 array, got list"),
    ("lens_uint32", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], np.array([2, 6], np.uint32), out=o),
     TypeError, "got uint32"),
    ("lens_wrong_batch", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], np.array([2, 6, 1]), out=o),
     ValueError, "valid_lens has shape (3,) but the batch size is 2"),
    ("lens_rank_3", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], np.ones((2, 1, 1), np.int64), out=o),
     ValueError, "valid_lens has shape (2, 1, 1) but must be (B,)"),
    ("out_wrong_shape", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=o[:, :, :3]),
     ValueError, "DotProductAttention: out has shape (2, 1, 3) but must be (B, N, Dv) = (2, 1, 4)"),
    ("out_float64", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=np.zeros((2, 1, 4)), weights_out=w),
     TypeError, "out must be a float32 array, got float64"),
    ("out_read_only", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=np.broadcast_to(o, o.shape)),
     ValueError, "out is read-only"),
    ("weights_out_wrong_shape", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=o, weights_out=w[:, :, :9]),
     ValueError, "attention_weights has shape (2, 1, 9)"),
    ("weights_out_int", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=o, weights_out=w.astype(np.int32)),
     TypeError, "weights_out must be a float32 array, got int32"),
    ("out_overlaps_q", lambda e, a, o, w: e.dot_product_attention(
        o[:, :, :2], a["k"], a["v"], out=o),
     ValueError, "out overlaps queries"),
    ("out_overlaps_weights", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=w[:, :, :4], weights_out=w),
     ValueError, "overlaps"),
    ("out_shared_elements", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=_view_of(o.reshape(-1), (2, 1, 4), (0, 0, 4))),
     ValueError, "out has strides that make elements share memory"),
    ("out_negative_stride", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"], out=o[:, :, ::-1]),
     ValueError, "out has a negative stride"),
    ("out_unaligned", lambda e, a, o, w: e.dot_product_attention(
        a["q"], a["k"], a["v"],
        out=np.frombuffer(bytearray(40), np.float32, 8, 2).reshape(2, 1, 4)),
     ValueError, "out cannot be written in place"),
    ("softmax_rank_4", lambda e, a, o, w: e.masked_softmax(np.ones((1, 2, 1, 4), np.float32),
                                                           out=o),
     ValueError, "MaskedSoftmax: x must have rank 3"),
    ("softmax_out_overlaps_x", lambda e, a, o, w: e.masked_softmax(
        w[:, :, :5], out=w[:, :, 5:]),
     ValueError, "MaskedSoftmax: y overlaps x"),
    ("additive_wrong_query_size", lambda e, a, o, w: attnscore.AdditiveAttention.load(
        GOLDEN / "additive_toy" / "model.safetensors")(e, a["q"], a["k"], a["v"], out=o),
     ValueError, "AdditiveAttention: queries has shape (2, 1, 2)"),
    ("concat_keys_per_query", lambda e, a, o, w: attnscore.ConcatAttention.load(
        GOLDEN / "concat_tutorial" / "model.safetensors", 32)(
            e, np.ones((2, 1, 32), np.float32), np.ones((2, 2, 32), np.float32),
            np.ones((2, 32, 64), np.float32), out=o),
     ValueError, "ConcatAttention: keys has shape (2, 2, 32)"),
    ("model_engine_missing", lambda e, a, o, w: attnscore.AdditiveAttention.load(
        GOLDEN / "additive_toy" / "model.safetensors")(None, a["q"], a["k"], a["v"], out=o),
     TypeError, "incompatible function arguments"),
]


@pytest.mark.parametrize("call,error,message", [c[1:] for c in BAD_CALLS],
                         ids=[c[0] for c in BAD_CALLS])
def test_bad_call_raises_and_writes_nothing(engine, rng, call, error, message):
    args = _toy(rng)
    inputs = {name: a.copy() for name, a in args.items()}
    out = np.full((2, 1, 4), SENTINEL, np.float32)
    weights = np.full((2, 1, 10), SENTINEL, np.float32)
    with pytest.raises(error) as raised:
        call(engine, args, out, weights)
    assert message in str(raised.value)
    assert np.all(out == SENTINEL) and np.all(weights == SENTINEL)
    for name, a in args.items():
        np.testing.assert_array_equal(a, inputs[name])


def test_bad_engines_and_models(engine, tmp_path):
    with pytest.raises(ValueError, match="threads is 0"):
        attnscore.Engine(threads=0)
    with pytest.raises(ValueError, match="isa is 'avx9'"):
        attnscore.Engine(isa="avx9")
    with pytest.raises(ValueError, match="precision is 'fp16'"):
        attnscore.Engine(precision="fp16")
    # Unsupported (the process-wide ISA cap cannot change) is a ValueError too.
    other = "scalar" if engine.isa != "scalar" else "sse4"
    with pytest.raises(ValueError, match="ISA cap is process-wide"):
        attnscore.Engine(isa=other)

    sd = read_safetensors(GOLDEN / "additive_toy" / "model.safetensors")
    nan = dict(sd, **{"W_k.weight": sd["W_k.weight"].copy()})
    nan["W_k.weight"][3, 1] = np.nan
    with pytest.raises(ValueError, match=r"W_k.weight has NaN at \(3, 1\)"):
        attnscore.AdditiveAttention.from_state_dict(nan)
    with pytest.raises(TypeError, match="W_q.weight must be a float32 array, got float64"):
        attnscore.AdditiveAttention.from_state_dict(
            dict(sd, **{"W_q.weight": sd["W_q.weight"].astype(np.float64)}))
    with pytest.raises(ValueError, match="missing w_v.weight; unexpected extra"):
        attnscore.AdditiveAttention.from_state_dict(
            {"W_q.weight": sd["W_q.weight"], "W_k.weight": sd["W_k.weight"], "extra": 1})
    with pytest.raises(TypeError, match="must be a mapping"):
        attnscore.AdditiveAttention.from_state_dict([1, 2, 3])
    with pytest.raises(ValueError, match="w_v.weight"):
        attnscore.AdditiveAttention.from_state_dict(
            dict(sd, **{"w_v.weight": np.ones((2, 8), np.float32)}))
    with pytest.raises(ValueError, match="attn.weight"):
        attnscore.ConcatAttention.from_state_dict(
            read_safetensors(GOLDEN / "concat_tutorial" / "model.safetensors"), query_size=80)
    # Files: IoError is an OSError naming the file; another model's file, a
    # ValueError naming the tensor.
    missing = tmp_path / "absent.safetensors"
    with pytest.raises(OSError, match="absent.safetensors"):
        attnscore.AdditiveAttention.load(missing)
    with pytest.raises(ValueError, match='unexpected tensor "attn'):
        attnscore.AdditiveAttention.load(GOLDEN / "concat_tutorial" / "model.safetensors")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match="garbage.safetensors"):
        attnscore.ConcatAttention.load(garbage, 32)
    with pytest.raises(ValueError, match="null byte"):
        attnscore.AdditiveAttention.load("a\0b")


# -------------------------------------------------------------- GIL release

def _large_dot_call(batch=8):
    """A 1-thread engine and a dot-product call of some 3 ms per batch entry,
    writing into `slot`."""
    e = attnscore.Engine(threads=1)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((batch, 256, 128), dtype=np.float32)
    k = rng.standard_normal((batch, 1024, 128), dtype=np.float32)
    v = rng.standard_normal((batch, 1024, 128), dtype=np.float32)
    outs = [np.empty((batch, 256, 128), np.float32) for _ in range(2)]
    return lambda slot: e.dot_product_attention(q, k, v, out=outs[slot]), outs


def test_gil_released_during_a_call():
    """While one thread is inside a single engine call, another runs Python:
    the call released the GIL (holding it, not one iteration of the loop
    below could run until the call returned). No timing is asserted: the
    speed of two threads is measured by bench/python_threads.py."""
    call, _ = _large_dot_call(batch=32)
    call(0)
    inside = {}

    def worker():
        inside["start"] = time.perf_counter()
        call(0)
        inside["end"] = time.perf_counter()

    thread = threading.Thread(target=worker)
    stamps = []
    thread.start()
    while thread.is_alive():
        stamps.append(time.perf_counter())
    thread.join()
    during = [t for t in stamps if inside["start"] < t < inside["end"]]
    assert len(during) > 10, "the main thread ran %d times during the call" % len(during)


# ---------------------------------------------------- the CLI, the install

def _build_file(*parts):
    if not BUILD:
        pytest.skip("ATTNSCORE_BUILD_DIR is not set")
    path = pathlib.Path(BUILD, *parts)
    if not path.exists():
        pytest.skip("%s is not built" % path)
    return path


def test_same_bits_as_the_cli(engine, rng, tmp_path):
    cli = _build_file("bin", "attnscore")
    q = rng.standard_normal((3, 5, 16), dtype=np.float32)
    k = rng.standard_normal((3, 11, 16), dtype=np.float32)
    v = rng.standard_normal((3, 11, 6), dtype=np.float32)
    lens = np.array([[1, 4, 11, 0, 30]] * 3, np.int32)
    for name, a in dict(q=q, k=k, v=v, lens=lens).items():
        np.save(tmp_path / (name + ".npy"), a)
    subprocess.run([str(cli), "run", "dot", "--queries", str(tmp_path / "q.npy"),
                    "--keys", str(tmp_path / "k.npy"), "--values", str(tmp_path / "v.npy"),
                    "--valid-lens", str(tmp_path / "lens.npy"), "--out", str(tmp_path / "o.npy"),
                    "--weights-out", str(tmp_path / "w.npy")], check=True)
    out, w = engine.dot_product_attention(q, k, v, lens, return_weights=True)
    np.testing.assert_array_equal(out, np.load(tmp_path / "o.npy"))
    np.testing.assert_array_equal(w, np.load(tmp_path / "w.npy"))


def test_installed_package_imports_from_its_prefix(tmp_path):
    _build_file("python", "attnscore", "__init__.py")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix)], check=True,
                   stdout=subprocess.DEVNULL)
    packages = prefix / "lib" / "python3" / "dist-packages"
    installed = sorted(p.name for p in (packages / "attnscore").iterdir())
    assert "__init__.py" in installed
    assert any(name.startswith("_attnscore") and name.endswith(".so") for name in installed)
    script = (
        "import numpy as np, attnscore\n"
        "e = attnscore.Engine()\n"
        "q = np.zeros((2, 1, 2), np.float32); k = np.ones((2, 10, 2), np.float32)\n"
        "v = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))\n"
        "print(attnscore.__file__)\n"
        "print(e.dot_product_attention(q, k, v, np.array([2, 6])).ravel().round(3).tolist())\n"
        "print([l.split()[-1] for l in open('/proc/self/maps') if 'libattnscore.so' in l][0])\n")
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(packages)
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(tmp_path),
                            check=True, capture_output=True, text=True)
    module_file, values, library = result.stdout.splitlines()
    assert module_file.startswith(str(packages))
    assert values == str([2.0, 3.0, 4.0, 5.0, 10.0, 11.0, 12.0, 13.0])
    assert library.startswith(str(prefix / "lib"))


# ---------------------------------------------------- multi-head, cache, bilinear

def ref_multihead(q, k, v, lens, causal, scale, softcap=0.0, window=None, sinks=None,
                  alibi=None, bias=None):
    """docs/semantics.md section 5.1 in float64: head h reads K/V head
    h // (Hq // Hkv); each score s capped to softcap * tanh(s / softcap) for
    softcap > 0; positions past a query's (causally cut) length get -1e6;
    with window (left, right), a query of length > 0 at p = i + M - N keeps
    keys p - left <= j <= p + right (-1: unbounded), weights 0 and output 0
    when none is left; sinks (Hq,) add exp(sinks[h]) to the denominators of
    queries of length > 0; after the cap, alibi (Hq,) subtracts
    alibi[h] * |p - j| and bias (broadcast to (B, Hq, N, M)) is added, or
    as bools masks its False keys."""
    if bias is not None:
        bias = np.broadcast_to(bias, (q.shape[0], q.shape[2], q.shape[1], k.shape[1]))
    b, n, hq, d = q.shape
    m, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    out = np.zeros((b, n, hq, v.shape[3]))
    weights = np.zeros((b, hq, n, m))
    for e in range(b):
        for i in range(n):
            length = m if lens is None else int(lens[e] if lens.ndim == 1 else lens[e, i])
            if causal == "top-left":
                length = min(length, i + 1)
            elif causal == "bottom-right":
                length = min(length, m - n + i + 1)
            for h in range(hq):
                s = scale * (k[e, :, h // group].astype(np.float64) @ q[e, i, h].astype(np.float64))
                if softcap > 0:
                    s = softcap * np.tanh(s / softcap)
                if alibi is not None:
                    s = s - np.float64(alibi[h]) * np.abs(i + m - n - np.arange(m))
                if bias is not None:
                    s = np.where(bias[e, h, i], s, -np.inf) if bias.dtype == bool else \
                        s + bias[e, h, i]
                s[np.arange(m) >= length] = -1e6 if length == 0 else -np.inf
                if window is not None and length > 0:
                    j, at = np.arange(m), i + m - n
                    outside = (window[0] >= 0) & (j < at - window[0])
                    outside |= (window[1] >= 0) & (j > at + window[1])
                    s[outside] = -np.inf
                    if not np.any(~outside & (j < length)):
                        continue  # no key left: weights 0, output 0
                p = np.exp(s - s.max())
                denominator = p.sum()
                if sinks is not None and length > 0:
                    denominator += np.exp(np.float64(sinks[h]) - s.max())
                p /= denominator
                weights[e, h, i] = p
                out[e, i, h] = p @ v[e, :, h // group].astype(np.float64)
    return out, weights


@pytest.mark.parametrize("causal", ["none", "bottom-right"])
@pytest.mark.parametrize("window", [(0, 0), (3, -1), (2, 1), (-1, 0)])
@pytest.mark.parametrize("n", [2, 9])
def test_multihead_attention_window(engine, rng, causal, window, n):
    q = rng.standard_normal((2, n, 4, 8), dtype=np.float32)
    k = rng.standard_normal((2, 12, 2, 8), dtype=np.float32)
    v = rng.standard_normal((2, 12, 2, 4), dtype=np.float32)
    lens = rng.integers(0, 13, (2, n)).astype(np.int64)
    out, w = engine.multihead_attention(q, k, v, lens, causal=causal, window=window,
                                        return_weights=True)
    want_out, want_w = ref_multihead(q, k, v, lens, causal, 1 / np.sqrt(8), window=window)
    assert_weights(w, want_w)
    assert_output(out, want_out, v)
    # A list works as the tuple does; None is every key.
    again = engine.multihead_attention(q, k, v, lens, causal=causal, window=list(window))
    assert np.array_equal(again, out)
    every = engine.multihead_attention(q, k, v, lens, causal=causal, window=None)
    assert np.array_equal(every, engine.multihead_attention(q, k, v, lens, causal=causal))


@pytest.mark.parametrize("n", [1, 9])
def test_multihead_attention_sinks(engine, rng, n):
    q = rng.standard_normal((2, n, 4, 8), dtype=np.float32)
    k = rng.standard_normal((2, 12, 2, 8), dtype=np.float32)
    v = rng.standard_normal((2, 12, 2, 4), dtype=np.float32)
    sinks = np.array([0.5, -1.0, 2.0, 6.0], np.float32)
    out, w = engine.multihead_attention(q, k, v, causal="bottom-right", window=(5, 0),
                                        softcap=2.0, sinks=sinks, return_weights=True)
    want_out, want_w = ref_multihead(q, k, v, None, "bottom-right", 1 / np.sqrt(8), softcap=2.0,
                                     window=(5, 0), sinks=sinks)
    assert_weights(w, want_w)
    assert_output(out, want_out, v)
    assert np.all(w.sum(axis=-1) < 1)  # the sinks hold the rest
    # A cache's step with the same sinks: the op's bits.
    cache = attnscore.KvCache(batch=2, capacity=12, kv_heads=2, key_dim=8, value_dim=4)
    cache.append(k, v)
    got = cache.attend(engine, q, sinks=sinks)
    plain = engine.multihead_attention(q, k, v, causal="bottom-right", sinks=sinks)
    assert np.array_equal(got, plain)
    with pytest.raises(ValueError, match=r"sinks has shape \(3\) but must be \(Hq,\) = \(4\)"):
        engine.multihead_attention(q, k, v, sinks=sinks[:3])
    with pytest.raises(ValueError, match=r"KvCache: sinks\[0\] is NaN"):
        cache.attend(engine, q, sinks=np.full(4, np.nan, np.float32))


@pytest.mark.parametrize("n", [2, 9])
def test_multihead_attention_alibi_and_bias(engine, rng, n):
    q = rng.standard_normal((2, n, 4, 8), dtype=np.float32)
    k = rng.standard_normal((2, 12, 2, 8), dtype=np.float32)
    v = rng.standard_normal((2, 12, 2, 4), dtype=np.float32)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    bias = rng.standard_normal((1, 4, 1, 12)).astype(np.float32)  # broadcast over B and N
    out, w = engine.multihead_attention(q, k, v, causal="bottom-right", alibi_slopes=slopes,
                                        bias=bias, return_weights=True)
    want_out, want_w = ref_multihead(q, k, v, None, "bottom-right", 1 / np.sqrt(8),
                                     alibi=slopes, bias=bias)
    assert_weights(w, want_w)
    assert_output(out, want_out, v)
    # A bool mask keeps its True keys: the bias of -inf at its False ones.
    keep = rng.random((2, 4, n, 12)) > 0.3
    keep[..., -1] = True  # every row keeps its last key, which bottom-right always shows
    got = engine.multihead_attention(q, k, v, causal="bottom-right", bias=keep)
    as_bias = np.where(keep, 0.0, -np.inf).astype(np.float32)
    want = engine.multihead_attention(q, k, v, causal="bottom-right", bias=as_bias)
    assert np.array_equal(got, want)
    want_out, _ = ref_multihead(q, k, v, None, "bottom-right", 1 / np.sqrt(8), bias=keep)
    assert_output(got, want_out, v)
    with pytest.raises(ValueError, match=r"bias has shape \(2, 4, 3\); want \(B, Hq, N, M\)"):
        engine.multihead_attention(q, k, v, bias=np.zeros((2, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"alibi_slopes\[0\] is nan"):
        engine.multihead_attention(q, k, v, alibi_slopes=np.full(4, np.nan, np.float32))


def test_multihead_attention_packed(engine, rng):
    """A packed batch (lengths 37, 1, 8, 64, 3; causal, window, sinks): each
    sequence's rows are its own call's, and float64 math on them."""
    n, m = [37, 1, 8, 64, 3], [40, 5, 8, 100, 19]
    cu_q = np.concatenate([[0], np.cumsum(n)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(m)]).astype(np.int64)
    q = rng.standard_normal((cu_q[-1], 4, 8), dtype=np.float32)
    k = rng.standard_normal((cu_k[-1], 2, 8), dtype=np.float32)
    v = rng.standard_normal((cu_k[-1], 2, 4), dtype=np.float32)
    sinks = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    keywords = dict(causal="bottom-right", window=(20, 0), sinks=sinks)
    out = engine.multihead_attention_packed(q, k, v, cu_q, cu_k, **keywords)
    assert out.shape == (cu_q[-1], 4, 4)
    for s in range(len(n)):
        qs, ks, vs = (x[None, a:b] for x, a, b in ((q, cu_q[s], cu_q[s + 1]),
                                                 (k, cu_k[s], cu_k[s + 1]),
                                                 (v, cu_k[s], cu_k[s + 1])))
        alone = engine.multihead_attention(qs, ks, vs, **keywords)
        assert np.array_equal(alone[0], out[cu_q[s]:cu_q[s + 1]])
        want, _ = ref_multihead(qs, ks, vs, None, "bottom-right", 1 / np.sqrt(8), window=(20, 0),
                                sinks=sinks)
        assert_output(alone, want, vs)
    given = np.full_like(out, 7.0)
    short = cu_k.copy()
    short[-1] -= 1
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[5\] is 171; the last offset must be"):
        engine.multihead_attention_packed(q, k, v, cu_q, short, out=given)
    assert np.all(given == 7.0)
    with pytest.raises(ValueError, match="returns no weights"):
        engine.multihead_attention_packed(q, k, v, cu_q, cu_k, return_weights=True)
    with pytest.raises(TypeError, match="cu_seqlens_q must be an int32 or int64 array"):
        engine.multihead_attention_packed(q, k, v, cu_q.astype(np.float32), cu_k)


def test_multihead_attention_window_refusals(engine, rng):
    q = rng.standard_normal((1, 3, 2, 8), dtype=np.float32)
    k = rng.standard_normal((1, 5, 2, 8), dtype=np.float32)
    out = np.full((1, 3, 2, 8), 7.0, np.float32)
    with pytest.raises(ValueError, match=r"window is \(-2, 0\); each side must be >= 0"):
        engine.multihead_attention(q, k, k, window=(-2, 0), out=out)
    assert np.all(out == 7.0)
    for bad in [3, (1,), (1, 2, 3), (1.5, 0), (True, 0), "ab"]:
        with pytest.raises(TypeError, match="window is None or .left, right."):
            engine.multihead_attention(q, k, k, window=bad, out=out)
    # softcap written positionally, as before window came, lands on window: refused.
    with pytest.raises(TypeError, match="window is None"):
        engine.multihead_attention(q, k, k, None, "none", 0.0, 1.5)
    assert np.all(out == 7.0)


@pytest.mark.parametrize("causal", ["none", "top-left", "bottom-right"])
def test_multihead_attention_grouped_heads(engine, rng, causal):
    q = rng.standard_normal((2, 5, 6, 8), dtype=np.float32)
    k = rng.standard_normal((2, 7, 2, 8), dtype=np.float32)
    v = rng.standard_normal((2, 7, 2, 4), dtype=np.float32)
    lens = np.array([[1, 7, 0, 3, 9], [2, 2, 5, 6, 7]], np.int64)
    out, w = engine.multihead_attention(q, k, v, lens, causal=causal, return_weights=True)
    want_out, want_w = ref_multihead(q, k, v, lens, causal, 1 / np.sqrt(8))
    assert out.shape == (2, 5, 6, 4) and w.shape == (2, 6, 5, 7)
    assert_weights(w, want_w)
    assert_output(out, want_out, v)
    # Heads-first memory passes as a transposed view, read in place: same bits.
    q_first = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
    again = engine.multihead_attention(q_first.transpose(0, 2, 1, 3), k, v, lens, causal=causal)
    assert np.array_equal(again, out)
    with pytest.raises(ValueError, match="causal is 'diagonal'"):
        engine.multihead_attention(q, k, v, causal="diagonal")
    with pytest.raises(ValueError, match="query heads Hq must be a multiple"):
        engine.multihead_attention(q[:, :, :5], k, v)


@pytest.mark.parametrize("n", [2, 9])  # the row path, the matmul path
def test_multihead_attention_soft_cap(engine, rng, n):
    q = rng.standard_normal((2, n, 4, 16), dtype=np.float32)
    k = rng.standard_normal((2, 11, 2, 16), dtype=np.float32)
    v = rng.standard_normal((2, 11, 2, 8), dtype=np.float32)
    out, w = engine.multihead_attention(q, k, v, causal="bottom-right", scale=0.5, softcap=1.5,
                                        return_weights=True)
    want_out, want_w = ref_multihead(q, k, v, None, "bottom-right", 0.5, softcap=1.5)
    assert_weights(w, want_w)
    assert_output(out, want_out, v)
    uncapped, _ = ref_multihead(q, k, v, None, "bottom-right", 0.5)
    assert np.abs(uncapped - want_out).max() > 0.01  # the cap matters here
    with pytest.raises(ValueError, match="softcap is -1.000000; it must be finite and >= 0"):
        engine.multihead_attention(q, k, v, softcap=-1.0)
    # A call written before softcap came, return_weights where window now is;
    # and a bool for softcap by name.
    with pytest.raises(TypeError, match="window is None or .* got bool"):
        engine.multihead_attention(q, k, v, None, "none", 0.0, True)
    with pytest.raises(TypeError, match="softcap is a number .* got a bool"):
        engine.multihead_attention(q, k, v, softcap=True)
    # A cache's step with the same options: the op's answer.
    cache = attnscore.KvCache(batch=2, capacity=11, kv_heads=2, key_dim=16, value_dim=8)
    cache.append(k, v)
    got, got_w = cache.attend(engine, q, return_weights=True, scale=0.5, softcap=1.5)
    assert np.array_equal(got, out) and np.array_equal(got_w, w)
    with pytest.raises(ValueError, match="KvCache: softcap is -1.000000"):
        cache.attend(engine, q, softcap=-1.0)


def test_kv_cache_decode_steps(engine, rng):
    k = rng.standard_normal((2, 6, 2, 8), dtype=np.float32)
    v = rng.standard_normal((2, 6, 2, 8), dtype=np.float32)
    q = rng.standard_normal((2, 6, 4, 8), dtype=np.float32)
    cache = attnscore.KvCache(batch=2, capacity=8, kv_heads=2, key_dim=8, value_dim=8)
    want_out, _ = ref_multihead(q, k, v, None, "top-left", 1 / np.sqrt(8))
    for t in range(6):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        assert cache.length(0) == t + 1
        out, w = cache.attend(engine, q[:, t:t + 1], return_weights=True)
        assert w.shape == (2, 4, 1, t + 1)
        assert_output(out[:, 0], want_out[:, t], v)
    with pytest.raises(ValueError, match="holds 6 of its 8 positions; 3 more do not fit"):
        cache.append(k[:, :3], v[:, :3])
    assert cache.length(1) == 6
    cache.clear(1)
    assert cache.length(1) == 0


def test_kv_cache_pool_shares_blocks(engine, rng):
    block = os.sysconf("SC_PAGESIZE") // (64 * 4)  # the fewest positions of whole pages
    assert attnscore.KvCache.block_positions_multiple(64, 64) == block
    assert attnscore.KvCache.block_positions_multiple(64, 32) == 2 * block
    assert attnscore.KvCache.block_positions_multiple(0, 64) == 0
    k = rng.standard_normal((2, block + 1, 2, 64), dtype=np.float32)
    v = rng.standard_normal((2, block + 1, 2, 64), dtype=np.float32)
    q = rng.standard_normal((2, 1, 4, 64), dtype=np.float32)
    pool = attnscore.KvCache(2, 4 * block, 2, 64, 64, block_positions=block, blocks=3)
    own = attnscore.KvCache(2, 4 * block, 2, 64, 64)
    assert "block_positions=%d, blocks=3" % block in repr(pool)
    with pytest.raises(ValueError, match="the pool has 3 of its 3 blocks .* needs 4"):
        pool.append(k, v)
    assert pool.blocks_in_use() == 0 and pool.length(0) == 0
    for cache in (pool, own):
        cache.append_to(0, k[0], v[0])
        cache.append_to(1, k[1, :1], v[1, :1])
    assert pool.blocks_in_use() == 3
    assert own.blocks_in_use() == 0
    assert np.array_equal(pool.attend(engine, q), own.attend(engine, q))
    pool.clear(0)
    assert pool.blocks_in_use() == 1
    with pytest.raises(ValueError, match="block_positions must be a multiple of %d" % block):
        attnscore.KvCache(2, 8, 2, 64, 64, block_positions=block // 2, blocks=3)


def rounded_to_bf16(x):
    """x (float32) rounded to the nearest bfloat16, ties to even, as floats."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    low, kept = bits & 0xFFFF, bits >> 16
    up = (low > 0x8000) | ((low == 0x8000) & ((kept & 1) == 1))
    return ((kept + up) << 16).astype(np.uint32).view(np.float32)


def test_kv_cache_in_bf16_attends_over_the_rounded_keys_and_values(engine, rng):
    k = rng.standard_normal((2, 50, 2, 16), dtype=np.float32)
    v = rng.standard_normal((2, 50, 2, 16), dtype=np.float32)
    q = rng.standard_normal((2, 50, 4, 16), dtype=np.float32)
    cache = attnscore.KvCache(2, 64, 2, 16, 16, precision="bf16")
    assert cache.precision == "bf16"
    assert "precision='bf16'" in repr(cache)
    assert attnscore.KvCache(2, 64, 2, 16, 16).precision == "fp32"
    cache.append(k, v)
    want, _ = ref_multihead(q, rounded_to_bf16(k), rounded_to_bf16(v), None, "top-left",
                            1 / np.sqrt(16))
    out = cache.attend(engine, q[:, 49:])
    assert_output(out[:, 0], want[:, 49], v)
    assert (attnscore.KvCache.block_positions_multiple(64, 64, "bf16")
            == 2 * attnscore.KvCache.block_positions_multiple(64, 64))
    with pytest.raises(ValueError, match="precision is 'int4'; want 'fp32', 'bf16' or 'int8'"):
        attnscore.KvCache(2, 64, 2, 16, 16, precision="int4")


def int8_coded(k, v, group=16):
    """What an int8 cache's codes stand for (docs/semantics.md section 5.3):
    keys (B, L, H, D) per head in groups of `group` positions with a lo and a
    step per channel, values per position and head with one scale."""
    k, v = k.astype(np.float64), v.astype(np.float64)
    coded_k = np.empty_like(k)
    for first in range(0, k.shape[1], group):
        part = k[:, first:first + group]
        lo = part.min(axis=1, keepdims=True).astype(np.float32).astype(np.float64)
        step = ((part.max(axis=1, keepdims=True) - lo) / 255).astype(np.float32).astype(np.float64)
        code = np.clip(np.rint((part - lo) / np.where(step > 0, step, 1)), 0, 255)
        coded_k[:, first:first + group] = lo + step * np.where(step > 0, code, 0)
    scale = (np.abs(v).max(axis=-1, keepdims=True) / 127).astype(np.float32).astype(np.float64)
    code = np.clip(np.rint(v / np.where(scale > 0, scale, 1)), -127, 127)
    return coded_k.astype(np.float32), (scale * code).astype(np.float32)


def test_kv_cache_in_int8_attends_over_what_its_codes_stand_for(engine, rng):
    k = rng.standard_normal((2, 50, 2, 16), dtype=np.float32)
    k[..., 3] *= 30  # a channel 30x the others
    v = rng.standard_normal((2, 50, 2, 16), dtype=np.float32)
    q = rng.standard_normal((2, 50, 4, 16), dtype=np.float32)
    cache = attnscore.KvCache(2, 64, 2, 16, 16, precision="int8")
    assert cache.precision == "int8"
    assert "precision='int8'" in repr(cache)
    cache.append(k[:, :20], v[:, :20])
    cache.append(k[:, 20:], v[:, 20:])  # a group filled across two appends
    coded_k, coded_v = int8_coded(k, v)
    want, _ = ref_multihead(q, coded_k, coded_v, None, "top-left", 1 / np.sqrt(16))
    out = cache.attend(engine, q[:, 47:])
    assert_output(out, want[:, 47:], v)
    assert attnscore.KvCache.block_positions_multiple(64, 64, "int8") % 16 == 0
    bad = k[:, :2].copy()
    bad[1, 1, 0, 5] = np.inf
    with pytest.raises(ValueError, match=r"int8 cache holds finite keys and values; "
                                         r"keys\[1, 1, 0, 5\] is inf"):
        cache.append(bad, v[:, :2])
    assert cache.length(1) == 50
    with pytest.raises(ValueError, match="precision is 'int8'; want fp32 or bf16"):
        attnscore.Engine(precision="int8")


def test_multihead_and_bilinear_modules_from_torch(engine, rng):
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import seed_modules
    finally:
        sys.path.remove(str(ROOT / "tools"))
    torch.manual_seed(5)
    for bias in (False, True):
        module = seed_modules.MultiHeadAttention(6, 10, 5, 16, 4, bias=bias).eval()
        model = attnscore.MultiHeadAttention.from_state_dict(module.state_dict(), num_heads=4)
        assert (model.num_heads, model.num_hiddens, model.has_bias) == (4, 16, bias)
        q = rng.standard_normal((2, 3, 10), dtype=np.float32)
        k = rng.standard_normal((2, 7, 6), dtype=np.float32)
        v = rng.standard_normal((2, 7, 5), dtype=np.float32)
        lens = np.array([0, 5])
        out, w = model(engine, q, k, v, lens, return_weights=True)
        with torch.no_grad():
            want = module(*(torch.from_numpy(a) for a in (q, k, v, lens))).numpy()
        assert w.shape == (2, 4, 3, 7)
        assert_weights(w, module.attention_weights.numpy().reshape(2, 4, 3, 7))
        assert np.all(np.abs(out - want) <= 1e-4 * (1 + np.abs(want)))
    bilinear = seed_modules.BilinearAttention(key_size=3, query_size=5).eval()
    model = attnscore.BilinearAttention.from_state_dict(bilinear.state_dict())
    q = rng.standard_normal((2, 4, 5), dtype=np.float32)
    k = rng.standard_normal((2, 6, 3), dtype=np.float32)
    v = rng.standard_normal((2, 6, 2), dtype=np.float32)
    out, w = model(engine, q, k, v, np.array([3, 6]), return_weights=True)
    with torch.no_grad():
        want = bilinear(*(torch.from_numpy(a) for a in (q, k, v, np.array([3, 6]))))
    assert_weights(w, bilinear.attention_weights.numpy())
    assert_output(out, want.numpy(), v)
    with pytest.raises(ValueError, match="missing W.weight"):
        attnscore.BilinearAttention.from_state_dict({})
    with pytest.raises(ValueError, match="num_heads is 3"):
        attnscore.MultiHeadAttention.from_state_dict(module.state_dict(), num_heads=3)
