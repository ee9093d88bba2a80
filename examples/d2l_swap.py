#!/usr/bin/python3
"""d2l's attention examples with one import swapped.

Runs each example of the chapter "Attention Scoring Functions" (the toy
calls of masked_softmax, DotProductAttention and AdditiveAttention), the
seq2seq tutorial's Attn toy and the chapter "Multi-Head Attention"'s
example twice: through d2l's PyTorch modules (restated in
tools/seed_modules.py) and through attnscore.torch, with the same inputs and
the same state_dict, called as the chapters call them: eval mode, gradients
on (no torch.no_grad()). Then a larger additive call: batch 4, 32 queries,
256 keys, query, key, hidden and value size 128, its forward alone and its
forward with out.square().sum().backward().

For each it prints the drop-in's result, its largest difference from d2l's
module (float32), whether it is within docs/semantics.md section 7.1 of
d2l's module run in float64, and the median time of a call of each
(torch.set_num_threads(1); 3 warm-up calls, then --repeat calls of each,
each timed with perf_counter_ns, in 5 alternating blocks of back-to-back
calls). OpenBLAS, PyTorch's BLAS on Debian, runs as your environment sets it
(OPENBLAS_CORETYPE is printed, never changed).

Usage (from the repository root, with the package installed or built):
  /usr/bin/python3 examples/d2l_swap.py [--repeat R] [--large-repeat R]
Exit status 0 when every result is within its bound, 1 otherwise.
"""

import argparse
import copy
import importlib.util
import os
import platform
import statistics
import sys
import time

import torch

import attnscore
import attnscore.torch as swapped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "seed_modules", os.path.join(ROOT, "tools", "seed_modules.py"))
d2l = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(d2l)

WARMUP = 3
ROUNDS = 5


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def median_us(calls, repeat):
    """Median microseconds of a call of each callable: `repeat` timed calls
    each, in ROUNDS alternating blocks of back-to-back calls (so a drift in
    the machine's load reaches both, and neither evicts the other's data
    from the caches between its own calls)."""
    samples = [[] for _ in calls]
    block = -(-repeat // ROUNDS)
    for round_ in range(ROUNDS):
        for fn, times in zip(calls, samples):
            for _ in range(WARMUP if round_ == 0 else 0):
                fn()
            for _ in range(min(block, repeat - len(times))):
                start = time.perf_counter_ns()
                fn()
                times.append(time.perf_counter_ns() - start)
    return [statistics.median(times) / 1000 for times in samples]


def within_bound(kind, got, ref64, values, module64=None, q64=None):
    """docs/semantics.md section 7.1 against the float64 seed result."""
    err = (got.double() - ref64).abs()
    if kind == "weights":
        return bool((err <= 1e-5).all())
    if kind == "output":
        return bool((err <= 1e-5 * (1 + float(values.abs().max()))).all())
    if kind == "projected":  # d2l's multi-head module: W_o's output
        return bool((err <= 1e-4 * (1 + ref64.abs())).all())
    # concat: the output layer, 1e-4 relative to the magnitudes of its terms
    # plus the attention outputs' bound carried through it.
    w = module64.attn_combine.weight
    b = module64.attn_combine.bias
    applied = torch.bmm(module64.attention_weights, values.double())
    terms = torch.cat((q64, applied), -1).abs() @ w.abs().T + b.abs()
    carried = 1e-5 * (1 + float(values.abs().max())) * w[:, q64.shape[-1]:].abs().sum(1)
    return bool((err <= 1e-4 * terms + carried).all())


class Report:
    def __init__(self, repeat):
        self.repeat = repeat
        self.rows = []
        self.ok = True

    def compare(self, name, shape, seed_fn, swap_fn, check, repeat=None):
        """seed_fn and swap_fn return (output, weights); check(out, w) returns
        whether both are within their bounds of the float64 d2l module."""
        ref_out, ref_w = seed_fn()
        out, w = swap_fn()
        good = check(out, w)
        self.ok &= good
        diff_out = float((out - ref_out).abs().max())
        diff_w = float((w - ref_w).abs().max())
        seed_us, swap_us = median_us([seed_fn, swap_fn], repeat or self.repeat)
        self.rows.append((name, shape, f"{diff_out:.1e}", f"{diff_w:.1e}",
                          "yes" if good else "NO", seed_us, swap_us))
        return out.detach(), w.detach()

    def time_only(self, name, shape, seed_fn, swap_fn, repeat):
        seed_us, swap_us = median_us([seed_fn, swap_fn], repeat)
        self.rows.append((name, shape, "", "", "", seed_us, swap_us))

    def print_table(self):
        print("\n| example | shape | max abs Δ out | max abs Δ weights | within 7.1 "
              "| d2l µs | attnscore.torch µs | speed-up |")
        print("|---|---|---:|---:|---|---:|---:|---:|")
        for name, shape, d_out, d_w, good, seed_us, swap_us in self.rows:
            print(f"| {name} | {shape} | {d_out} | {d_w} | {good} | {seed_us:.1f} | "
                  f"{swap_us:.1f} | {seed_us / swap_us:.1f}× |")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--repeat", type=int, default=200,
                        help="timed calls of each module per toy (default 200)")
    parser.add_argument("--large-repeat", type=int, default=30,
                        help="timed calls of each for the larger additive call (default 30)")
    args = parser.parse_args()
    if args.repeat < 1 or args.large_repeat < 1:
        parser.error("--repeat and --large-repeat must be >= 1")

    torch.set_num_threads(1)
    torch.set_printoptions(precision=4, sci_mode=False)
    print(f"CPU: {cpu_model()}; torch {torch.__version__} "
          f"(1 thread, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}); "
          f"attnscore {attnscore.__version__}")
    report = Report(args.repeat)
    torch.manual_seed(0)

    # masked_softmax, the chapter's two calls. d2l's writes -1e6 into X in
    # place, so each call gets its own copy.
    for lens in (torch.tensor([2, 3]), torch.tensor([[1, 3], [2, 4]])):
        x = torch.rand(2, 2, 4)
        x_seed = x.clone()
        print(f"\nmasked_softmax(torch.rand(2, 2, 4), {lens.tolist()})")
        y, _ = report.compare(
            f"masked_softmax, lens {lens.tolist()}", "(2, 2, 4)",
            lambda: (d2l.masked_softmax(x_seed, lens),) * 2,
            lambda: (swapped.masked_softmax(x, lens),) * 2,
            lambda y, _: within_bound(
                "weights", y, d2l.masked_softmax(x.double(), lens), None))
        print(y)

    # The toys' shared keys, values and lengths.
    keys = torch.ones((2, 10, 2))
    values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
    valid_lens = torch.tensor([2, 6])

    def modules(seed_module, swap_module):
        swap_module.load_state_dict(seed_module.state_dict())
        return seed_module.eval(), swap_module.eval(), \
            copy.deepcopy(seed_module).double()

    def attention_case(name, shape, seed_module, swap_module, q, k, v, lens,
                       output_bound="output"):
        ref, new, ref64 = modules(seed_module, swap_module)

        def check(out, w):
            out64 = ref64(q.double(), k.double(), v.double(), lens)
            return (within_bound("weights", w, ref64.attention_weights, v)
                    and within_bound(output_bound, out, out64, v))
        out, w = report.compare(
            name, shape,
            lambda: (ref(q, k, v, lens), ref.attention_weights),
            lambda: (new(q, k, v, lens), new.attention_weights), check)
        return out, w

    queries = torch.normal(0, 1, (2, 1, 2))
    print("\nDotProductAttention(dropout=0.5), queries (2, 1, 2), the toy's keys, "
          "values, valid_lens [2, 6]")
    out, w = attention_case("DotProductAttention toy", "Q (2, 1, 2), K (2, 10, 2)",
                            d2l.DotProductAttention(dropout=0.5),
                            swapped.DotProductAttention(dropout=0.5),
                            queries, keys, values, valid_lens)
    print(f"output\n{out}\nattention_weights\n{w}")

    queries = torch.normal(0, 1, (2, 1, 20))
    print("\nAdditiveAttention(key_size=2, query_size=20, num_hiddens=8, dropout=0.1)")
    out, w = attention_case("AdditiveAttention toy", "Q (2, 1, 20), K (2, 10, 2), H 8",
                            d2l.AdditiveAttention(key_size=2, query_size=20,
                                                  num_hiddens=8, dropout=0.1),
                            swapped.AdditiveAttention(key_size=2, query_size=20,
                                                      num_hiddens=8, dropout=0.1),
                            queries, keys, values, valid_lens)
    print(f"output\n{out}\nattention_weights\n{w}")

    # The tutorial's Attn(32, 32, 32, 64, 64): Q, K (1, 1, 32), V (1, 32, 64).
    print("\nAttn(32, 32, 32, 64, 64), Q, K (1, 1, 32), V (1, 32, 64)")
    ref, new, ref64 = modules(d2l.Attn(32, 32, 32, 64, 64),
                              swapped.Attn(32, 32, 32, 64, 64))
    q, k, v = torch.randn(1, 1, 32), torch.randn(1, 1, 32), torch.randn(1, 32, 64)

    def check_attn(out, w):
        out64, w64 = ref64(q.double(), k.double(), v.double())
        return (within_bound("weights", w, w64, v)
                and within_bound("concat", out, out64, v, ref64, q.double()))
    out, w = report.compare("Attn toy", "Q, K (1, 1, 32), V (1, 32, 64)",
                            lambda: ref(q, k, v), lambda: new(q, k, v), check_attn)
    print(f"output[..., :8]\n{out[..., :8]}\nweights sum {float(w.sum()):.6f}")

    # The multi-head chapter's example: 100 hiddens, 5 heads, X (2, 4, 100)
    # against Y (2, 6, 100), valid_lens [3, 2].
    print("\nMultiHeadAttention(100, 100, 100, num_hiddens=100, num_heads=5, dropout=0.5)")
    x, y = torch.ones((2, 4, 100)), torch.ones((2, 6, 100))
    out, w = attention_case("MultiHeadAttention example", "X (2, 4, 100), Y (2, 6, 100)",
                            d2l.MultiHeadAttention(100, 100, 100, 100, 5, 0.5),
                            swapped.MultiHeadAttention(100, 100, 100, 100, 5, 0.5),
                            x, y, y, torch.tensor([3, 2]), output_bound="projected")
    print(f"output shape {tuple(out.shape)}, attention_weights shape {tuple(w.shape)}")

    # A larger additive call: forward alone, then forward and backward.
    b, n, m, size = 4, 32, 256, 128
    print(f"\nAdditiveAttention, B {b}, N {n}, M {m}, "
          f"query/key/hidden/value size {size}, no valid lengths")
    ref, new, ref64 = modules(d2l.AdditiveAttention(size, size, size, 0.1),
                              swapped.AdditiveAttention(size, size, size, 0.1))
    q, k, v = torch.randn(b, n, size), torch.randn(b, m, size), torch.randn(b, m, size)

    def check_large(out, w):
        out64 = ref64(q.double(), k.double(), v.double(), None)
        return (within_bound("weights", w, ref64.attention_weights, v)
                and within_bound("output", out, out64, v))
    shape = f"({b}, {n}, {m}), sizes {size}"
    report.compare("AdditiveAttention", shape,
                   lambda: (ref(q, k, v, None), ref.attention_weights),
                   lambda: (new(q, k, v, None), new.attention_weights),
                   check_large, repeat=args.large_repeat)

    def forward_backward(module):
        def call():
            module.zero_grad(set_to_none=True)
            module(q, k, v, None).square().sum().backward()
        return call
    report.time_only("AdditiveAttention, forward + backward", shape,
                     forward_backward(ref), forward_backward(new), args.large_repeat)

    report.print_table()
    if not report.ok:
        print("a result is outside its bound (docs/semantics.md section 7.1)")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
