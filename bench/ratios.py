#!/usr/bin/python3
"""Ratio table from one attnscore_bench JSON run (medians of repetitions).

    build/bin/attnscore_bench --benchmark_repetitions=9 \
        --benchmark_enable_random_interleaving=true \
        --benchmark_out=bench.json --benchmark_out_format=json
    bench/ratios.py bench.json

Prints markdown: each op's median against its peer from the same run, the
masked softmax's bytes/s against memcpy of the same bytes, and the dot
product's GFLOP/s (valid keys only) against one oneDNN matmul of the same
FLOPs in both peer shapes (inner dim D + Dv, and D), and the additive score
kernel's (query, key, hidden) triples per ns against Highway's Tanh
elements per ns (one tanh per triple). The additive op's own rows show its
triples per ns; its peer, the PyTorch seed module, is in compare_torch.py.
Concat attention against oneDNN alone doing its two linear layers on
inputs already concatenated (both credited with the same FLOPs).
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
            op_family = name.split("/")[0]
            op = ("masked softmax, in cache (arithmetic only)"
                  if op_family == "BM_MaskedSoftmaxInCache" else "masked softmax")
            if "misaligned" in a:
                op += f", {int(a['misaligned']) * 4} B past a line"
            peer_name = re.sub(r"/misaligned:\d+", "", name)
            for family, label in (("BM_Memcpy", "memcpy, same bytes"),
                                  ("BM_MemcpyOpBuffers", "memcpy, op's buffers")):
                peer = runs.get(peer_name.replace(op_family, family))
                if peer is None:
                    continue
                peer_rate = peer["bytes_per_second"] / 1e9
                print(f"| {op} | ({a['batch']},{a['queries']},{a['keys']}) | "
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
        elif name.startswith("BM_AdditiveScoreKernel"):
            tanh = next((r for n, r in runs.items() if n.startswith("BM_HighwayTanh")), None)
            mode = "fast tanh" if a["mode"] == "0" else "Highway Tanh"
            shape = f"({a['queries']},{a['keys']},h{a['hidden']}), {mode}"
            rate = b["items_per_second"] / 1e9
            if tanh is not None:
                peer_rate = tanh["items_per_second"] / 1e9
                print(f"| additive score kernel | {shape} | {b['real_time']:.1f} | "
                      f"{rate:.2f} triples/ns | Highway Tanh alone | {peer_rate:.2f} /ns | "
                      f"{rate / peer_rate:.1f}× |")
        elif name.startswith("BM_Additive/"):
            shape = (f"({a['batch']},{a['queries']},{a['keys']}; {a['dq']}/{a['dk']}/"
                     f"{a['hidden']}; v{a['dv']})")
            print(f"| additive attention | {shape} | {b['real_time']:.1f} | "
                  f"{b['items_per_second'] / 1e9:.2f} triples/ns | PyTorch: compare_torch.py | | |")
        elif name.startswith("BM_Concat/"):
            peer = runs.get(name.replace("BM_Concat/", "BM_ConcatLinearLayersOnednn/"))
            if peer is None:
                continue
            shape = (f"({a['batch']},{a['queries']}; {a['dq']}/{a['dk']}; M{a['rows']} "
                     f"v{a['dv']} o{a['out']})")
            rate, peer_rate = b["GFLOPs"], peer["GFLOPs"]
            print(f"| concat attention | {shape} | {b['real_time']:.1f} | {rate:.1f} GFLOP/s | "
                  f"oneDNN, the two linear layers | {peer_rate:.1f} GFLOP/s | "
                  f"{peer['real_time'] / b['real_time']:.0%} |")


if __name__ == "__main__":
    main()
