#!/usr/bin/python3
"""How an int8 KvCache should choose its scales: the error of candidate
codings of K and V against float64 attention over the fp32 keys and values,
on the data tests/kv_cache_precision_test.cc uses, as a multiple of the
bound docs/semantics.md section 5.3 sets for int8 (3x the error of bf16
storage, or 3e-3 * std(V), whichever is larger). Below 1 holds the bound.

  /usr/bin/python3 bench/int8_scales.py [--seeds N]
"""
import argparse

import numpy as np

B, HKV, H, D, L = 2, 2, 8, 64, 2001
GROUP = 16  # the key positions that share their scales (kernels::kInt8KeyGroup)


def bf16(x):
    """x rounded to the nearest bfloat16, ties to even."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    low, kept = bits & 0xFFFF, bits >> 16
    up = (low > 0x8000) | ((low == 0x8000) & (kept & 1 == 1))
    return ((kept + up) << 16).astype(np.uint32).view(np.float32)


def data(kind, rng):
    k = rng.standard_normal((B, HKV, L, D))
    v = rng.standard_normal((B, HKV, L, D))
    if kind == "positions scaled by e^U(-4, 4)":
        scale = np.exp(rng.uniform(-4, 4, (B, HKV, L, 1)))
        k, v = k * scale, v * scale
    if kind == "a key channel 30x the others":
        k[..., 5] *= 30
    q = rng.standard_normal((B, H, D)) * (8 if kind == "sharp queries" else 1)
    return k.astype(np.float32), v.astype(np.float32), q


def as_given(x):
    return np.asarray(x, np.float64)


def attend(k, v, q, query=as_given, weight=as_given):
    """The newest query of each sequence against all its keys, in float64;
    the query and the normalised weights taken as `query` and `weight` say
    (bf16_parts.py)."""
    out = np.zeros((B, H, D))
    for b in range(B):
        for h in range(H):
            g = h // (H // HKV)
            s = k[b, g].astype(np.float64) @ query(q[b, h]) / np.sqrt(D)
            p = np.exp(s - s.max())
            out[b, h] = weight(p / p.sum()) @ v[b, g]
    return out


def per_position(x):
    """One symmetric scale per position: max |x| / 127."""
    scale = np.abs(x).max(-1, keepdims=True) / 127
    scale[scale == 0] = 1
    return np.round(x / scale).clip(-127, 127) * scale


def per_channel_groups(x, symmetric, group=GROUP):
    """Scales per channel over groups of `group` positions."""
    y = np.empty_like(x)
    for t in range(0, x.shape[-2], group):
        g = x[..., t:t + group, :]
        if symmetric:
            step = np.abs(g).max(-2, keepdims=True) / 127
            step[step == 0] = 1
            y[..., t:t + group, :] = np.round(g / step) * step
        else:
            lo, hi = g.min(-2, keepdims=True), g.max(-2, keepdims=True)
            step = (hi - lo) / 255
            step[step == 0] = 1
            y[..., t:t + group, :] = lo + np.round((g - lo) / step) * step
    return y


CODINGS = {
    "K, V per position": (per_position, per_position),
    f"K per channel over {GROUP} positions, symmetric; V per position": (
        lambda k: per_channel_groups(k, True), per_position),
    f"K per channel over {2 * GROUP} positions, lo and step; V per position": (
        lambda k: per_channel_groups(k, False, 2 * GROUP), per_position),
    f"K per channel over {GROUP} positions, lo and step; V per position (kInt8)": (
        lambda k: per_channel_groups(k, False), per_position),
}
KINDS = ["normal", "a key channel 30x the others", "positions scaled by e^U(-4, 4)",
         "sharp queries"]


def ratios(k, v, q):
    """Each coding's error / the bound on one draw of data."""
    exact = attend(k, v, q)
    bound = max(3 * np.abs(attend(bf16(k), bf16(v), q) - exact).max(), 3e-3 * v.std())
    return {name: np.abs(attend(code_k(k), code_v(v), q) - exact).max() / bound
            for name, (code_k, code_v) in CODINGS.items()}


def report(doc, ratios, what):
    """The command line (--seeds) of a script with docstring `doc`, then the
    worst of ratios(k, v, q) over that many seeds, printed as a table."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print_worst(worst_over_seeds(args.seeds, ratios), args.seeds, what)


def worst_over_seeds(seeds, ratios):
    """worst[name][kind]: the largest of ratios(k, v, q)[name] over `seeds`
    draws of each kind of data."""
    worst = {}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        for kind in KINDS:
            for name, ratio in ratios(*data(kind, rng)).items():
                by_kind = worst.setdefault(name, {})
                by_kind[kind] = max(by_kind.get(kind, 0.0), ratio)
    return worst


def print_worst(worst, seeds, what):
    """worst[name][kind] (error / bound) as a markdown table, a row a name."""
    print(f"Largest error / bound over {seeds} seeds (B {B}, Hq {H}, Hkv {HKV}, D {D}, "
          f"{L} keys):\n")
    print(f"| {what} | " + " | ".join(KINDS) + " |")
    print("|---|" + "---:|" * len(KINDS))
    for name, by_kind in worst.items():
        print(f"| {name} | " + " | ".join(f"{by_kind[kind]:.2f}" for kind in KINDS) + " |")


if __name__ == "__main__":
    report(__doc__, ratios, "coding")
