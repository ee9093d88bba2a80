#!/usr/bin/python3
"""Time attnscore's CLI against the PyTorch seed modules on the same shapes.

PyTorch side: the d2l masked_softmax, DotProductAttention and
AdditiveAttention, and the seq2seq tutorial's Attn (eval mode, no dropout), float32, torch.no_grad(), torch.set_num_threads(T); 3 warm-up calls,
then the median of R calls each timed with time.perf_counter_ns.
Multi-head rows time PyTorch's own nn.MultiheadAttention (embed_dim H·D,
H heads, biases, batch_first, need_weights=False), its key_padding_mask
from the valid lengths and a causal attn_mask where the row says so,
against `attnscore bench multihead --module --bias`: d2l's module, the same
four projections with biases and the same attention. Its decode step and
causal prefill rows take the shapes of the multi-head op's own benchmarks (B 4,
one query, 2,048 keys; B 1, N = M = 1,024, causal), 16 heads of 64, but with as
many K/V heads as query heads: nn.MultiheadAttention has no grouped K/V heads.
Both sides project every key in every call, as these modules do; decoding from
a cache of projected keys is timed in bench/ (BM_KvCacheDecode).
attnscore side: `attnscore bench OP ... --json`, which does its own warm-up
and reports median_us over R runs.

"random" valid lengths are per-query lengths of shape (B, N), "random-batch"
per-batch lengths of shape (B,), both drawn uniformly from [1, M];
"random-batch-half" per-batch lengths from [M/2, M], a decoding step's mostly
valid cache. The torch side draws them (seeded) and the CLI is given the very
same lengths through a .npy file (`--valid-lens FILE.npy`). The dot rows use
per-batch lengths, the d2l form (one length per sequence), as bench/ does
(decode's random-batch-half), and one encoder row per-query lengths;
additive_big runs with none too. Additive and concat weights are random on both sides (nn.Linear's
initialisation): the work does not depend on their values. Concat's "keys"
are V's M rows (its valid lengths mask those), with one key per query.

Prints a markdown table:
  op | shape | valid lens | attnscore median µs | PyTorch median µs | speed-up
where speed-up = PyTorch median / attnscore median (> 1: attnscore faster).
On a CPU with AVX-512, OpenBLAS is given its AVX-512 kernels
(OPENBLAS_CORETYPE=SkylakeX) unless the caller set OPENBLAS_CORETYPE: its
CPU detection may not know the model and fall back to SSE3. The header
prints the kernels it runs.
--bf16 adds, for the dot rows of more than 3 queries, the CLI with
--precision bf16 (PyTorch stays float32): its median, its speed-up over
PyTorch, and fp32 median / bf16 median.

Usage:
  bench/compare_torch.py [--attnscore PATH] [--threads T] [--repeat R]
                         [--only softmax|dot|additive|concat|multihead] [--torch-only]
                         [--bf16]
Exit status: 0 ok, 1 an attnscore run failed, 2 the CLI is missing.
"""

import argparse
import ctypes
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# OpenBLAS picks its kernels by CPU model, and bookworm's 0.3.21 falls back to
# Prescott's SSE3 kernels on a model it does not know (seen on an AVX-512
# Xeon, family 6 model 207: PyTorch's long dot product took 80 ms instead of
# 35 ms). The peer should be PyTorch at its best, so where AVX-512 is there
# and the caller chose nothing, OpenBLAS gets its AVX-512 (SkylakeX) kernels.
# This must come before numpy or torch loads OpenBLAS.
if "OPENBLAS_CORETYPE" not in os.environ and \
        {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= _cpu_flags():
    os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))
from seed_modules import AdditiveAttention, Attn, DotProductAttention, masked_softmax  # noqa: E402
DEFAULT_CLI = os.path.join(REPO_ROOT, "build", "bin", "attnscore")
WARMUP = 3


# ---------------------------------------------------------------------------
# Problems.

# (op, label, dims, valid-lens spec). dims: softmax (B, N, M);
# dot (B, N, M, D, Dv); additive (B, N, M, Dq, Dk, H, Dv); concat
# (B, N, Dq, Dk, M, Dv, O). Lens spec:
# "random" | "random-batch" | "random-batch-half" | "none" | an integer string.
DEFAULT_PROBLEMS = [
    ("softmax", "", (64, 128, 512), "random"),
    ("dot", "decode", (8, 1, 1024, 64, 64), "random-batch-half"),
    ("dot", "encoder", (4, 128, 128, 64, 64), "random-batch"),
    ("dot", "encoder", (4, 128, 128, 64, 64), "random"),
    ("dot", "long", (1, 1024, 4096, 64, 64), "random-batch"),
    ("dot", "long", (1, 1024, 4096, 64, 64), "3000"),
    ("dot", "toy", (2, 1, 10, 2, 4), "random-batch"),
    ("additive", "toy", (2, 1, 10, 20, 2, 8, 4), "random-batch"),
    ("additive", "mid", (4, 32, 256, 128, 128, 128, 128), "random-batch"),
    ("additive", "big", (8, 64, 512, 256, 256, 256, 256), "random-batch"),
    ("additive", "big", (8, 64, 512, 256, 256, 256, 256), "none"),
    ("concat", "tutorial", (1, 1, 32, 32, 32, 64, 64), "none"),
    ("concat", "decoder", (64, 1, 256, 256, 64, 256, 256), "random-batch"),
    ("concat", "encoder", (8, 256, 256, 256, 128, 256, 256), "random-batch"),
    # multihead: (B, N, M, heads, D per head, causal)
    ("multihead", "encoder", (4, 128, 128, 8, 64, "none"), "random-batch"),
    # The multi-head op's benchmark shapes (docs/performance.md, Multi-head
    # attention), with its K/V heads as many as its query heads.
    ("multihead", "decode step", (4, 1, 2048, 16, 64, "none"), "random-batch"),
    ("multihead", "causal prefill", (1, 1024, 1024, 16, 64, "top-left"), "none"),
]


def make_lens(spec, B, N, M, gen):
    """Torch-side valid lengths for a CLI --valid-lens spec."""
    if spec == "none":
        return None
    if spec == "random":
        return torch.randint(1, M + 1, (B, N), generator=gen, dtype=torch.int64)
    if spec == "random-batch":
        return torch.randint(1, M + 1, (B,), generator=gen, dtype=torch.int64)
    if spec == "random-batch-half":
        return torch.randint(max(1, M // 2), M + 1, (B,), generator=gen, dtype=torch.int64)
    return torch.full((B,), int(spec), dtype=torch.int64)


def lens_text(spec, lens):
    """The spec, and the lengths themselves when there are few."""
    if lens is None or lens.numel() > 8:
        return spec
    return "%s %s" % (spec, lens.tolist())


def shape_text(op, label, dims):
    if op == "softmax":
        s = "(%d,%d,%d)" % dims
    elif op == "additive":
        s = "B=%d N=%d M=%d Dq=%d Dk=%d H=%d Dv=%d" % dims
    elif op == "concat":
        s = "B=%d N=%d Dq=%d Dk=%d M=%d Dv=%d O=%d" % dims
    elif op == "multihead":
        s = "B=%d N=%d M=%d heads=%d D=%d" % dims[:5] + (", causal" if dims[5] != "none" else "")
    else:
        B, N, M, D, Dv = dims
        s = "B=%d N=%d M=%d D=%d Dv=%d" % (B, N, M, D, Dv)
    return "%s %s" % (label, s) if label else s


def median_us(fn, repeat):
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def time_torch(op, dims, spec, repeat, seed):
    gen = torch.Generator().manual_seed(seed)
    if op == "softmax":
        B, N, M = dims
        X = torch.randn(B, N, M, generator=gen)
        lens = make_lens(spec, B, N, M, gen)
        # masked_softmax masks X in place, as the seed does; repeated calls
        # rewrite the same -1e6 entries, so every call does the same work.
        fn = lambda: masked_softmax(X, lens)
    elif op == "additive":
        B, N, M, Dq, Dk, H, Dv = dims
        Q = torch.randn(B, N, Dq, generator=gen)
        K = torch.randn(B, M, Dk, generator=gen)
        V = torch.randn(B, M, Dv, generator=gen)
        lens = make_lens(spec, B, N, M, gen)
        attn = AdditiveAttention(Dk, Dq, H, dropout=0.5)
        attn.eval()
        fn = lambda: attn(Q, K, V, lens)
    elif op == "concat":
        B, N, Dq, Dk, M, Dv, O = dims
        Q = torch.randn(B, N, Dq, generator=gen)
        K = torch.randn(B, N, Dk, generator=gen)
        V = torch.randn(B, M, Dv, generator=gen)
        lens = make_lens(spec, B, N, M, gen)
        attn = Attn(Dq, Dk, M, Dv, O)
        attn.eval()
        fn = lambda: attn(Q, K, V, lens)
    elif op == "multihead":
        B, N, M, H, D, causal = dims
        Q = torch.randn(B, N, H * D, generator=gen)
        K = torch.randn(B, M, H * D, generator=gen)
        V = torch.randn(B, M, H * D, generator=gen)
        lens = make_lens(spec, B, N, M, gen)
        attn = torch.nn.MultiheadAttention(H * D, H, bias=True, batch_first=True)
        attn.eval()
        padding = None if lens is None else torch.arange(M)[None, :] >= lens[:, None]
        mask = None
        if causal == "top-left":  # query i sees keys 0..i
            mask = torch.ones(N, M, dtype=torch.bool).triu(1)
        fn = lambda: attn(Q, K, V, key_padding_mask=padding, attn_mask=mask, need_weights=False)
    else:
        B, N, M, D, Dv = dims
        Q = torch.randn(B, N, D, generator=gen)
        K = torch.randn(B, M, D, generator=gen)
        V = torch.randn(B, M, Dv, generator=gen)
        lens = make_lens(spec, B, N, M, gen)
        attn = DotProductAttention(dropout=0.5)
        attn.eval()
        fn = lambda: attn(Q, K, V, lens)
    with torch.no_grad():
        return median_us(fn, repeat), lens


# ---------------------------------------------------------------------------
# attnscore CLI.

def cli_command(cli, op, dims, spec, threads, repeat, precision="fp32"):
    if op == "softmax":
        B, N, M = dims
        cmd = [cli, "bench", "softmax", "--batch", B, "--queries", N,
               "--keys", M]
    elif op == "additive":
        B, N, M, Dq, Dk, H, Dv = dims
        cmd = [cli, "bench", "additive", "--batch", B, "--queries", N, "--keys", M,
               "--query-dim", Dq, "--key-dim", Dk, "--hidden", H, "--value-dim", Dv]
    elif op == "concat":
        B, N, Dq, Dk, M, Dv, O = dims
        cmd = [cli, "bench", "concat", "--batch", B, "--queries", N, "--keys", M,
               "--query-dim", Dq, "--key-dim", Dk, "--value-dim", Dv, "--out-dim", O]
    elif op == "multihead":
        B, N, M, H, D, causal = dims
        cmd = [cli, "bench", "multihead", "--module", "--bias", "--batch", B, "--queries", N,
               "--keys", M, "--heads", H, "--query-dim", D, "--causal", causal]
    else:
        B, N, M, D, Dv = dims
        cmd = [cli, "bench", "dot", "--batch", B, "--queries", N,
               "--keys", M, "--query-dim", D, "--value-dim", Dv]
    cmd += ["--valid-lens", spec, "--threads", threads, "--repeat", repeat,
            "--precision", precision, "--json"]
    return [str(c) for c in cmd]


def parse_json_stdout(text):
    """The CLI prints one JSON object on stdout; accept surrounding blank
    lines, and fall back to the last line that looks like an object."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
        raise


def time_attnscore(cli, op, dims, spec, threads, repeat, precision="fp32"):
    """Returns (median_us, record) or (None, error text)."""
    cmd = cli_command(cli, op, dims, spec, threads, repeat, precision)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "%s: %s" % (" ".join(cmd), e)
    if p.returncode != 0:
        return None, "%s: exit %d: %s" % (" ".join(cmd), p.returncode,
                                          p.stderr.strip())
    try:
        rec = parse_json_stdout(p.stdout)
        med = float(rec["median_us"])
    except (ValueError, KeyError, TypeError) as e:
        return None, "%s: bad JSON (%s): %r" % (" ".join(cmd), e,
                                                 p.stdout[:300])
    if rec.get("op") not in (None, op):
        return None, "%s: JSON op is %r, expected %r" % (" ".join(cmd),
                                                       rec.get("op"), op)
    return med, rec


# ---------------------------------------------------------------------------
# Environment report.

def blas_report():
    """The BLAS line of torch.__config__.show(), plus the BLAS library
    actually mapped into this process (Debian routes libblas.so.3 through
    update-alternatives, so BLAS_INFO=generic says little on its own)."""
    lines = []
    for line in torch.__config__.show().splitlines():
        if "BLAS" not in line:
            continue
        # The build-settings line is long; keep only its BLAS/LAPACK entries.
        if "Build settings" in line:
            keep = [t.strip() for t in line.split(",") if "BLAS" in t or "LAPACK" in t]
            lines.append("torch build: " + ", ".join(k.split(": ")[-1] for k in keep))
        else:
            lines.append("torch config: " + line.strip(" -"))
    # Force BLAS to load (first gemm), then read what is mapped.
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))
    mapped = set()
    try:
        with open("/proc/self/maps") as f:
            for row in f:
                path = row.split()[-1] if len(row.split()) >= 6 else ""
                name = os.path.basename(path)
                if "blas" in name.lower() or name.startswith("libmkl"):
                    mapped.add(path)
    except OSError:
        pass
    for path in sorted(mapped):
        real = os.path.realpath(path)
        lines.append("mapped: %s%s" % (path, "" if real == path else " -> " + real))
        if "openblas" in os.path.basename(real):
            try:
                corename = ctypes.CDLL(real).openblas_get_corename
                corename.restype = ctypes.c_char_p
                lines.append("OpenBLAS kernels: %s (OPENBLAS_CORETYPE=%s)" % (
                    corename().decode(), os.environ.get("OPENBLAS_CORETYPE", "unset")))
            except (OSError, AttributeError):
                pass
    if not lines:
        lines.append("no BLAS line in torch.__config__.show()")
    return lines


def fmt_us(x):
    if x is None:
        return "—"
    return "%.1f" % x if x < 1000 else "%.0f" % x


def main():
    ap = argparse.ArgumentParser(
        description="attnscore CLI vs the PyTorch seed modules")
    ap.add_argument("--attnscore", default=DEFAULT_CLI,
                    help="path to the CLI (default: build/bin/attnscore)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=30,
                    help="timed calls per shape (median); default 30")
    ap.add_argument("--only", choices=["softmax", "dot", "additive", "concat", "multihead"])
    ap.add_argument("--bf16", action="store_true",
                    help="also time dot with --precision bf16 (extra columns)")
    ap.add_argument("--torch-only", action="store_true",
                    help="skip the attnscore column (no CLI needed)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed for the torch-side data and random lengths")
    args = ap.parse_args()
    if args.threads < 1 or args.repeat < 1:
        ap.error("--threads and --repeat must be >= 1")

    cli = os.path.abspath(args.attnscore)
    if not args.torch_only and not (os.path.isfile(cli) and os.access(cli, os.X_OK)):
        sys.stderr.write(
            "compare_torch: error: attnscore CLI not found or not executable: "
            "%s\n(build it first, pass --attnscore PATH, or use --torch-only)\n"
            % cli)
        return 2

    torch.set_num_threads(args.threads)
    print("torch %s, %d thread(s), repeat %d (+%d warm-up)"
          % (torch.__version__, torch.get_num_threads(), args.repeat, WARMUP))
    for line in blas_report():
        print(line)
    if not args.torch_only:
        print("attnscore: %s" % cli)
    print()

    problems = [p for p in DEFAULT_PROBLEMS if args.only in (None, p[0])]
    rows, errors = [], []
    lens_dir = tempfile.mkdtemp(prefix="attnscore_lens_")
    for idx, (op, label, dims, spec) in enumerate(problems):
        t_us, lens = time_torch(op, dims, spec, args.repeat, args.seed + idx)
        # The CLI times the very lengths PyTorch had: with one batch entry a
        # fresh draw could differ by thousands of keys.
        cli_spec = spec
        if lens is not None:
            cli_spec = os.path.join(lens_dir, "lens%d.npy" % idx)
            np.save(cli_spec, lens.numpy())
        a_us = None
        if not args.torch_only:
            a_us, rec = time_attnscore(cli, op, dims, cli_spec, args.threads,
                                       args.repeat)
            if a_us is None:
                errors.append(rec)
        speedup = "—" if not a_us else "%.2f×" % (t_us / a_us)
        row = (op, shape_text(op, label, dims), lens_text(spec, lens),
               fmt_us(a_us), fmt_us(t_us), speedup)
        if args.bf16:
            # Only dot has a bf16 mode, and its row kernels (N <= 3) are
            # fp32 in either mode: those rows get no bf16 columns.
            b_us = None
            if op == "dot" and dims[1] > 3 and not args.torch_only:
                b_us, rec = time_attnscore(cli, op, dims, cli_spec, args.threads,
                                           args.repeat, "bf16")
                if b_us is None:
                    errors.append(rec)
            row += (fmt_us(b_us), "—" if not b_us else "%.2f×" % (t_us / b_us),
                    "—" if not (a_us and b_us) else "%.2f×" % (a_us / b_us))
        rows.append(row)
    shutil.rmtree(lens_dir, ignore_errors=True)

    head = ("op", "shape", "valid lens", "attnscore median µs",
            "PyTorch median µs", "speed-up")
    if args.bf16:
        head += ("attnscore bf16 µs", "bf16 speed-up", "bf16 vs fp32")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    for e in errors:
        sys.stderr.write("compare_torch: attnscore failed: %s\n" % e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
