#!/usr/bin/python3
"""Two builds' benchmark suites against each other, alternated in one run.

Runs BEFORE's and AFTER's attnscore_bench in turn, ROUNDS times each (A B A B
...), each run with random interleaving and REPETITIONS repetitions, then
prints for every benchmark both medians over all of its repetitions and
their ratio after / before (> 1: AFTER is slower), and the same ratio for
each op's peer from the same binaries, so a ratio that moves with its peer
shows the machine's drift rather than the change. Beside each ratio, the
range of the per-round ratios (round r's AFTER median over its BEFORE
median, the two runs next to each other): a range that straddles 1 is a
change the machine's noise can hide.

    bench/compare_builds.py BEFORE/bin/attnscore_bench AFTER/bin/attnscore_bench \\
        [--rounds 3] [--repetitions 5] [--min-time 0.2] [--filter REGEX]

Exit status: 0, or 2 when a binary is missing or a run fails.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile


def run(binary, args, out):
    cmd = [binary, f"--benchmark_repetitions={args.repetitions}",
           "--benchmark_enable_random_interleaving=true",
           f"--benchmark_min_time={args.min_time}",
           f"--benchmark_out={out}", "--benchmark_out_format=json"]
    if args.filter:
        cmd.append(f"--benchmark_filter={args.filter}")
    result = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"compare_builds.py: error: {binary} failed: {result.stderr.strip()[-500:]}")
    with open(out) as f:
        return json.load(f)


def times(data, into, round_index):
    """Adds each iteration run's real time (ns per iteration) to
    into[name][round_index]."""
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        into.setdefault(b["run_name"], {}).setdefault(round_index, []).append(
            b["real_time"] * scale)


def compare(before, after):
    """For per-round times {round: [ns, ...]} of one benchmark in each build:
    (before median, after median, after / before, lowest and highest
    per-round ratio over the rounds both builds ran, NaN if none), medians
    over all repetitions."""
    b = statistics.median(t for runs in before.values() for t in runs)
    a = statistics.median(t for runs in after.values() for t in runs)
    per_round = [statistics.median(after[r]) / statistics.median(before[r])
                 for r in sorted(set(before) & set(after))] or [math.nan]
    return b, a, a / b, min(per_round), max(per_round)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--filter", default="")
    args = parser.parse_args()
    for binary in (args.before, args.after):
        if not os.access(binary, os.X_OK):
            print(f"compare_builds.py: error: {binary} is not an executable", file=sys.stderr)
            return 2
    before, after = {}, {}
    context = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for label, binary, into in (("before", args.before, before), ("after", args.after, after)):
                data = run(binary, args, os.path.join(tmp, f"{label}{r}.json"))
                context = data.get("context", context)
                times(data, into, r)
                print(f"round {r + 1}/{args.rounds}: {label} done", file=sys.stderr)
    print(f"CPU: {cpu_model()}; highway target {context.get('highway_target', '?')}, "
          f"oneDNN ISA {context.get('onednn_isa', '?')}; {args.rounds} alternated rounds of "
          f"{args.repetitions} repetitions each; medians over all repetitions.\n")
    print("| benchmark | before µs | after µs | after / before | per round |")
    print("|---|---:|---:|---:|---:|")
    ratios = []
    for name in sorted(set(before) & set(after)):
        b, a, ratio, low, high = compare(before[name], after[name])
        ratios.append(ratio)
        print(f"| {name} | {b / 1e3:.2f} | {a / 1e3:.2f} | {ratio:.3f} | {low:.3f} to {high:.3f} |")
    if ratios:
        print(f"\nmedian ratio {statistics.median(ratios):.3f}, range {min(ratios):.3f} to "
              f"{max(ratios):.3f} over {len(ratios)} benchmarks")
    missing = sorted(set(before) ^ set(after))
    if missing:
        print(f"\nin one build only: {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
