#!/usr/bin/python3
"""Would batching across requests pay? The server's side of it, measured with
the library: S requests for multihead_attention arrive at once, each with its
own Q (1, N, Hq, D), K and V (1, M, Hkv, D) in its own buffers (as the
server reads them). Served one by one, that is S calls. Served as one packed
call (Engine::MultiHeadAttentionPacked, docs/semantics.md 5.8), their rows
must first be copied into one Q, K and V, since a tensor has one base.

  PYTHONPATH=build/python /usr/bin/python3 bench/batching.py [--requests 8] [--threads 1]

Prints, per shape, medians over 7 alternated rounds (each the median of
blocks of calls): the S calls, the packed call alone, the packing copy into
buffers kept between batches, (packed + copy) / S calls (below 1 means
batching pays), and what each request would save were the copy free. The
copy is numpy's, so for tiny tensors it is Python's cost more than the
bytes'; the last column bounds those. It checks first that the packed call
gives each request's bits.
"""

import argparse
import statistics
import time

import numpy as np

import attnscore

# (label, N queries, M keys, Hq, Hkv, D) per request.
SHAPES = [("decode, 2,048 keys", 1, 2048, 16, 4, 64),
          ("decode, 256 keys", 1, 256, 16, 4, 64),
          ("d2l toy", 1, 10, 1, 1, 4)]


def median_us(call, budget_s=0.05):
    """Median time of one call, in microseconds, over blocks of calls."""
    call()
    begin, count = time.perf_counter(), 0
    while time.perf_counter() - begin < budget_s / 5:
        call()
        count += 1
    repeat = max(1, count)
    times = []
    for _ in range(5):
        begin = time.perf_counter()
        for _ in range(repeat):
            call()
        times.append((time.perf_counter() - begin) / repeat)
    return statistics.median(times) * 1e6


def measure(engine, requests, n, m, hq, hkv, d, rng):
    qs = [rng.standard_normal((1, n, hq, d), dtype=np.float32) for _ in range(requests)]
    ks = [rng.standard_normal((1, m, hkv, d), dtype=np.float32) for _ in range(requests)]
    vs = [rng.standard_normal((1, m, hkv, d), dtype=np.float32) for _ in range(requests)]
    cu_q = np.arange(requests + 1, dtype=np.int64) * n
    cu_k = np.arange(requests + 1, dtype=np.int64) * m
    packed_q = np.empty((requests * n, hq, d), np.float32)
    packed_k = np.empty((requests * m, hkv, d), np.float32)
    packed_v = np.empty_like(packed_k)
    out = np.empty((requests * n, hq, d), np.float32)

    def one_by_one():
        for q, k, v in zip(qs, ks, vs):
            engine.multihead_attention(q, k, v)

    def pack():
        np.concatenate([q[0] for q in qs], out=packed_q)
        np.concatenate([k[0] for k in ks], out=packed_k)
        np.concatenate([v[0] for v in vs], out=packed_v)

    def packed_call():
        engine.multihead_attention_packed(packed_q, packed_k, packed_v, cu_q, cu_k, out=out)

    pack()
    packed_call()
    for s, (q, k, v) in enumerate(zip(qs, ks, vs)):
        alone = engine.multihead_attention(q, k, v)
        if not np.array_equal(alone[0], out[s * n:(s + 1) * n]):
            raise SystemExit(f"request {s}: the packed call's bits differ from its own call's")

    rounds = {"calls": [], "packed": [], "copy": []}
    for _ in range(7):  # alternated, so that load falls on all three alike
        rounds["calls"].append(median_us(one_by_one))
        rounds["packed"].append(median_us(packed_call))
        rounds["copy"].append(median_us(pack))
    return {key: statistics.median(values) for key, values in rounds.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8, help="requests arriving at once")
    parser.add_argument("--threads", type=int, default=1, help="engine threads per call")
    args = parser.parse_args()
    engine = attnscore.Engine(threads=args.threads)
    rng = np.random.default_rng(0)
    print(f"{args.requests} requests at once, {args.threads} engine thread(s); medians in µs")
    print(f"{'shape':20s} {'S calls':>9s} {'packed':>9s} {'copy':>9s} {'(packed+copy)/calls':>20s}"
          f" {'saved/request, no copy':>23s}")
    for label, n, m, hq, hkv, d in SHAPES:
        t = measure(engine, args.requests, n, m, hq, hkv, d, rng)
        ratio = (t["packed"] + t["copy"]) / t["calls"]
        saved = (t["calls"] - t["packed"]) / args.requests
        print(f"{label:20s} {t['calls']:9.1f} {t['packed']:9.1f} {t['copy']:9.1f} {ratio:20.2f}"
              f" {saved:23.2f}")


if __name__ == "__main__":
    main()
