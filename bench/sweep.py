#!/usr/bin/python3
"""How cost grows with the key count M: runs the sweep and draws it.

    /usr/bin/python3 bench/sweep.py [--build build] [--repetitions 3]
        [--min-time SECONDS] [--torch | --no-torch] [--max-keys 131072]
        [--out-dir docs]

Runs BUILD/bin/attnscore_bench's sweep (bench/sweep_bench.cc: decode, also
with its inputs 16 bytes past a 64-byte line (all others lie on lines, as
PyTorch's tensors do), causal prefill, the multi-head op's causal prefill
with 8 heads (M up to 16,384), additive attention on one batch entry, and
GQA decode from a KvCache in fp32, bf16 and int8 (8 query heads over 2 KV
heads), M = 64 to 131,072 doubling, or up to --max-keys, each beside its limit at the same M) once
with --threads 1 and once with --threads 2, then, with --torch, the PyTorch
seed modules (tools/seed_modules.py) on the same shapes with
torch.set_num_threads(1) and (2), where their inputs, scores and mask fit
in TORCH_BYTES. From those runs it writes, into --out-dir:

  sweep.md          per workload a table: M, the 1-thread median and rate,
                    the limit's rate and the workload's share of it, the
                    2-thread median and speed-up over 1 thread, and
                    PyTorch's 1-thread median and attnscore's speed-up over
                    it; then the trend check; a header with the CPU, the
                    Highway target, oneDNN, the commit, the date and the
                    command that remakes it;
  sweep_time.png    median time against M, log-log, every series;
  sweep_limit.png   % of the limit against M, at 1 thread.

Limits: decode against reading its own K and V, round by round in turn
with it in one process (BM_SweepDecode's op_us and limit_us), and decode
off lines against reading as many bytes on lines (BM_SweepRead), each read
as cache-resident as the op's; both prefills against one oneDNN fp32 matmul with the
same inner dimension D + Dv, square, min(M, 1024) on a side (BM_SweepMatmul:
the 1024 x 1024 product from M = 1,024 on), counting only the
visible keys' FLOPs; additive against its own score kernel alone at its
best (BM_SweepAdditiveKernel: 16 queries, 4,096 keys in cache, the same
rate at every M), the bulk of its work; GQA decode from a KvCache of each
precision against reading the bytes that cache holds for its keys (bf16
words; int8 codes and their scales), in turn with it as decode's
(BM_SweepGqaDecode*'s op_us, limit_us and bytes). Each limit is run in the
same process as its workload; the 2-thread columns report speed-up, not % of a
limit (the read is one thread's).

Trend check: each inner point of a series against the geometric mean of its
two neighbours (the straight line between them on the log-log plot); the
page names each series' worst point and flags any beyond 1.5×.

Exit status: 0 all three files written; 1 a benchmark or PyTorch run failed;
2 bad arguments or a missing binary. On any failure nothing is written.
"""
import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (the report's facts, medians and atomic writes)

REPO_ROOT = report.REPO_ROOT
THREADS = (1, 2)
CACHE_PRECISIONS = ("fp32", "bf16", "int8")  # a KvCache's, as BM_SweepGqaDecode* names them
GQA = tuple("GQA decode %s" % p for p in CACHE_PRECISIONS)
WORKLOADS = ("decode", "decode off lines", "prefill", "multi-head prefill", "additive") + GQA
FAMILY = {"decode": "BM_SweepDecode", "decode off lines": "BM_SweepDecodeOffLines",
          "prefill": "BM_SweepPrefill",
          "multi-head prefill": "BM_SweepMultiHeadPrefill", "additive": "BM_SweepAdditive"}
# The limits run as families of their own; decode and GQA decode time theirs
# in their own benchmarks, in turn with the op (alternated_read).
LIMIT = {"decode off lines": "BM_SweepRead",
         "prefill": "BM_SweepMatmul",
         "multi-head prefill": "BM_SweepMatmul", "additive": "BM_SweepAdditiveKernel"}
for _p, _w in zip(CACHE_PRECISIONS, GQA):
    FAMILY[_w] = "BM_SweepGqaDecode" + _p.capitalize()
FEWEST_KEYS, MOST_KEYS = 64, 131072  # as bench/sweep_bench.cc registers them
DEPTH = 64
ADDITIVE_QUERIES = 16
TORCH_BYTES = 2 << 30  # a PyTorch point is skipped when its tensors would pass this
TORCH_SECONDS = 2.0    # time spent per PyTorch point, at least 3 calls
TREND_LIMIT = 1.5


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="sweep.py", description="Sweeps the key count M at 1 and 2 threads and draws "
        "docs/sweep.md, docs/sweep_time.png and docs/sweep_limit.png.")
    ap.add_argument("--build", help="build directory (default: build)")
    ap.add_argument("--repetitions", type=int, default=3,
                    help="--benchmark_repetitions (default 3)")
    ap.add_argument("--min-time", type=float, default=0.1,
                    help="--benchmark_min_time in seconds (default 0.1)")
    ap.add_argument("--torch", action=argparse.BooleanOptionalAction, default=None,
                    help="time the PyTorch seed modules too (default: when torch imports)")
    ap.add_argument("--max-keys", type=int, default=MOST_KEYS,
                    help="sweep M up to this power of two only (default %d)" % MOST_KEYS)
    ap.add_argument("--out-dir", help="directory to write into (default: docs)")
    args = ap.parse_args(argv)
    if (args.max_keys < 4 * FEWEST_KEYS or args.max_keys > MOST_KEYS
            or args.max_keys & (args.max_keys - 1)):
        ap.error("--max-keys must be a power of two from %d to %d, not %d"
                 % (4 * FEWEST_KEYS, MOST_KEYS, args.max_keys))
    if args.repetitions < 1:
        ap.error("--repetitions must be at least 1")
    if args.min_time <= 0:
        ap.error("--min-time must be positive")
    return args


def bench_filter(max_keys):
    """The sweep's benchmarks up to max_keys keys."""
    keys = [FEWEST_KEYS << i for i in range((max_keys // FEWEST_KEYS).bit_length())]
    if max_keys == MOST_KEYS:
        return "BM_Sweep"
    return "BM_Sweep(Decode|DecodeOffLines|Prefill|MultiHeadPrefill|Matmul|Additive)" \
        "/keys:(%s)/|" \
        "BM_SweepGqaDecode(Fp32|Bf16|Int8)/keys:(%s)/|" \
        "BM_SweepAdditiveKernel/|" \
        "BM_SweepRead/bytes:(%s)/" % ("|".join(map(str, keys)),
                                      "|".join(map(str, keys)),
                                      "|".join(str(m * 2 * DEPTH * 4) for m in keys))


def run_bench(bench, threads, args, json_path):
    cmd = [bench, "--threads", str(threads), "--benchmark_filter=%s" % bench_filter(args.max_keys),
           "--benchmark_repetitions=%d" % args.repetitions,
           "--benchmark_report_aggregates_only=true",
           "--benchmark_min_time=%g" % args.min_time,
           "--benchmark_out=%s" % json_path, "--benchmark_out_format=json"]
    sys.stderr.write("sweep: running %s\n" % " ".join(shlex.quote(c) for c in cmd))
    sys.stderr.flush()
    try:
        rc = subprocess.run(cmd, stdout=sys.stderr).returncode
    except OSError as e:
        raise report.Failure("cannot run %s: %s" % (bench, e), 1)
    if rc != 0:
        raise report.Failure("%s exited with status %d" % (bench, rc), 1)
    try:
        with open(json_path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise report.Failure("no JSON from %s: %s" % (bench, e), 1)
    failed = ["%s: %s" % (b.get("name"), b.get("error_message", "error"))
              for b in data.get("benchmarks", []) if b.get("error_occurred")]
    if failed:
        raise report.Failure("benchmarks failed:\n  " + "\n  ".join(failed), 1)
    return data


def series(runs):
    """workload -> {M: (seconds, rate, limit rate)}, from one run's medians."""
    by_family = {}
    for name, b in runs.items():
        a = report.args_of(name)
        m = a["bytes"] // (2 * DEPTH * 4) if "bytes" in a else a["keys"]
        by_family.setdefault(report.family(name), {})[m] = b
    rate = {"decode off lines": report.gbps, "prefill": report.gflops,
            "multi-head prefill": report.gflops, "additive": report.per_ns}
    out = {}
    for w in WORKLOADS:
        if w == "decode" or w in GQA:  # the op and its limit in turn in one benchmark
            out[w] = {m: alternated_read(b, m)
                      for m, b in sorted(by_family.get(FAMILY[w], {}).items())}
            continue
        limits = by_family.get(LIMIT[w], {})
        if w == "additive" and limits:  # one point, the kernel at its best
            limits = {m: next(iter(limits.values())) for m in by_family.get(FAMILY[w], {})}
        out[w] = {m: (report.seconds(b), rate[w](b),
                      rate[w](limits[m]) if m in limits else None)
                  for m, b in sorted(by_family.get(FAMILY[w], {}).items())}
    return out


def alternated_read(b, m):
    """(seconds, GB/s, limit GB/s) of a decode of M keys timed in turn with the
    read of its K and V, or of the bytes its cache holds (counters op_us,
    limit_us and, from a cache, bytes)."""
    gigabytes = b.get("bytes", m * 2 * DEPTH * 4) / 1e9
    return b["op_us"] * 1e-6, gigabytes / (b["op_us"] * 1e-6), gigabytes / (b["limit_us"] * 1e-6)


def torch_points(threads, keys):
    """workload -> {M: median seconds} of the PyTorch seed modules."""
    import torch
    sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))
    from seed_modules import AdditiveAttention, DotProductAttention
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    out = {w: {} for w in WORKLOADS}
    for m in keys:
        calls = {}
        # Bytes each would hold at once: inputs, and for the dot product the
        # (N, M) scores with their mask and softmax copies, for additive the
        # (N, M, H) features and their tanh.
        if 4 * m * 2 * DEPTH * 3 <= TORCH_BYTES:
            attn = DotProductAttention(dropout=0)
            attn.eval()
            k, v = torch.randn(1, m, DEPTH, generator=gen), torch.randn(1, m, DEPTH, generator=gen)
            q1 = torch.randn(1, 1, DEPTH, generator=gen)
            lens1 = torch.tensor([m])
            calls["decode"] = lambda a=attn, q=q1, k=k, v=v, l=lens1: a(q, k, v, l)
            if 4 * m * m * 4 <= TORCH_BYTES:
                qm = torch.randn(1, m, DEPTH, generator=gen)
                causal = torch.arange(1, m + 1).reshape(1, m)
                calls["prefill"] = lambda a=attn, q=qm, k=k, v=v, l=causal: a(q, k, v, l)
        if 4 * ADDITIVE_QUERIES * m * DEPTH * 3 <= TORCH_BYTES:
            add = AdditiveAttention(DEPTH, DEPTH, DEPTH, dropout=0)
            add.eval()
            qa = torch.randn(1, ADDITIVE_QUERIES, DEPTH, generator=gen)
            ka, va = torch.randn(1, m, DEPTH, generator=gen), torch.randn(1, m, DEPTH, generator=gen)
            calls["additive"] = lambda a=add, q=qa, k=ka, v=va: a(q, k, v, None)
        for w, fn in calls.items():
            with torch.no_grad():
                fn()  # warm-up, and the time of one call
                t0 = time.perf_counter()
                fn()
                first = time.perf_counter() - t0
                repeat = max(3, min(50, int(TORCH_SECONDS / max(first, 1e-6))))
                samples = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    fn()
                    samples.append(time.perf_counter() - t0)
            out[w][m] = statistics.median(samples)
        sys.stderr.write("sweep: PyTorch, %d thread(s), M %d done\n" % (threads, m))
    return out


def trend(points):
    """(worst factor off the neighbours' line, its M) over inner points."""
    ms = sorted(points)
    worst, at = 0.0, None
    for a, m, b in zip(ms, ms[1:], ms[2:]):
        expected = math.sqrt(points[a] * points[b])
        off = max(points[m] / expected, expected / points[m])
        if off > worst:
            worst, at = off, m
    return worst, at


def time_text(seconds):
    us = seconds * 1e6
    if us < 10:
        return "%.2f" % us
    return "%.1f" % us if us < 1000 else "%.0f" % us


UNITS = {"decode": ("GB/s", "read of K and V"), "decode off lines": ("GB/s", "read of K and V"),
         "prefill": ("GFLOP/s", "oneDNN matmul"),
         "multi-head prefill": ("GFLOP/s", "oneDNN matmul"),
         "additive": ("triples/ns", "score kernel alone")}
UNITS.update((w, ("GB/s", "read of the cache's K and V")) for w in GQA)
TITLES = {
    "decode": "Decode: N = 1, every key valid",
    "decode off lines": "Decode with Q, K and V 16 bytes past a 64-byte line (a large "
                        "std::vector's or NumPy array's placement)",
    "prefill": "Prefill: N = M, query i sees keys 0..i",
    "multi-head prefill": "Multi-head prefill: 8 heads of 64, N = M, causal",
    "additive": "Additive attention: N = 16, Dq = Dk = H = Dv = 64, every key valid",
}
TITLES.update((w, "GQA decode from a KvCache in %s: 8 query heads over 2 KV heads, D 64, "
                  "N = 1" % p) for p, w in zip(CACHE_PRECISIONS, GQA))


def workload_table(w, ours, torch_times):
    unit, limit_name = UNITS[w]
    t = report.Table(["M", "1 thread µs", unit, "limit: " + limit_name, "% of limit",
                      "2 threads µs", "2 threads ÷ 1", "PyTorch 1 thread µs",
                      "speed-up over PyTorch"], "rrrrrrrrr")
    one, two = ours[1][w], ours[2][w]
    for m in sorted(one):
        seconds, rate, limit = one[m]
        share = "%.0f%%" % (100 * rate / limit) if limit else "—"
        two_s = two.get(m, (None,))[0]
        torch_s = torch_times.get(1, {}).get(w, {}).get(m) if torch_times else None
        t.add("{:,}".format(m), time_text(seconds), "%.2f" % rate,
              "%.2f" % limit if limit else "—", share,
              time_text(two_s) if two_s else "—",
              "%.2f×" % (seconds / two_s) if two_s else "—",
              time_text(torch_s) if torch_s else "—",
              "%.2f×" % (torch_s / seconds) if torch_s else "—")
    return t


def trend_table(ours, torch_times):
    t = report.Table(["series", "time: worst factor off its neighbours' line", "at M",
                      "time within 1.5×", "share of the limit: worst factor off", "at M"],
                     "lrrlrr")

    def add(label, times, shares=None):
        if len(times) < 3:
            return
        worst, at = trend(times)
        cells = [label, "%.2f×" % worst, "{:,}".format(at),
                 "yes" if worst <= TREND_LIMIT else "**no**"]
        if shares and len(shares) >= 3:
            worst, at = trend(shares)
            cells += ["%.2f×" % worst, "{:,}".format(at)]
        else:
            cells += ["—", "—"]
        t.add(*cells)

    for w in WORKLOADS:
        for n in THREADS:
            pts = ours[n][w]
            shares = {m: p[1] / p[2] for m, p in pts.items() if p[2]} if n == 1 else None
            add("%s, attnscore, %d thread%s" % (w, n, "s" * (n > 1)),
                {m: p[0] for m, p in pts.items()}, shares)
        # The limit's own time: rate⁻¹ scaled by the work, which grows like the op's.
        pts = ours[1][w]
        add("%s, its limit (%s), 1 thread" % (w, UNITS[w][1]),
            {m: p[0] * p[1] / p[2] for m, p in pts.items() if p[2]})
        if torch_times:
            for n in THREADS:
                add("%s, PyTorch, %d thread%s" % (w, n, "s" * (n > 1)), torch_times[n][w])
    return t


def finish(plt, fig, ax, ylabel, title, legend_size, path):
    """Log-log axes over M, labels, legend, and the figure saved to path."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("keys M")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(ours, torch_times, time_png, limit_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = {"decode": "tab:blue", "decode off lines": "tab:gray", "prefill": "tab:red",
               "multi-head prefill": "tab:purple",
               "additive": "tab:green", "GQA decode fp32": "tab:cyan",
               "GQA decode bf16": "tab:olive", "GQA decode int8": "tab:brown"}
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for w in WORKLOADS:
        for n, style in zip(THREADS, ("-", "--")):
            pts = ours[n][w]
            ms = sorted(pts)
            ax.plot(ms, [pts[m][0] * 1e6 for m in ms], style, marker="o", markersize=3,
                    color=colours[w], label="%s, attnscore, %d thread%s" % (w, n, "s" * (n > 1)))
        if torch_times and torch_times[1][w]:
            pts = torch_times[1][w]
            ms = sorted(pts)
            ax.plot(ms, [pts[m] * 1e6 for m in ms], ":", marker="x", markersize=4,
                    color=colours[w], label="%s, PyTorch seed, 1 thread" % w)
    finish(plt, fig, ax, "median time per call, µs", "Time against the key count", 7, time_png)

    fig, ax = plt.subplots(figsize=(8, 5))
    for w in WORKLOADS:
        pts = ours[1][w]
        ms = [m for m in sorted(pts) if pts[m][2]]
        ax.plot(ms, [100 * pts[m][1] / pts[m][2] for m in ms], "-", marker="o", markersize=3,
                color=colours[w], label="%s (limit: %s)" % (w, UNITS[w][1]))
    finish(plt, fig, ax, "% of the limit, 1 thread", "Share of the limit measured at the same M", 8,
           limit_png)


def page(facts, command, bench_cmds, ours, torch_times, torch_blas):
    out = [
        "<!-- Generated by bench/sweep.py. Do not edit by hand: regenerate it. -->",
        "# How cost grows with the key count",
        "",
        report.para(
            "One batch entry, D = Dv = 64, the key count M from 64 to 131,072, doubling: "
            "decode (one query), the same decode with Q, K and V 16 bytes past a 64-byte "
            "line (where malloc puts a large std::vector's floats, and NumPy an array's; "
            "every other workload's inputs lie on lines, as PyTorch allocates a tensor's), "
            "causal prefill (M queries, query i seeing keys 0..i, as "
            "per-query lengths), the multi-head op's causal prefill with 8 heads (M up to "
            "16,384), additive attention (16 queries), and GQA decode from a KvCache in "
            "each of its precisions (8 query heads over 2 KV heads, one query each). Each "
            "is set against a "
            "limit measured in the same run at the same M: decode's own K and V read once, "
            "in turn with the decode in one process, round by round (the decode off lines "
            "against as many bytes read on lines), as cache-resident as the op's, one "
            "oneDNN fp32 matmul with the prefills' inner "
            "dimension D + Dv, min(M, 1024) on a side (counting only the visible keys' "
            "FLOPs), and additive's own "
            "score kernel alone at its best, 16 queries over 4,096 keys in cache (the "
            "projections and the tanh factors of the keys are the rest of its work), and "
            "GQA decode's read of the bytes its cache holds for the keys (bf16 words; int8 "
            "codes and their scales), in turn with the step as decode's. Medians of the "
            "repetitions; "
            "the PyTorch seed modules are timed on the same shapes where they fit in 2 GiB."),
        "",
        "- CPU: %s" % facts["cpu"],
        "- Highway target: %s; oneDNN %s" % (facts["highway"], facts["onednn"]),
        "- Commit: %s; build %s" % (facts["commit"], facts["build"]),
        "- Date: %s" % facts["date"],
        "- Regenerate: `%s`" % command,
    ]
    for n, cmd in bench_cmds:
        out.append("- Benchmarks at %d thread%s: `%s`" % (n, "s" * (n > 1), cmd))
    if torch_blas:
        out.append("- PyTorch: %s" % torch_blas)
    out += ["", "![time against M](sweep_time.png)", "",
            "![share of the limit against M](sweep_limit.png)", ""]
    for w in WORKLOADS:
        out += ["## " + TITLES[w], "", workload_table(w, ours, torch_times).markdown(), ""]
    out += ["## Trend", "",
            report.para(
                "Each inner point of a series against the geometric mean of its two "
                "neighbours, the straight line between them on the log-log plot: how far "
                "the worst point of each series falls off its neighbours' trend, in time "
                "and, at 1 thread, in the share of its limit. A limit's row is the time "
                "the limit's rate would take for the workload's work at that M: where the "
                "workload's time steps and its share does not, the step is the machine's "
                "(a cache level left behind), and the limit's row shows the same step."),
            "", trend_table(ours, torch_times).markdown(), ""]
    return "\n".join(out)


def main(argv):
    args = parse_args(argv)
    build = report.resolve(args.build, "build")
    out_dir = report.resolve(args.out_dir, "docs")
    bench = os.path.join(build, "bin", "attnscore_bench")
    if not report.executable(bench):
        raise report.Failure("benchmark binary not found or not executable: %s\n"
                             "(build it first, e.g. tools/check, or pass --build DIR)" % bench, 2)
    torch = args.torch
    if torch is None:
        torch = report.torch_importable()
    elif torch and not report.torch_importable():
        raise report.Failure("--torch: %s cannot import torch (apt-get install python3-torch "
                             "libopenblas0-openmp)" % report.PYTHON, 2)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise report.Failure("--out-dir %s is not a directory" % out_dir, 2)

    ours, bench_cmds, ctx = {}, [], {}
    with tempfile.TemporaryDirectory(prefix="attnscore_sweep_") as tmp:
        for n in THREADS:
            data = run_bench(bench, n, args, os.path.join(tmp, "sweep%d.json" % n))
            ctx = ctx or data.get("context", {})
            ours[n] = series(report.medians(data))
            bench_cmds.append((n, "%s --threads %d --benchmark_filter='%s' "
                               "--benchmark_repetitions=%d --benchmark_min_time=%g" % (
                                   report.shown(bench), n, bench_filter(args.max_keys),
                                   args.repetitions, args.min_time)))
    torch_times, torch_blas = None, None
    if torch:
        keys = sorted(ours[1]["decode"])
        torch_times = {n: torch_points(n, keys) for n in THREADS}
        import torch as t
        torch_blas = "%s, seed modules from tools/seed_modules.py" % t.__version__

    md = os.path.join(out_dir, "sweep.md")
    time_png = os.path.join(out_dir, "sweep_time.png")
    limit_png = os.path.join(out_dir, "sweep_limit.png")
    cache = report.cmake_cache(build)
    tree = cache.get("CMAKE_HOME_DIRECTORY") or REPO_ROOT
    commit = report.commit_of(tree, [md, time_png, limit_png])
    date = ctx.get("date", "unknown").replace("T", " ")
    facts = report.describe(ctx, build, cache, commit, tree, date)
    words = ["/usr/bin/python3", "bench/sweep.py"]
    if args.build is not None:
        words += ["--build", args.build]
    if args.repetitions != 3:
        words += ["--repetitions", str(args.repetitions)]
    if args.min_time != 0.1:
        words += ["--min-time", "%g" % args.min_time]
    if args.torch is False:
        words.append("--no-torch")
    if args.max_keys != MOST_KEYS:
        words += ["--max-keys", str(args.max_keys)]
    if args.out_dir is not None:
        words += ["--out-dir", args.out_dir]
    text = page(facts, " ".join(shlex.quote(w) for w in words), bench_cmds, ours, torch_times,
                torch_blas)

    os.makedirs(out_dir, exist_ok=True)
    temps = []
    try:
        for path in (time_png, limit_png):
            fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".sweep-", suffix=".png")
            os.close(fd)
            temps.append((tmp, path))
        plot(ours, torch_times, temps[0][0], temps[1][0])
        temps.append((report.write_atomically(md, text, md), md))
        for tmp, path in temps:
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
    print("sweep: wrote %s, %s and %s" % (md, time_png, limit_png))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except report.Failure as e:
        sys.stderr.write("sweep: error: %s\n" % e)
        sys.exit(e.status)
    except KeyboardInterrupt:
        sys.stderr.write("sweep: interrupted; nothing written\n")
        sys.exit(1)
