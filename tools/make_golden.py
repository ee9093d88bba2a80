#!/usr/bin/python3
"""Generate the golden files for attnscore's masked softmax, scaled
dot-product attention, additive attention, concat attention, d2l's
multi-head attention and the bilinear score (docs/semantics.md sections 1-6).

The reference is the d2l "Attention Scoring Functions" code (seeds/003, 004),
re-stated below in a few lines: masked_softmax via sequence_mask(value=-1e6)
and DotProductAttention in eval mode (dropout inactive).

Inputs are drawn as float32 with a fixed torch seed per case; the reference
runs in float64 on those same float32 values (cast to double) and the expected
outputs are stored as float32. Files go to tests/golden/<case>/, one tensor
per file, little-endian C order; a case of a module with weights also has them as
model.safetensors (the module's state_dict, written by tools/export_torch.py).
Running the script twice yields byte-identical files.

Usage: tools/make_golden.py [--out DIR]
"""

import argparse
import os
import sys

import numpy as np
import torch

import copy

from export_torch import save_safetensors  # tools/, beside this script
from seed_modules import (AdditiveAttention, Attn, BilinearAttention, DotProductAttention,
                          MultiHeadAttention, masked_softmax)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "golden")


# ---------------------------------------------------------------------------
# Reference evaluation (float64 from float32 inputs) and checks.

def ref_softmax(x32, lens):
    """float64 masked softmax of float32 input; returns float32 (and f64)."""
    x64 = x32.double().clone()  # sequence_mask writes in place
    y64 = masked_softmax(x64, lens)
    return y64.float(), y64


def ref_dot(q32, k32, v32, lens):
    attn = DotProductAttention(dropout=0.5)
    attn.eval()
    with torch.no_grad():
        out64 = attn(q32.double(), k32.double(), v32.double(), lens)
        w64 = attn.attention_weights
    return out64.float(), w64.float(), out64, w64


def ref_model(model32, q32, k32, v32, lens):
    """A seed module with weights (AdditiveAttention, Attn) run in float64 on
    the float32 weights and inputs; both keep their weights in
    attention_weights (Attn also returns them)."""
    model64 = copy.deepcopy(model32).double()
    with torch.no_grad():
        out64 = model64(q32.double(), k32.double(), v32.double(), lens)
    if isinstance(out64, tuple):
        out64 = out64[0]
    w64 = model64.attention_weights
    return out64.float(), w64.float(), out64, w64


def row_lengths(lens, B, N, M):
    """Per-row valid length as a (B, N) int64 numpy array (M when absent)."""
    if lens is None:
        return np.full((B, N), M, dtype=np.int64)
    l = lens.numpy().astype(np.int64)
    if l.ndim == 1:
        l = np.repeat(l[:, None], N, axis=1)
    return l


def check_weights(name, w64, w32, lens):
    """docs/semantics.md section 1 seed checks on (B, N, M) weights."""
    B, N, M = w64.shape
    L = row_lengths(lens, B, N, M)
    w = w64.numpy()
    sums = w.sum(axis=-1)
    assert np.all(np.abs(sums - 1.0) < 1e-12), (name, "rows must sum to 1")
    for b in range(B):
        for i in range(N):
            l = int(L[b, i])
            row = w[b, i]
            if l == 0:
                # Every position masked: uniform 1/M over all M keys.
                assert np.allclose(row, 1.0 / M, rtol=0, atol=1e-15), (name, b, i)
            elif l < M:
                assert np.all(w32[b, i, l:].numpy() == 0.0), \
                    (name, b, i, "weights beyond L must be exactly 0")
                assert np.all(row[:l] > 0.0), (name, b, i)
            if l == 1:
                assert w32[b, i, 0].item() == 1.0, (name, b, i, "L=1 -> [1,0,..]")


def check_against_f32(name, got32, ref64, atol):
    """The float32 run of the same module must agree within the tolerance of
    docs/semantics.md (a sanity check of the contract, not part of the data)."""
    err = (got32.double() - ref64).abs().max().item()
    assert err <= atol, (name, "float32 torch vs float64 reference", err, atol)
    return err


# ---------------------------------------------------------------------------
# Output.

def save(folder, name, t, dtype):
    a = np.ascontiguousarray(t.numpy().astype(dtype))
    np.save(os.path.join(folder, name + ".npy"), a, allow_pickle=False)
    return a.nbytes


def save_attention(folder, q, k, v, lens, out32, w32):
    """An attention case's inputs and expected outputs; returns their bytes."""
    nbytes = 0
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        nbytes += save(folder, name, t, "<f4")
    if lens is not None:
        nbytes += save(folder, "valid_lens", lens, lens_dtype(lens))
    nbytes += save(folder, "out", out32, "<f4")
    nbytes += save(folder, "weights", w32, "<f4")
    return nbytes


def case_dir(out_root, case):
    folder = os.path.join(out_root, case)
    os.makedirs(folder, exist_ok=True)
    # A case never keeps files from an earlier layout (e.g. a dropped lens).
    for f in os.listdir(folder):
        if f.endswith(".npy") or f.endswith(".safetensors"):
            os.remove(os.path.join(folder, f))
    return folder


def lens_dtype(lens):
    return {torch.int32: "<i4", torch.int64: "<i8"}[lens.dtype]


def describe_lens(lens):
    if lens is None:
        return "lens=none"
    kind = "per-batch" if lens.dim() == 1 else "per-query"
    vals = lens.reshape(-1).tolist()
    shown = vals if len(vals) <= 8 else vals[:8] + ["..."]
    return "lens=%s %s %s %s" % (str(lens.dtype).replace("torch.", ""), kind,
                                tuple(lens.shape), shown)


def emit_softmax(out_root, case, x, lens):
    folder = case_dir(out_root, case)
    y32, y64 = ref_softmax(x, lens)
    check_weights(case, y64, y32, lens)
    err = check_against_f32(case, masked_softmax(x.clone(), lens), y64, 1e-5)
    nbytes = save(folder, "x", x, "<f4")
    if lens is not None:
        nbytes += save(folder, "valid_lens", lens, lens_dtype(lens))
    nbytes += save(folder, "y", y32, "<f4")
    print("%-26s softmax X%s %s  f32-vs-f64 %.1e  %d B"
          % (case, tuple(x.shape), describe_lens(lens), err, nbytes))
    return y32


def emit_dot(out_root, case, q, k, v, lens):
    folder = case_dir(out_root, case)
    out32, w32, out64, w64 = ref_dot(q, k, v, lens)
    check_weights(case, w64, w32, lens)
    attn = DotProductAttention(dropout=0.5)
    attn.eval()
    with torch.no_grad():
        got = attn(q, k, v, lens)
    vmax = v.abs().max().item()
    err_o = check_against_f32(case, got, out64, 1e-5 * (1.0 + vmax))
    err_w = check_against_f32(case, attn.attention_weights, w64, 1e-5)
    nbytes = save_attention(folder, q, k, v, lens, out32, w32)
    print("%-26s dot Q%s K%s V%s %s  f32-vs-f64 out %.1e w %.1e  %d B"
          % (case, tuple(q.shape), tuple(k.shape), tuple(v.shape),
             describe_lens(lens), err_o, err_w, nbytes))
    return out32, w32


def emit_additive(out_root, case, model, q, k, v, lens):
    return emit_scored(out_root, case, model, q, k, v, lens,
                       "additive H=%d" % model.w_v.weight.shape[1])


def emit_scored(out_root, case, model, q, k, v, lens, what):
    """A module whose output is W V (additive, bilinear): its weights, inputs
    and float64 outputs, with section 7.1's output tolerance."""
    folder = case_dir(out_root, case)
    out32, w32, out64, w64 = ref_model(model, q, k, v, lens)
    check_weights(case, w64, w32, lens)
    with torch.no_grad():
        got = model(q, k, v, lens)
    vmax = v.abs().max().item()
    err_o = check_against_f32(case, got, out64, 1e-5 * (1.0 + vmax))
    err_w = check_against_f32(case, model.attention_weights, w64, 1e-5)
    save_safetensors(model.state_dict(), os.path.join(folder, "model.safetensors"))
    nbytes = os.path.getsize(os.path.join(folder, "model.safetensors"))
    nbytes += save_attention(folder, q, k, v, lens, out32, w32)
    print("%-26s %s Q%s K%s V%s %s  f32-vs-f64 out %.1e w %.1e  %d B"
          % (case, what, tuple(q.shape), tuple(k.shape), tuple(v.shape), describe_lens(lens),
             err_o, err_w, nbytes))
    return out32, w32


def emit_concat(out_root, case, model, q, k, v, lens):
    folder = case_dir(out_root, case)
    out32, w32, out64, w64 = ref_model(model, q, k, v, lens)
    check_weights(case, w64, w32, lens)
    with torch.no_grad():
        got, got_w = model(q, k, v, lens)
    err_o = check_against_f32(case, got, out64, 1e-4 * (1.0 + out64.abs().max().item()))
    err_w = check_against_f32(case, got_w, w64, 1e-5)
    save_safetensors(model.state_dict(), os.path.join(folder, "model.safetensors"))
    nbytes = os.path.getsize(os.path.join(folder, "model.safetensors"))
    nbytes += save_attention(folder, q, k, v, lens, out32, w32)
    print("%-26s concat M=%d O=%d Q%s K%s V%s %s  f32-vs-f64 out %.1e w %.1e  %d B"
          % (case, model.value_size1, model.output_size, tuple(q.shape), tuple(k.shape),
             tuple(v.shape), describe_lens(lens), err_o, err_w, nbytes))
    return out32, w32, out64


def emit_bilinear(out_root, case, model, q, k, v, lens):
    return emit_scored(out_root, case, model, q, k, v, lens, "bilinear")


def emit_multihead(out_root, case, model, q, k, v, lens):
    """weights.npy is (B, heads, N, M), the engine's layout of d2l's
    (B * heads, N, M); the module's head count goes to heads.npy."""
    folder = case_dir(out_root, case)
    out32, w32, out64, w64 = ref_model(model, q, k, v, lens)
    B, N, M = q.shape[0], q.shape[1], k.shape[1]
    H = model.num_heads
    head_lens = None if lens is None else torch.repeat_interleave(lens, H, dim=0)
    check_weights(case, w64, w32, head_lens)
    with torch.no_grad():
        got = model(q, k, v, lens)
    err_o = check_against_f32(case, got, out64, 1e-4 * (1.0 + out64.abs().max().item()))
    err_w = check_against_f32(case, model.attention_weights, w64, 1e-5)
    save_safetensors(model.state_dict(), os.path.join(folder, "model.safetensors"))
    nbytes = os.path.getsize(os.path.join(folder, "model.safetensors"))
    nbytes += save_attention(folder, q, k, v, lens, out32, w32.reshape(B, H, N, M))
    nbytes += save(folder, "heads", torch.tensor([H]), "<i8")
    print("%-26s multihead heads=%d bias=%s Q%s K%s V%s %s  f32-vs-f64 out %.1e w %.1e  %d B"
          % (case, H, model.W_q.bias is not None, tuple(q.shape), tuple(k.shape),
             tuple(v.shape), describe_lens(lens), err_o, err_w, nbytes))
    return out32, w32


# ---------------------------------------------------------------------------
# Cases. Each case seeds torch itself, so cases do not depend on each other.

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help="output root (default: tests/golden in the repo)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # reductions in a fixed order
    out = args.out

    # --- masked softmax ---------------------------------------------------
    torch.manual_seed(1001)
    x = torch.rand(2, 2, 4)
    lens = torch.tensor([2, 3], dtype=torch.int64)
    y = emit_softmax(out, "softmax_seed_per_batch", x, lens)
    # Seed check: zeros in columns 2-3 of batch 0 and column 3 of batch 1.
    assert torch.all(y[0, :, 2:] == 0) and torch.all(y[1, :, 3] == 0)
    assert torch.all(y[0, :, :2] > 0) and torch.all(y[1, :, :3] > 0)

    torch.manual_seed(1002)
    x = torch.rand(2, 2, 4)
    lens = torch.tensor([[1, 3], [2, 4]], dtype=torch.int64)
    y = emit_softmax(out, "softmax_seed_per_query", x, lens)
    # Seed check: row (0,0) is exactly [1,0,0,0].
    assert y[0, 0].tolist() == [1.0, 0.0, 0.0, 0.0], y[0, 0]

    torch.manual_seed(1003)
    x = torch.randn(2, 3, 17) * 3
    emit_softmax(out, "softmax_no_lens", x, None)

    torch.manual_seed(1004)
    x = torch.randn(3, 5, 37) * 4
    lens = torch.tensor([0, 37, 50], dtype=torch.int32)
    y = emit_softmax(out, "softmax_odd_int32", x, lens)
    # L = 0: uniform 1/M; L = M and L > M: plain softmax.
    assert torch.allclose(y[0], torch.full((5, 37), 1.0 / 37), rtol=0, atol=1e-7)
    plain = torch.softmax(x.double(), dim=-1).float()
    assert torch.equal(y[1], plain[1]) and torch.equal(y[2], plain[2])

    torch.manual_seed(1005)
    x = torch.randn(2, 7, 33) * 2
    lens = torch.randint(0, 41, (2, 7), dtype=torch.int64)
    lens[0, 0], lens[0, 3], lens[1, 1], lens[1, 5] = 0, 1, 33, 40
    emit_softmax(out, "softmax_per_query_mixed", x, lens)

    # --- scaled dot-product attention --------------------------------------
    torch.manual_seed(2001)
    q = torch.normal(0, 1, (2, 1, 2))
    k = torch.ones((2, 10, 2))
    v = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
    lens = torch.tensor([2, 6], dtype=torch.int64)
    o, w = emit_dot(out, "dot_toy", q, k, v, lens)
    # The d2l toy: all keys are equal, so weights are uniform over valid keys.
    expect = torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]])
    assert torch.equal(o, expect), o

    torch.manual_seed(2002)
    q = torch.randn(2, 4, 16)
    k = torch.randn(2, 9, 16)
    v = torch.randn(2, 9, 8)
    emit_dot(out, "dot_no_lens", q, k, v, None)

    torch.manual_seed(2003)
    q = torch.randn(3, 7, 33)
    k = torch.randn(3, 19, 33)
    v = torch.randn(3, 19, 5)
    lens = torch.randint(0, 26, (3, 7), dtype=torch.int64)
    lens[0, 0], lens[0, 1], lens[1, 2], lens[2, 3], lens[2, 6] = 0, 1, 19, 25, 20
    emit_dot(out, "dot_odd_per_query", q, k, v, lens)

    torch.manual_seed(2004)
    q = torch.randn(2, 5, 64)
    k = torch.randn(2, 130, 64)
    v = torch.randn(2, 130, 24)
    lens = torch.tensor([77, 130], dtype=torch.int32)
    emit_dot(out, "dot_per_batch_int32", q, k, v, lens)

    # --- additive attention -------------------------------------------------
    torch.manual_seed(3001)
    model = AdditiveAttention(key_size=2, query_size=20, num_hiddens=8).eval()
    q = torch.normal(0, 1, (2, 1, 20))
    k = torch.ones((2, 10, 2))
    v = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
    lens = torch.tensor([2, 6], dtype=torch.int64)
    o, w = emit_additive(out, "additive_toy", model, q, k, v, lens)
    # The d2l toy: all keys are equal, so weights are uniform over valid keys.
    assert torch.equal(w[0, 0, :2], torch.full((2,), 0.5)) and torch.all(w[0, 0, 2:] == 0)
    assert torch.allclose(o, torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]]),
                          rtol=0, atol=1e-5), o

    torch.manual_seed(3002)
    model = AdditiveAttention(key_size=7, query_size=5, num_hiddens=31).eval()
    emit_additive(out, "additive_no_lens", model, torch.randn(2, 3, 5), torch.randn(2, 17, 7),
                  torch.randn(2, 17, 6), None)

    torch.manual_seed(3003)
    model = AdditiveAttention(key_size=9, query_size=11, num_hiddens=1).eval()
    lens = torch.randint(0, 20, (3, 6), dtype=torch.int64)
    lens[0, 0], lens[0, 1], lens[1, 2], lens[2, 3] = 0, 1, 17, 19
    emit_additive(out, "additive_h1_per_query", model, torch.randn(3, 6, 11) * 2,
                  torch.randn(3, 17, 9) * 2, torch.randn(3, 17, 3), lens)

    torch.manual_seed(3004)
    model = AdditiveAttention(key_size=24, query_size=16, num_hiddens=300).eval()
    lens = torch.tensor([700, 1, 333], dtype=torch.int32)
    emit_additive(out, "additive_h300_m700_int32", model, torch.randn(3, 5, 16),
                  torch.randn(3, 700, 24), torch.randn(3, 700, 8), lens)

    # --- concat attention (the seq2seq Attn module) ----------------------------
    torch.manual_seed(4001)
    model = Attn(query_size=32, key_size=32, value_size1=32, value_size2=64, output_size=64).eval()
    q, k, v = torch.randn(1, 1, 32), torch.randn(1, 1, 32), torch.randn(1, 32, 64)
    _, _, out64 = emit_concat(out, "concat_tutorial", model, q, k, v, None)
    # The batched forward is the tutorial's own forward at its sizes.
    with torch.no_grad():
        tut_out, tut_w = copy.deepcopy(model).double().forward_tutorial(q.double(), k.double(),
                                                                         v.double())
    assert torch.allclose(tut_out, out64, rtol=0, atol=1e-12), "forward vs forward_tutorial"

    torch.manual_seed(4002)
    model = Attn(query_size=7, key_size=11, value_size1=13, value_size2=6, output_size=9).eval()
    lens = torch.tensor([0, 13, 4, 1], dtype=torch.int32)
    emit_concat(out, "concat_odd_per_batch_int32", model, torch.randn(4, 5, 7), torch.randn(4, 5, 11),
                torch.randn(4, 13, 6) * 3, lens)

    torch.manual_seed(4003)
    model = Attn(query_size=3, key_size=1, value_size1=17, value_size2=5, output_size=1).eval()
    lens = torch.randint(0, 21, (2, 7), dtype=torch.int64)
    lens[0, 0], lens[0, 1], lens[1, 2], lens[1, 3] = 0, 1, 17, 20
    emit_concat(out, "concat_odd_per_query", model, torch.randn(2, 7, 3) * 2, torch.randn(2, 7, 1),
                torch.randn(2, 17, 5), lens)

    # --- d2l's multi-head attention --------------------------------------------
    torch.manual_seed(5001)
    model = MultiHeadAttention(key_size=10, query_size=12, value_size=9, num_hiddens=32,
                               num_heads=8, bias=True).eval()
    lens = torch.randint(0, 10, (2, 5), dtype=torch.int64)
    lens[0, 0], lens[0, 1], lens[1, 2], lens[1, 3] = 0, 1, 7, 9
    emit_multihead(out, "multihead_h8_bias_per_query", model, torch.randn(2, 5, 12),
                   torch.randn(2, 7, 10), torch.randn(2, 7, 9) * 2, lens)

    torch.manual_seed(5002)
    model = MultiHeadAttention(key_size=6, query_size=6, value_size=5, num_hiddens=16,
                               num_heads=1, bias=False).eval()
    lens = torch.tensor([0, 11, 3], dtype=torch.int32)
    emit_multihead(out, "multihead_h1_per_batch_int32", model, torch.randn(3, 4, 6),
                   torch.randn(3, 8, 6), torch.randn(3, 8, 5), lens)

    torch.manual_seed(5003)
    model = MultiHeadAttention(key_size=20, query_size=20, value_size=20, num_hiddens=40,
                               num_heads=8, bias=False).eval()
    emit_multihead(out, "multihead_h8_no_lens", model, torch.randn(2, 3, 20),
                   torch.randn(2, 33, 20), torch.randn(2, 33, 20), None)

    # Causal self-attention as d2l's decoder runs it: X attends to itself
    # with per-query lengths 1..N (the engine's top-left mask).
    torch.manual_seed(5004)
    model = MultiHeadAttention(key_size=16, query_size=16, value_size=16, num_hiddens=32,
                               num_heads=4, bias=True).eval()
    x = torch.randn(2, 6, 16)
    lens = torch.arange(1, 7, dtype=torch.int64).repeat(2, 1)
    emit_multihead(out, "multihead_causal_self", model, x, x, x, lens)

    # --- the bilinear score (the chapter's exercise) ------------------------------
    torch.manual_seed(6001)
    model = BilinearAttention(key_size=5, query_size=12).eval()
    lens = torch.randint(0, 12, (3, 4), dtype=torch.int64)
    lens[0, 0], lens[0, 1], lens[1, 2], lens[2, 3] = 0, 1, 9, 11
    emit_bilinear(out, "bilinear_per_query", model, torch.randn(3, 4, 12), torch.randn(3, 9, 5),
                  torch.randn(3, 9, 7) * 2, lens)

    torch.manual_seed(6002)
    model = BilinearAttention(key_size=32, query_size=20).eval()
    lens = torch.tensor([40, 3], dtype=torch.int32)
    emit_bilinear(out, "bilinear_per_batch_int32", model, torch.randn(2, 9, 20),
                  torch.randn(2, 40, 32), torch.randn(2, 40, 16), lens)

    total = 0
    for root, _, files in os.walk(out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print("wrote %s (%.1f KB)" % (os.path.relpath(out, REPO_ROOT), total / 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
