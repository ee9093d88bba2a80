#!/usr/bin/python3
"""Ratio table from one attnscore_bench JSON run (medians of repetitions).

    build/bin/attnscore_bench --benchmark_repetitions=9 \
        --benchmark_enable_random_interleaving=true \
        --benchmark_out=bench.json --benchmark_out_format=json
    bench/ratios.py bench.json

Prints markdown: each op's median against its peer from the same run, the
masked softmax's bytes/s against memcpy of the same bytes, and the dot
product's GFLOP/s (valid keys only) against one oneDNN matmul of the same
FLOPs in both peer shapes (inner dim D + Dv, and D).
"""
import json
import re
import sys


def medians(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[b["run_name"]] = b
    return data.get("context", {}), out


def args_of(name):
    return dict(re.findall(r"(\w+):(\d+)", name))


def main():
    context, runs = medians(sys.argv[1])
    print(f"context: highway_target={context.get('highway_target')} "
          f"onednn={context.get('onednn_version')} ({context.get('onednn_isa')}) "
          f"threads={context.get('engine_threads')} "
          f"(OpenMP for the peers: {context.get('omp_max_threads')})\n")
    print("| op | shape | median µs | rate | peer | peer rate | ratio |")
    print("|---|---|---:|---:|---|---:|---:|")
    for name, b in sorted(runs.items()):
        a = args_of(name)
        if name.startswith("BM_MaskedSoftmax"):
            rate = b["bytes_per_second"] / 1e9
            for family, label in (("BM_Memcpy", "memcpy, same bytes"),
                                  ("BM_MemcpyOpBuffers", "memcpy, op's buffers")):
                peer = runs.get(name.replace("BM_MaskedSoftmax", family))
                if peer is None:
                    continue
                peer_rate = peer["bytes_per_second"] / 1e9
                print(f"| masked softmax | ({a['batch']},{a['queries']},{a['keys']}) | "
                      f"{b['real_time']:.1f} | {rate:.2f} GB/s | {label} | {peer_rate:.2f} GB/s | "
                      f"{rate / peer_rate:.0%} |")
        elif name.startswith("BM_DotProduct"):
            shape = f"({a['batch']},{a['queries']},{a['keys']},d{a['dim']})"
            for inner, label in (("0", "oneDNN K=D+Dv"), ("1", "oneDNN K=D")):
                peer = runs.get(name.replace("BM_DotProduct", "BM_OnednnMatmul")
                                .replace("/real_time", f"/inner:{inner}/real_time"))
                if peer is None:
                    continue
                rate, peer_rate = b["GFLOPS"], peer["GFLOPS"]
                print(f"| dot product | {shape} | {b['real_time']:.1f} | {rate:.1f} GFLOP/s | "
                      f"{label} | {peer_rate:.1f} GFLOP/s | {rate / peer_rate:.0%} |")


if __name__ == "__main__":
    main()
