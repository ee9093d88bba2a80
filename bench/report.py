#!/usr/bin/python3
"""Runs attnscore's benchmark suite once and writes the performance report.

    /usr/bin/python3 bench/report.py [--build build] [--repetitions 9]
        [--min-time SECONDS] [--filter REGEX] [--torch | --no-torch]
        [--out docs/performance.md] [--readme README.md]

It runs BUILD/bin/attnscore_bench once, with --benchmark_repetitions=N,
random interleaving and aggregates only, into a temporary JSON file (plus
--benchmark_min_time and --benchmark_filter when given; without --min-time,
Google Benchmark's default; without --filter, every benchmark but the key
count sweep, which bench/sweep.py runs and draws into docs/sweep.md), then, with --torch, bench/compare_torch.py
against the CLI BUILD/bin/attnscore on 1 thread. From that one run it writes

  --out     a page with this machine's limits (fp32 and bf16 matmul, copy,
            reads from L2, L3 and memory) and each workload's share of
            the limit that bounds it, decode, encoder, long and prefill
            timed alternated with their limits, then a table per op
            (masked softmax, dot product, additive, concat, multi-head):
            each benchmark's median next to its peer's median from the
            same run, and their ratio, with the dot product's speed-up on
            2 threads against 1, then the PyTorch
            comparison; its header names the CPU, the Highway target, oneDNN
            and its ISA, the commit, the date and the command that remakes it;
  --readme  the lines between "<!-- performance:begin -->" and
            "<!-- performance:end -->" (and nothing else): a few headline
            rows, and a link to the page.

The peers, measured in the same binary (bench/peers_bench.cc and the op
files), and the ratio of each, op rate / peer rate (above 1: the op is
faster):
  masked softmax       bytes/s against memcpy of the same bytes, and
                       against memcpy of the op's whole (B, N, M) buffers;
  dot product          GFLOP/s (valid keys only) against one plain oneDNN
                       matmul of the same FLOPs, inner dimension D + Dv and D
                       (per-query lengths: the mean over the queries); on 2
                       threads against 1, decode's speed-up against that of
                       a read of as many bytes as its K and V alone;
  additive             the score kernel's (query, key, hidden) triples/ns
                       against Highway's Tanh alone, elements/ns (one tanh a
                       triple); the whole op's peer is PyTorch (compare_torch);
  concat               oneDNN alone doing the two linear layers on inputs
                       already concatenated, both credited with the same
                       FLOPs: peer median time / op median time.

--torch is on by default where `/usr/bin/python3 -c "import torch"` works.
Defaults for --build, --out and --readme are in the repository holding this
script; paths given are taken from the current directory. The commit named
is that of the source tree the build was configured from (its
CMakeCache.txt), "-dirty" when it has changes other than to the two files
written here.

Exit status: 0 both files written; 1 a benchmark or comparison run failed;
2 bad arguments, a missing binary, a README without the markers, or a
--filter matching no benchmark. On any failure nothing is written.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
BEGIN = "<!-- performance:begin -->"
END = "<!-- performance:end -->"
TORCH_REPEAT = 30
SWEEP_FAMILIES = "BM_Sweep"
ENV_KNOBS = ("ATTNSCORE_ISA", "ATTNSCORE_BENCH_THREADS")  # read by attnscore_bench


class Failure(Exception):
    """A reason to stop, with the exit status to stop with."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------
# Arguments and paths.

def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/report.py",
        description="Run the benchmark suite and write docs/performance.md "
                    "and README.md's performance block.")
    ap.add_argument("--build", help="build directory (default: build)")
    ap.add_argument("--repetitions", type=int, default=9,
                    help="benchmark repetitions; each figure is their median (default 9)")
    ap.add_argument("--min-time", type=float,
                    help="--benchmark_min_time in seconds (default: Google Benchmark's)")
    ap.add_argument("--filter", help="--benchmark_filter REGEX (default: every benchmark but "
                    "the key-count sweep, -BM_Sweep)")
    ap.add_argument("--torch", action=argparse.BooleanOptionalAction, default=None,
                    help="also run bench/compare_torch.py (default: on where "
                         "/usr/bin/python3 can import torch)")
    ap.add_argument("--out", help="page to write (default: docs/performance.md)")
    ap.add_argument("--readme", help="README whose performance block to rewrite "
                                     "(default: README.md)")
    args = ap.parse_args(argv)
    if args.repetitions < 1:
        ap.error("--repetitions must be at least 1")
    if args.min_time is not None and not args.min_time > 0:
        ap.error("--min-time must be positive")
    if args.filter is not None and not args.filter:
        ap.error("--filter is empty")
    return args


def resolve(value, default):
    """A default is in the repository; a path given is from the current directory."""
    return os.path.abspath(value) if value is not None else os.path.join(REPO_ROOT, default)


def shown(path):
    """A path as the regenerating command, run from the repository root, names it."""
    rel = os.path.relpath(path, REPO_ROOT)
    return path if rel.startswith("..") else rel


def regenerate_command(args, build, out, readme, torch_ran):
    words = [PYTHON, "bench/report.py"]
    if args.build is not None:
        words += ["--build", shown(build)]
    if args.repetitions != 9:
        words += ["--repetitions", str(args.repetitions)]
    if args.min_time is not None:
        words += ["--min-time", "%g" % args.min_time]
    if args.filter is not None:
        words += ["--filter", args.filter]
    if not torch_ran:
        words.append("--no-torch")
    if args.out is not None:
        words += ["--out", shown(out)]
    if args.readme is not None:
        words += ["--readme", shown(readme)]
    env = ["%s=%s" % (k, shlex.quote(os.environ[k])) for k in ENV_KNOBS if k in os.environ]
    return " ".join(env + [shlex.quote(w) for w in words])


def executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def torch_importable():
    try:
        return subprocess.run([PYTHON, "-c", "import torch"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


def readme_parts(text, path):
    """The text up to the end of BEGIN, and from END on."""
    begin, end = text.find(BEGIN), text.find(END)
    if text.count(BEGIN) != 1 or text.count(END) != 1 or end < begin:
        raise Failure("%s: want one '%s' and, after it, one '%s'" % (path, BEGIN, END), 2)
    return text[:begin + len(BEGIN)], text[end:]


# ---------------------------------------------------------------------------
# Running.

def run_bench(bench, args, json_path):
    cmd = [bench, "--benchmark_repetitions=%d" % args.repetitions,
           "--benchmark_enable_random_interleaving=true",
           "--benchmark_report_aggregates_only=true",
           "--benchmark_out=%s" % json_path, "--benchmark_out_format=json"]
    if args.min_time is not None:
        cmd.append("--benchmark_min_time=%g" % args.min_time)
    # The key-count sweep (bench/sweep_bench.cc) is bench/sweep.py's.
    cmd.append("--benchmark_filter=%s" % (args.filter if args.filter is not None
                                           else "-" + SWEEP_FAMILIES))
    sys.stderr.write("report: running %s\n" % " ".join(shlex.quote(c) for c in cmd))
    sys.stderr.flush()
    try:  # its console table goes to stderr, as progress
        rc = subprocess.run(cmd, stdout=sys.stderr).returncode
    except OSError as e:
        raise Failure("cannot run %s: %s" % (bench, e), 1)
    if rc != 0:
        raise Failure("%s exited with status %d" % (bench, rc), 1)
    try:
        with open(json_path) as f:
            text = f.read()
    except OSError as e:
        raise Failure("no JSON from %s: %s" % (bench, e), 1)
    if not text.strip():  # what Google Benchmark leaves when the filter matches nothing
        raise Failure("--filter %r matches no benchmark" % args.filter, 2)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise Failure("%s wrote bad JSON: %s" % (bench, e), 1)
    failed = ["%s: %s" % (b.get("name"), b.get("error_message", "error"))
              for b in data.get("benchmarks", [])
              if b.get("error_occurred") and not unsupported(b)]
    if failed:
        raise Failure("benchmarks failed:\n  " + "\n  ".join(failed), 1)
    if not data.get("benchmarks"):
        raise Failure("--filter %r matches no benchmark" % args.filter, 2)
    cmd_shown = [shown(bench)] + ["--benchmark_out=FILE.json" if c.startswith("--benchmark_out=")
                                  else c for c in cmd[1:]]
    return data, " ".join(shlex.quote(c) for c in cmd_shown)


def parse_torch_output(stdout):
    """compare_torch.py's header lines (but the CLI's path) and its table."""
    info, table = [], []
    for line in stdout.splitlines():
        if line.startswith("|"):
            table.append(line)
        elif line.strip() and not table and not line.startswith("attnscore:"):
            info.append(line.strip())
    if len(table) < 3:
        raise Failure("bench/compare_torch.py printed no table:\n%s" % stdout, 1)
    return info, table


def run_torch(cli):
    cmd = [PYTHON, os.path.join(REPO_ROOT, "bench", "compare_torch.py"), "--attnscore", cli,
           "--threads", "1", "--repeat", str(TORCH_REPEAT)]
    sys.stderr.write("report: running %s\n" % " ".join(shlex.quote(c) for c in cmd))
    sys.stderr.flush()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
    except OSError as e:
        raise Failure("cannot run compare_torch.py: %s" % e, 1)
    if p.returncode != 0:
        raise Failure("bench/compare_torch.py exited with status %d:\n%s"
                      % (p.returncode, p.stderr.strip()), 1)
    info, table = parse_torch_output(p.stdout)
    cmd_shown = ["/usr/bin/python3", "bench/compare_torch.py", "--attnscore", shown(cli),
                 "--threads", "1", "--repeat", str(TORCH_REPEAT)]
    return info, table, " ".join(shlex.quote(c) for c in cmd_shown)


# ---------------------------------------------------------------------------
# The machine and the tree.

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def cmake_cache(build):
    values = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"([A-Za-z_][\w-]*):\w+=(.*)$", line.rstrip("\n"))
                if m:
                    values[m.group(1)] = m.group(2)
    except OSError:
        pass
    return values


def git(tree, *argv):
    p = subprocess.run(["git", "-C", tree] + list(argv), stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, universal_newlines=True)
    return p.stdout if p.returncode == 0 else None


def commit_of(tree, written):
    """Short HEAD of tree, "-dirty" for changes (untracked files too) other
    than to the files this script writes."""
    try:
        head = git(tree, "rev-parse", "--short", "HEAD")
        top = git(tree, "rev-parse", "--show-toplevel")
        status = git(tree, "status", "--porcelain")
    except OSError:
        return "unknown"
    if not head or not top or status is None:
        return "unknown"
    top = top.strip()
    ours = {os.path.relpath(os.path.realpath(p), os.path.realpath(top)) for p in written}
    for line in status.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        if path not in ours:
            return head.strip() + "-dirty"
    return head.strip()


# ---------------------------------------------------------------------------
# Tables.

def medians(data):
    """run_name -> its median entry (the run itself with one repetition)."""
    out = {}
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        if b.get("aggregate_name") == "median" or (
                b.get("run_type") == "iteration" and name not in out):
            out[name] = b
    return out


def unsupported(b):
    """A benchmark that skipped itself because the CPU cannot run it (bf16)."""
    return b.get("error_message", "").startswith(UNSUPPORTED)


def skipped(data):
    """{benchmark: why} for the benchmarks that skipped themselves."""
    return {b.get("run_name", b["name"]): b["error_message"]
            for b in data["benchmarks"] if b.get("error_occurred") and unsupported(b)}


def family(name):
    return name.split("/")[0]


def args_of(name):
    return {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", name)}


def us(b):
    return us_text(b["real_time"] *
                   {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "us")])


def us_text(t):
    if t < 10:
        return "%.2f" % t
    return "%.1f" % t if t < 1000 else "%.0f" % t


def seconds(b):
    return b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "us")]


def gbps(b):
    return b["bytes_per_second"] / 1e9


def gflops(b):
    return b.get("GFLOPS", b.get("GFLOPs"))


def per_ns(b):
    return b["items_per_second"] / 1e9


def ratio(x):
    """Two decimals, or two significant digits below 0.01: a 2-thread run whose
    second thread was descheduled can be 200 times slower, and is not 0.00×."""
    return ("%.2f×" if x >= 0.01 or x == 0 else "%.2g×") % x


def percent(share):
    """A share as a whole percentage, or two significant digits below 1%: a
    call descheduled under load is a sliver of its limit, not 0%."""
    x = 100 * share
    return ("%.0f%%" if x >= 1 or x == 0 else "%.2g%%") % x


def para(text):
    """Prose wrapped as the repository's other docs are, with no line starting
    with what Markdown would take for a list item, a heading or a quote."""
    lines = textwrap.wrap(text, 79, break_long_words=False, break_on_hyphens=False)
    for i in range(1, len(lines)):
        while re.match(r"([-+*>#|=]|\d+[.)])(\s|$)", lines[i]) and " " in lines[i - 1]:
            head, _, last = lines[i - 1].rpartition(" ")
            lines[i - 1], lines[i] = head, last + " " + lines[i]
    return "\n".join(lines)


def threads_text(n):
    return "%s thread%s" % (n, "" if str(n) == "1" else "s")


class Table:
    def __init__(self, head, align):
        self.head, self.align, self.rows = head, align, []

    def add(self, *cells):
        self.rows.append([str(c) for c in cells])

    def markdown(self):
        lines = ["| " + " | ".join(self.head) + " |",
                 "|" + "|".join("---:" if a == "r" else "---" for a in self.align) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(lines)


DOT_SHAPES = {(8, 1, 1024): "decode", (1, 1, 4096): "decode, one sequence",
              (4, 128, 128): "encoder", (1, 1024, 4096): "long"}
ADDITIVE_SHAPES = {(2, 1, 10): "toy", (4, 32, 256): "mid", (8, 64, 512): "big"}
CONCAT_SHAPES = {(1, 1): "the tutorial's", (64, 1): "decoder step", (8, 256): "encoder-sized"}

PEER_HEAD = ["peer", "peer median µs"]
NO_PEER = ["—", "—", "—", "—"]


class Pairs:
    """What the tables used: the benchmarks, and each (op, peer) ratio."""

    def __init__(self):
        self.used, self.ratios = set(), {}

    def op(self, name):
        self.used.add(name)

    def pair(self, name, peer, value):
        self.used.update((name, peer))
        self.ratios[(name, peer)] = value
        return ratio(value)


def softmax_section(runs, pairs):
    t = Table(["op", "shape (B, N, M)", "median µs", "GB/s"] + PEER_HEAD +
              ["peer GB/s", "ratio"], "llrrlrrr")
    names = sorted((n for n in runs
                    if family(n) in ("BM_MaskedSoftmax", "BM_MaskedSoftmaxInCache")),
                   key=lambda n: (family(n), -args_of(n).get("misaligned", 0)))
    for name in names:
        b, a = runs[name], args_of(name)
        pairs.op(name)
        if family(name) == "BM_MaskedSoftmaxInCache":
            op = "masked softmax, scores in cache (arithmetic only)"
        elif a.get("misaligned"):
            op = "masked softmax, buffers %d B past a cache line" % (4 * a["misaligned"])
        else:
            op = "masked softmax, buffers on a cache line"
        shape = "(%d, %d, %d)" % (a["batch"], a["queries"], a["keys"])
        base = re.sub(r"/misaligned:\d+", "", name).split("/", 1)[1]
        peers = [(f + "/" + base, label) for f, label in
                 (("BM_Memcpy", "memcpy, same bytes"),
                  ("BM_MemcpyOpBuffers", "memcpy, op's buffers"))
                 if f + "/" + base in runs]
        if not peers:
            t.add(op, shape, us(b), "%.2f" % gbps(b), *NO_PEER)
        for peer, label in peers:
            p = runs[peer]
            t.add(op, shape, us(b), "%.2f" % gbps(b), label, us(p), "%.2f" % gbps(p),
                  pairs.pair(name, peer, gbps(b) / gbps(p)))
    text = ("Rate: the bytes the op must move (valid scores read, every weight written) per "
            "second; the memcpy peers count bytes read + written the same way. \"memcpy, same "
            "bytes\" copies half that many bytes; \"memcpy, op's buffers\" copies a (B, N, M) "
            "float array, the op's own footprint. Valid lengths are random per query, from 1 "
            "to M. The in-cache row computes the same rows and lengths on one (1, N, M) slice "
            "that stays in L2, B times: the arithmetic with memory taken out. "
            "Ratio: op GB/s ÷ peer GB/s.")
    return "Masked softmax", text, t if names else None


def dot_section(runs, pairs):
    t = Table(["shape (B, N, M), D = Dv", "median µs", "GFLOP/s"] + PEER_HEAD +
              ["peer GFLOP/s", "ratio"], "lrrlrrr")
    names = [n for n in runs
             if family(n) in ("BM_DotProduct", "BM_DotProductPerQuery", "BM_DotProductToy")]
    names.sort(key=lambda n: (family(n) == "BM_DotProductToy", seconds(runs[n])))
    for name in names:
        b, a = runs[name], args_of(name)
        pairs.op(name)
        if family(name) == "BM_DotProductToy":
            t.add("d2l's toy (2, 1, 10), D 2, Dv 4", us(b), "—", *NO_PEER)
            continue
        dims = (a["batch"], a["queries"], a["keys"])
        shape = "(%d, %d, %d), %d" % (dims + (a["dim"],))
        if dims in DOT_SHAPES:
            shape = DOT_SHAPES[dims] + " " + shape
        per_query = family(name) == "BM_DotProductPerQuery"
        if per_query:
            shape += ", per-query lengths"
        peers = [(name.replace(family(name) + "/",
                               "BM_OnednnMatmulPerQuery/" if per_query else "BM_OnednnMatmul/")
                  .replace("/real_time", "/inner:%d/real_time" % inner), label)
                 for inner, label in ((0, "oneDNN matmul, inner dim D + Dv"),
                                      (1, "oneDNN matmul, inner dim D"))]
        peers = [(peer, label) for peer, label in peers if peer in runs]
        if not peers:
            t.add(shape, us(b), "%.1f" % gflops(b), *NO_PEER)
        for peer, label in peers:
            p = runs[peer]
            t.add(shape, us(b), "%.1f" % gflops(b), label, us(p), "%.1f" % gflops(p),
                  pairs.pair(name, peer, gflops(b) / gflops(p)))
    text = ("Valid lengths are random per batch entry, from 1 to M (decode's, at most 3 "
            "queries an entry, from M/2 to M: a decoding step's cache is mostly valid), or per "
            "query on the rows so marked. Beyond 3 queries an entry, the engine's tile kernels "
            "take an entry's queries shortest first, a query to a vector lane, two vectors at a "
            "time, each vector over its own longest length. Rate: FLOPs over valid keys only, "
            "2·L·(D + Dv) per query, per second. The peer is one plain oneDNN matmul doing as "
            "many FLOPs (with the mean valid length), with inner dimension D + Dv or, the op's "
            "own Q·Kᵀ widened, D. The one-sequence decode shape and the toy have no peer. "
            "Ratio: op GFLOP/s ÷ peer GFLOP/s.")
    return "Scaled dot-product attention", text, t if names else None


def additive_section(runs, pairs):
    t = Table(["op", "shape", "median µs", "rate"] + PEER_HEAD + ["peer rate", "ratio"],
              "llrrlrrr")
    names = [n for n in runs if family(n) in ("BM_Additive", "BM_AdditiveScoreKernel")]
    names.sort(key=lambda n: (family(n), seconds(runs[n])))
    tanh = next((n for n in sorted(runs) if family(n) == "BM_HighwayTanh"), None)
    for name in names:
        b, a = runs[name], args_of(name)
        pairs.op(name)
        rate = "%.2f triples/ns" % per_ns(b)
        if family(name) == "BM_Additive":
            dims = (a["batch"], a["queries"], a["keys"])
            shape = "(%d, %d, %d), Dq %d, Dk %d, H %d, Dv %d" % (
                dims + (a["dq"], a["dk"], a["hidden"], a["dv"]))
            if dims in ADDITIVE_SHAPES:
                shape = ADDITIVE_SHAPES[dims] + " " + shape
            t.add("additive attention", shape, us(b), rate, "PyTorch (below)", "—", "—", "—")
            continue
        op = "score kernel, " + ("fast tanh" if a["mode"] == 0 else "Highway Tanh")
        shape = "(%d, %d), H %d" % (a["queries"], a["keys"], a["hidden"])
        if tanh is None:
            t.add(op, shape, us(b), rate, *NO_PEER)
            continue
        p = runs[tanh]
        t.add(op, shape, us(b), rate, "Highway Tanh alone, %s floats" % tanh.split("/")[1],
              us(p), "%.2f /ns" % per_ns(p), pairs.pair(name, tanh, per_ns(b) / per_ns(p)))
    text = ("Shapes: (B, N, M) with query, key, hidden and value sizes; random per-batch valid "
            "lengths. Rate: valid (query, key, hidden) triples per ns, one tanh each. The score "
            "kernel (one batch entry, every key valid) is set against Highway's Tanh alone on "
            "the same target, in elements per ns: the ratio is what the fast tanh and the "
            "register tiling buy over a plain vector tanh. The whole op's peer is the PyTorch "
            "module, in the PyTorch table below. Ratio: op rate ÷ peer rate.")
    return "Additive attention", text, t if names else None


def concat_section(runs, pairs):
    t = Table(["shape", "median µs", "GFLOP/s"] + PEER_HEAD + ["peer GFLOP/s", "ratio"],
              "lrrlrrr")
    names = [n for n in runs if family(n) == "BM_Concat"]
    names.sort(key=lambda n: seconds(runs[n]))
    for name in names:
        b, a = runs[name], args_of(name)
        pairs.op(name)
        shape = "B %d, N %d, Dq %d, Dk %d, M %d, Dv %d, out %d" % (
            a["batch"], a["queries"], a["dq"], a["dk"], a["rows"], a["dv"], a["out"])
        if (a["batch"], a["queries"]) in CONCAT_SHAPES:
            shape = CONCAT_SHAPES[(a["batch"], a["queries"])] + ": " + shape
        peer = name.replace("BM_Concat/", "BM_ConcatLinearLayersOnednn/")
        if peer not in runs:
            t.add(shape, us(b), "%.1f" % gflops(b), *NO_PEER)
            continue
        p = runs[peer]
        t.add(shape, us(b), "%.1f" % gflops(b), "oneDNN, the two linear layers", us(p),
              "%.1f" % gflops(p), pairs.pair(name, peer, seconds(p) / seconds(b)))
    text = ("The seq2seq tutorial's `Attn`; M is V's rows, random per-batch valid lengths. "
            "The peer is oneDNN alone doing the module's two linear layers (with bias) on "
            "inputs already concatenated; both are credited with the FLOPs of those layers "
            "and of W V. Ratio: peer median ÷ op median (the same as op GFLOP/s ÷ peer "
            "GFLOP/s): what the softmax, W V and splitting each layer in two blocks cost.")
    return "Concat attention", text, t if names else None


def multihead_section(runs, pairs):
    t = Table(["workload", "median µs", "rate"] + PEER_HEAD + ["peer rate", "ratio"],
              "lrrlrrr")
    names = [n for n in runs if family(n) in ("BM_MultiHead", "BM_KvCacheDecode")]
    names.sort(key=lambda n: (family(n), seconds(runs[n])))
    read = {args_of(n)["bytes"]: n for n in runs if family(n) == "BM_CachedRead"}
    heads_matmul = next((n for n in runs if family(n) == "BM_OnednnMatmulHeads"), None)
    for name in names:
        b, a = runs[name], args_of(name)
        pairs.op(name)
        if family(name) == "BM_KvCacheDecode":
            shape = "decode from a KvCache: B %d, Hq %d, Hkv %d, D %d, %d cached keys" % (
                a["batch"], a["heads"], a["kv_heads"], a["dim"], a["keys"])
            kv_bytes = 4 * a["batch"] * a["keys"] * a["kv_heads"] * 2 * a["dim"]
            peer = read.get(kv_bytes)
            if peer is None:
                t.add(shape, us(b), "%.2f GB/s" % gbps(b), *NO_PEER)
                continue
            p = runs[peer]
            t.add(shape, us(b), "%.2f GB/s" % gbps(b), "reading K and V once", us(p),
                  "%.2f GB/s" % gbps(p), pairs.pair(name, peer, seconds(p) / seconds(b)))
            continue
        causal = {0: "", 1: ", causal top-left", 2: ", causal bottom-right"}[a["causal"]]
        shape = "B %d, N %d, M %d, Hq %d, Hkv %d, D %d%s" % (
            a["batch"], a["queries"], a["keys"], a["heads"], a["kv_heads"], a["dim"], causal)
        if a["queries"] > 3 and heads_matmul is not None:
            p = runs[heads_matmul]
            t.add(shape, us(b), "%.1f GFLOP/s" % gflops(b), "oneDNN matmul of the heads' Q Kᵀ",
                  us(p), "%.1f GFLOP/s" % gflops(p),
                  pairs.pair(name, heads_matmul, gflops(b) / gflops(p)))
        else:
            t.add(shape, us(b), "%.2f GB/s" % gbps(b), *NO_PEER)
    text = ("`Engine::MultiHeadAttention` on token-major Q (B, N, Hq, D) and K, V (B, M, Hkv, "
            "D), no valid lengths, and one decoding step over a `KvCache`. Decode's rate counts "
            "K and V read once; its peer reads as many bytes (a vector max over them, as "
            "cache-resident as the op's data) and the ratio is peer median ÷ op median. The "
            "prefill's rate counts only the unmasked half, 2·(D + Dv) per visible (query, key) "
            "per head; its peer is one batched oneDNN matmul of the heads' Q Kᵀ, (16, 1024, "
            "64) · (16, 64, 1024), and the ratio is op GFLOP/s ÷ peer GFLOP/s.")
    return "Multi-head attention", text, t if names else None


# The other ops' large shapes on 2 threads against 1: each family's row label.
OTHER_TWO_THREADS = {
    "BM_MultiHeadTwoThreads": lambda a: "multi-head prefill (%d, %d, %d), %d heads of %d%s" % (
        a["batch"], a["queries"], a["keys"], a["heads"], a["dim"],
        ", causal" if a["causal"] else ""),
    "BM_MultiHeadModuleTwoThreads": lambda a: "d2l's multi-head module (%d, %d, %d), %d heads "
        "of %d%s" % (a["batch"], a["queries"], a["keys"], a["heads"], a["dim"],
                     ", causal" if a["causal"] else ""),
    "BM_MaskedSoftmaxTwoThreads": lambda a: "masked softmax (%d, %d, %d), per-query lengths" % (
        a["batch"], a["queries"], a["keys"]),
    "BM_AdditiveTwoThreads": lambda a: "additive big (%d, %d, %d), sizes %d" % (
        a["batch"], a["queries"], a["keys"], a["hidden"]),
    "BM_ConcatTwoThreads": lambda a: "concat encoder-sized (%d, %d), %d rows, sizes %d" % (
        a["batch"], a["queries"], a["rows"], a["dq"]),
    "BM_BilinearTwoThreads": lambda a: "bilinear (%d, %d, %d), %d" % (
        a["batch"], a["queries"], a["keys"], a["dim"]),
}


def threads_section(runs, pairs):
    t = Table(["workload", "1 thread µs", "2 threads µs", "speed-up", "peer",
               "peer speed-up"], "lrrrlr")
    names = [n for n in runs
             if family(n) == "BM_DotProductTwoThreads" or family(n) in OTHER_TWO_THREADS]
    names.sort(key=lambda n: runs[n]["one_thread_us"])
    read = {args_of(n)["bytes"]: n for n in runs if family(n) == "BM_CachedReadTwoThreads"}
    for name in names:
        b, a = runs[name], args_of(name)
        pairs.op(name)
        if family(name) in OTHER_TWO_THREADS:
            t.add(OTHER_TWO_THREADS[family(name)](a), us_text(b["one_thread_us"]),
                  us_text(b["two_threads_us"]), ratio(b["speedup"]), "—", "—")
            continue
        dims = (a["batch"], a["queries"], a["keys"])
        shape = "(%d, %d, %d), %d" % (dims + (a["dim"],))
        if dims in DOT_SHAPES:
            shape = DOT_SHAPES[dims] + " " + shape
        if a["per_query"]:
            shape += ", per-query lengths"
        cells = [shape, us_text(b["one_thread_us"]), us_text(b["two_threads_us"]),
                 ratio(b["speedup"])]
        # Decode's peer: the read of as many bytes as its K and V (D = Dv).
        peer = read.get(4 * a["batch"] * a["keys"] * 2 * a["dim"]) if a["queries"] <= 3 else None
        if peer is None:
            t.add(*cells, "—", "—")
            continue
        pairs.op(peer)
        t.add(*cells, "read of %g MiB" % (args_of(peer)["bytes"] / 2**20),
              ratio(runs[peer]["speedup"]))
    text = ("The dot product on 2 threads against 1, on some shapes of its table above with "
            "the same valid lengths, and every other op's large shape (the multi-head causal "
            "prefill, d2l's module, masked softmax, additive, concat, bilinear), timed in one "
            "process: each round makes about 2 ms of "
            "calls on an engine of 1 thread, then about 2 ms on an engine of 2 (at least three "
            "calls each; which goes first alternates), and the speed-up is the median over the "
            "rounds of 1-thread median ÷ 2-thread median (above 1×: 2 threads are faster); the "
            "times are the medians of the rounds' medians. Decode is bound by reading K and V, "
            "so its peer is a read of as many bytes as its K and V buffers alone, timed the "
            "same way, on 2 threads each reading half: how far this machine's caches let a "
            "second thread help at all. On a shared machine the second core may be busy with "
            "other work, which lowers every speed-up here.")
    return "Two threads against one", text, t if names else None


ALTERNATED_FAMILIES = ("BM_DotProductAgainstLimit", "BM_DotProductBf16AgainstLimit",
                       "BM_MultiHeadAgainstMatmul", "BM_MultiHeadWindowAgainstMatmul",
                       "BM_KvCacheDecodeAgainstRead")


def limit_matmul(bf16):
    """The alternated table's name for the matmul limit in a precision."""
    return "%s matmul (1024, 256) · (256, 1024)" % ("bf16" if bf16 else "fp32")


def alternated_section(runs, pairs, bf16, skipped_runs):
    """Workloads against their limits, each timed alternated with it in one process."""
    t = Table(["workload", "call µs", "limit", "limit µs", "share of the limit"], "lrlrr")
    names = [n for n in list(runs) + list(skipped_runs) if family(n) in ALTERNATED_FAMILIES]
    names.sort(key=lambda n: (ALTERNATED_FAMILIES.index(family(n)),
                              runs[n]["op_us"] if n in runs else float("inf")))
    matmul = limit_matmul(bf16)
    for name in names:
        a, f = args_of(name), family(name)
        if f in ("BM_DotProductAgainstLimit", "BM_DotProductBf16AgainstLimit"):
            dims = (a["batch"], a["queries"], a["keys"])
            shape = "dot product %s(%d, %d, %d), D %d%s" % (
                DOT_SHAPES[dims] + " " if dims in DOT_SHAPES else "", *dims, a["dim"],
                ", per-query lengths" if a["per_query"] else "")
            limit = "read of its K and V rows" if a["queries"] <= 3 else matmul
            if f == "BM_DotProductBf16AgainstLimit":
                shape += ", bf16"
                limit = limit_matmul(True)
        elif f == "BM_MultiHeadAgainstMatmul":
            shape = "multi-head, B %d, N %d, M %d, Hq %d, Hkv %d, D %d%s" % (
                a["batch"], a["queries"], a["keys"], a["heads"], a["kv_heads"], a["dim"],
                {0: "", 1: ", causal top-left", 2: ", causal bottom-right"}[a["causal"]])
            limit = matmul
        elif f == "BM_MultiHeadWindowAgainstMatmul":
            shape = "multi-head, N = M = %d, 1 head, D %d, causal, window (%d, 0)" % (
                a["tokens"], a["dim"], a["window_left"])
            limit = matmul
        else:
            shape = "KvCache decode, B %d, Hq %d, Hkv %d, D %d, %d keys%s" % (
                a["batch"], a["heads"], a["kv_heads"], a["dim"], a["keys"],
                {0: "", 1: ", bf16 cache", 2: ", int8 cache"}[a.get("precision", 0)])
            limit = "read of the K and V it holds"
        if name not in runs:
            t.add(shape, "—", limit, "—", "not measured: " + skipped_runs[name])
            continue
        b = runs[name]
        pairs.op(name)
        t.add(shape, us_text(b["op_us"]), limit, us_text(b["limit_us"]),
              percent(b["limit_share"]))
    text = ("Decode, the encoder with per-query lengths, the long call (also in the bf16 "
            "mode, against oneDNN's bf16 matmul, where the CPU has bf16 arithmetic) and the "
            "causal prefill against the limits that bound them, each timed on 1 thread "
            "alternated "
            "with its limit in one process, so that both meet the machine at the same "
            "moments: each round makes about 2 ms of the limit's calls (at least three), then "
            "about 2 ms of the workload's (which goes first alternates), and the share is the "
            "median over the rounds of the workload's rate in its median call as a share of "
            "the limit's; the times are the medians of the rounds' medians. Decode's limit is "
            "a read of its K and V bytes: for the dot product, each entry's K and V rows below "
            "its longest length, from the call's own buffers; for a KvCache, the K and V it "
            "holds, where it holds them. Its share is read time ÷ call time. The others' limit is a matmul of the "
            "limits table's shape, also on 1 thread, and the share is of GFLOP/s, the workload "
            "credited with 2·(D + Dv) FLOPs per valid (query, key) pair, per head (with a "
            "window, the pairs it leaves). The limits "
            "table above sets the same workloads against limits timed apart from them.")
    return "Against their limits, alternated", text, t if names else None


# What BM_LimitMatmul and the benchmarks alternated with its matmul say when
# they skip themselves (kNoBf16Arithmetic, bench/bench_util.h).
UNSUPPORTED = "this CPU has no bf16 arithmetic"
LIMITS = [  # (benchmark, the limit's short name, what it measures)
    ("BM_LimitMatmul/precision:0/real_time", "fp32 matmul",
     "oneDNN matmul, fp32, (1024, 256) · (256, 1024)"),
    ("BM_LimitMatmul/precision:1/real_time", "bf16 matmul",
     "oneDNN matmul, bf16, (1024, 256) · (256, 1024)"),
    ("BM_LimitCopy/bytes:67108864/real_time", "copy", "memcpy of 64 MiB (read + written)"),
    ("BM_LimitRead/bytes:262144/real_time", "read, 256 KiB", "read of 256 KiB (L2)"),
    ("BM_LimitRead/bytes:4194304/real_time", "read, 4 MiB", "read of 4 MiB (L3)"),
    ("BM_LimitRead/bytes:16777216/real_time", "read, 16 MiB", "read of 16 MiB (L3)"),
    ("BM_LimitRead/bytes:268435456/real_time", "read, 256 MiB", "read of 256 MiB (memory)"),
]
LIMIT_NAMES = {name: short for name, short, _ in LIMITS}


def limit_rate(b):
    return ("%.1f GFLOP/s" % gflops(b)) if gflops(b) is not None else ("%.2f GB/s" % gbps(b))


def limits_section(runs, pairs, skipped_runs, bf16):
    """This machine's limits, and each workload as a share of the one that bounds it."""
    t = Table(["limit", "median µs", "rate"], "lrr")
    for name, _, text in LIMITS:
        if name in runs:
            pairs.op(name)
            t.add(text, us(runs[name]), limit_rate(runs[name]))
        elif name in skipped_runs:
            t.add(text, "—", "not measured: " + skipped_runs[name])
    matmul_name = LIMITS[1][0] if bf16 else LIMITS[0][0]
    matmul = runs.get(matmul_name)
    copy = runs.get(LIMITS[2][0])
    reads = sorted((args_of(n)["bytes"], n) for n, _, _ in LIMITS[3:] if n in runs)
    w = Table(["workload", "median µs", "rate", "limit", "share of the limit"], "lrrlr")

    def read_limit(size):
        """The read of the smallest buffer that holds `size` bytes."""
        return next((n for bytes_, n in reads if bytes_ >= size), reads[-1][1] if reads else None)

    for name in sorted(runs, key=lambda n: (family(n), seconds(runs[n]))):
        b, a = runs[name], args_of(name)
        f = family(name)
        if f in ("BM_DotProduct", "BM_DotProductPerQuery"):
            shape = "dot product (%d, %d, %d), D %d" % (a["batch"], a["queries"], a["keys"],
                                                       a["dim"])
            if f == "BM_DotProductPerQuery":
                shape += ", per-query lengths"
            if a["queries"] <= 3:  # decode: bound by reading the valid K and V
                kv = b["bytes_per_second"] * seconds(b)
                peer = read_limit(kv)
                if peer:
                    w.add(shape, us(b), "%.2f GB/s" % gbps(b), LIMIT_NAMES[peer],
                          percent(gbps(b) / gbps(runs[peer])))
                continue
            if matmul:
                w.add(shape, us(b), "%.1f GFLOP/s" % gflops(b), LIMIT_NAMES[matmul_name],
                      percent(gflops(b) / gflops(matmul)))
        elif f == "BM_MultiHead" and a["queries"] > 3 and matmul:
            w.add("multi-head, B %d, N %d, M %d, Hq %d, Hkv %d%s" % (
                a["batch"], a["queries"], a["keys"], a["heads"], a["kv_heads"],
                ", causal" if a["causal"] else ""), us(b), "%.1f GFLOP/s" % gflops(b), LIMIT_NAMES[matmul_name],
                percent(gflops(b) / gflops(matmul)))
        elif f == "BM_KvCacheDecode":
            shape = "KvCache decode, B %d, Hq %d, Hkv %d, %d keys" % (
                a["batch"], a["heads"], a["kv_heads"], a["keys"])
            kv = 4 * a["batch"] * a["keys"] * a["kv_heads"] * 2 * a["dim"]
            peer = read_limit(kv)
            if peer:
                w.add(shape, us(b), "%.2f GB/s" % gbps(b), LIMIT_NAMES[peer],
                      percent(gbps(b) / gbps(runs[peer])))
            # Its arithmetic, D = Dv: 2·(D + Dv) FLOPs per cached key per query head.
            fp32_matmul = runs.get(LIMITS[0][0])
            if fp32_matmul:
                rate = 4.0 * a["dim"] * a["keys"] * a["heads"] * a["batch"] / seconds(b) / 1e9
                w.add(shape + ", arithmetic", us(b), "%.1f GFLOP/s" % rate,
                      LIMIT_NAMES[LIMITS[0][0]], percent(rate / gflops(fp32_matmul)))
        elif f == "BM_MaskedSoftmax" and copy:
            w.add("masked softmax (%d, %d, %d)%s" % (
                a["batch"], a["queries"], a["keys"],
                ", buffers %d B past a cache line" % (4 * a["misaligned"])
                if a.get("misaligned") else ""), us(b),
                  "%.2f GB/s" % gbps(b), LIMIT_NAMES[LIMITS[2][0]], percent(gbps(b) / gbps(copy)))
    text = ("This machine's limits, measured in the same run: one large oneDNN matmul (the "
            "products' limit; in bf16 only on a CPU with bf16 arithmetic), a copy past the "
            "caches, and reads of buffers that stay in a core's L2, in L3 (on CPUs with at "
            "least 512 KiB of L2 and 16 MiB of L3), or in memory. Below, each "
            "workload as a share of the limit that bounds it: the products' FLOPs (valid keys "
            "only) against the %s matmul; decode's bytes (Q, out and the K and V rows it "
            "reads) against the read of the smallest buffer that holds them, as often "
            "re-read as the op's own; the masked softmax's bytes against the copy. A "
            "KvCache decode step is set against both: its bytes against the read, and its "
            "arithmetic (2·(D + Dv) FLOPs per cached key per query head, in fp32) against the "
            "fp32 matmul. A cached key's K and V rows, 4·(D + Dv) bytes a K/V head, serve "
            "Hq / Hkv query heads, so the step does Hq / (2·Hkv) FLOPs per byte it reads, 2 "
            "at Hq 16, Hkv 4: where the matmul's GFLOP/s is about twice the read's GB/s, its "
            "arithmetic alone at the matmul's rate takes as long as the read, and the step "
            "can come near the read only by doing both at once, each near its limit." %
            ("bf16" if bf16 else "fp32"))
    tables = t.markdown() + "\n\n" + w.markdown()
    return "This machine's limits", text, RawTables(tables) if runs else None


class RawTables:
    """Tables already rendered, for a section with more than one."""

    def __init__(self, text):
        self.text = text

    def markdown(self):
        return self.text



def dot_shape(a):
    return "(%d, %d, %d), D %d" % (a["batch"], a["queries"], a["keys"], a["dim"])


# README's rows: (op, its benchmark, its peer's benchmark, the peer as said,
# the shape as said); a row whose op or peer did not run is left out.
HEADLINES = [
    ("masked softmax", "BM_MaskedSoftmax/batch:64/queries:128/keys:512/misaligned:4/real_time",
     "BM_Memcpy/batch:64/queries:128/keys:512/real_time", "memcpy of the same bytes",
     lambda a: "(%d, %d, %d)" % (a["batch"], a["queries"], a["keys"])),
    ("dot product, decode", "BM_DotProduct/batch:8/queries:1/keys:1024/dim:64/real_time",
     "BM_OnednnMatmul/batch:8/queries:1/keys:1024/dim:64/inner:0/real_time",
     "one oneDNN matmul", dot_shape),
    ("dot product, encoder", "BM_DotProduct/batch:4/queries:128/keys:128/dim:64/real_time",
     "BM_OnednnMatmul/batch:4/queries:128/keys:128/dim:64/inner:0/real_time",
     "one oneDNN matmul", dot_shape),
    ("dot product, long", "BM_DotProduct/batch:1/queries:1024/keys:4096/dim:64/real_time",
     "BM_OnednnMatmul/batch:1/queries:1024/keys:4096/dim:64/inner:0/real_time",
     "one oneDNN matmul", dot_shape),
    ("additive score kernel",
     "BM_AdditiveScoreKernel/queries:64/keys:512/hidden:256/mode:0/real_time",
     "BM_HighwayTanh/16384/real_time", "Highway Tanh alone",
     lambda a: "(%d, %d), H %d" % (a["queries"], a["keys"], a["hidden"])),
    ("concat attention, encoder-sized",
     "BM_Concat/batch:8/queries:256/dq:256/dk:256/rows:128/dv:256/out:256/real_time",
     "BM_ConcatLinearLayersOnednn/batch:8/queries:256/dq:256/dk:256/rows:128/dv:256/out:256"
     "/real_time", "oneDNN's two linear layers",
     lambda a: "B %d, N %d, M %d" % (a["batch"], a["queries"], a["rows"])),
]


def headline_table(runs, pairs):
    t = Table(["op", "shape", "median µs", "ratio vs peer"], "llrl")
    for op, name, peer, peer_text, shape in HEADLINES:
        if (name, peer) in pairs.ratios:
            t.add(op, shape(args_of(name)), us(runs[name]),
                  "%s %s" % (ratio(pairs.ratios[(name, peer)]), peer_text))
    return t


# ---------------------------------------------------------------------------
# The page and the README block.

def describe(ctx, build, cache, commit, tree, date):
    """The facts the page's header and the README block state."""
    commit_text = "`%s`" % commit
    if os.path.realpath(tree) != os.path.realpath(REPO_ROOT):
        commit_text += " of %s, the build's source tree" % tree
    return {
        "cpu_model": cpu_model(),
        "cpu": "%s, %s logical CPUs" % (cpu_model(), ctx.get("num_cpus", "?")),
        "threads": threads_text(ctx.get("engine_threads", "?")),
        "engine": "%s (the peers' OpenMP: %s), ISA cap %s, precision %s" % (
            threads_text(ctx.get("engine_threads", "?")),
            threads_text(ctx.get("omp_max_threads", "?")),
            ctx.get("isa_cap", "?"), ctx.get("precision", "?")),
        "load": ", ".join("%.2f" % x for x in ctx.get("load_avg", [])) or "unknown",
        "highway": ctx.get("highway_target", "?"),
        "onednn_isa": ctx.get("onednn_isa", "?"),
        "onednn": "%s, ISA %s" % (ctx.get("onednn_version", "?"), ctx.get("onednn_isa", "?")),
        "commit": commit_text,
        "build": "`%s` (%s)" % (shown(build),
                                cache.get("CMAKE_BUILD_TYPE") or "build type unknown"),
        "date": date,
    }


def page(facts, command, bench_cmd, args, sections, runs, used, torch):
    min_time = ("%g s" % args.min_time if args.min_time is not None
                else "Google Benchmark's default")
    out = [
        "<!-- Generated by bench/report.py. Do not edit by hand: regenerate it. -->",
        "# Performance",
        "",
        para("Generated by `bench/report.py` from one run of the benchmark suite. To "
             "regenerate this page and README.md's performance block, from the repository "
             "root:"),
        "",
        "```sh",
        command,
        "```",
        "",
        "- CPU: %s" % facts["cpu"],
        "- Highway target: %s" % facts["highway"],
        "- oneDNN: %s" % facts["onednn"],
        "- engine: %s" % facts["engine"],
        "- commit: %s" % facts["commit"],
        "- build: %s" % facts["build"],
        "- date: %s" % facts["date"],
        "- load average when the run began: %s" % facts["load"],
        "- run: %s repetitions, random interleaving, min time %s%s" % (
            next((b["repetitions"] for b in runs.values() if "repetitions" in b),
                 args.repetitions), min_time,
            ", filter `%s`" % args.filter if args.filter is not None else ""),
        "",
        "## How to read the ratios",
        "",
        para("Every time is the median of the repetitions of one benchmark, and Google "
             "Benchmark ran the repetitions of all benchmarks interleaved in random order, so "
             "that an op and its peer met the same conditions. Each ratio sets an op's median "
             "against its peer's median from that same run, as op rate ÷ peer rate: above 1× "
             "the op is faster than its peer, below 1× slower. The machine is shared with other "
             "work and noisy: absolute times move between runs by tens of percent and ratios by "
             "less, so compare figures only within one run of this page, never across runs or "
             "machines. The peers run on the engine's thread count, so an op and its peer use "
             "the same cores (but for the table of 2 threads against 1, which sets both "
             "counts side by side, and the alternated one, on 1 thread)."),
        "",
    ]
    for title, text, table in sections:
        out += ["## " + title, "", para(text), ""]
        out += [table.markdown() if table is not None
                else "No benchmark of this op ran (see the filter above)."]
        out.append("")
    others = sorted(n for n in runs if n not in used)
    if others:
        t = Table(["benchmark", "median µs"], "lr")
        for n in others:
            t.add("`%s`" % n, us(runs[n]))
        out += ["## Other benchmarks in this run", "",
                para("Benchmarks with no op row above: peers whose op was filtered out, or "
                     "benchmarks this script does not know yet."),
                "", t.markdown(), ""]
    out += ["## Against PyTorch", ""]
    if torch is None:
        out += [para("Not run (`--no-torch`, or PyTorch is not installed: `apt-get install "
                     "python3-torch libopenblas0-openmp`)."), ""]
    else:
        info, table, torch_cmd = torch
        out += [
            para("The attention ops against the PyTorch seed modules "
                 "(`tools/seed_modules.py`: float32, eval mode, `torch.no_grad()`), run right "
                 "after the benchmarks as"),
            "",
            "```sh",
            torch_cmd,
            "```",
            "",
            para("Each side is the median of %d calls after warm-up, on 1 thread; attnscore is "
                 "timed by its CLI (`attnscore bench ... --json`) on the same shapes and the "
                 "very same valid lengths. Speed-up: PyTorch median ÷ attnscore median (above "
                 "1×: attnscore is faster). These valid lengths are drawn apart from the "
                 "benchmarks', so a shape's time here need not match the tables above."
                 % TORCH_REPEAT),
            "",
        ]
        out += ["- " + line for line in info]
        out += [""] + table + [""]
    labels = sorted((n, runs[n].get("label", "")) for n in runs if runs[n].get("label"))
    if labels:
        t = Table(["benchmark", "implementation"], "ll")
        for n, label in labels:
            t.add("`%s`" % n, label)
        out += ["## What ran each benchmark", "",
                para("The Highway target and the oneDNN implementations each benchmark ran "
                     "(its label). The benchmark command was:"), "",
                "```sh", bench_cmd, "```", "", t.markdown(), ""]
    return "\n".join(out)


def readme_block(facts, command, t, link):
    lines = ["<!-- Generated by bench/report.py. Do not edit by hand: regenerate it. -->",
             para("Medians from one benchmark run on %s (%s, Highway %s, oneDNN ISA %s) at "
                  "commit %s. Each op is set against a peer from the same run; a ratio above "
                  "1× means the op is faster than its peer." % (
                      facts["cpu_model"], facts["threads"], facts["highway"],
                      facts["onednn_isa"], facts["commit"])),
             ""]
    lines += [t.markdown()] if t.rows else ["(No headline benchmark ran in this run.)"]
    lines += ["",
              para("Every table, the comparison with PyTorch and how to read them: "
                   "[%s](%s). To regenerate them, from the repository root:" % (link, link)),
              "",
              "```sh",
              command,
              "```"]
    return "\n".join(lines)


def write_atomically(path, text, mode_from):
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".report-", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if mode_from is not None and os.path.exists(mode_from):
        os.chmod(tmp, os.stat(mode_from).st_mode & 0o7777)
    else:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    return tmp


def main(argv):
    args = parse_args(argv)
    build = resolve(args.build, "build")
    out = resolve(args.out, os.path.join("docs", "performance.md"))
    readme = resolve(args.readme, "README.md")
    bench = os.path.join(build, "bin", "attnscore_bench")
    cli = os.path.join(build, "bin", "attnscore")
    if not executable(bench):
        raise Failure("benchmark binary not found or not executable: %s\n"
                      "(build it first, e.g. tools/check, or pass --build DIR)" % bench, 2)
    torch = args.torch
    if torch is None:
        torch = torch_importable()
    elif torch and not torch_importable():
        raise Failure("--torch: %s cannot import torch (apt-get install python3-torch "
                      "libopenblas0-openmp)" % PYTHON, 2)
    if torch and not executable(cli):
        raise Failure("attnscore CLI not found or not executable: %s\n"
                      "(the PyTorch comparison needs it; build it, or pass --no-torch)" % cli, 2)
    try:
        with open(readme) as f:
            readme_parts(f.read(), readme)
    except OSError as e:
        raise Failure("cannot read %s: %s" % (readme, e), 2)
    if os.path.isdir(out):
        raise Failure("--out %s is a directory" % out, 2)

    with tempfile.TemporaryDirectory(prefix="attnscore_report_") as tmp:
        data, bench_cmd = run_bench(bench, args, os.path.join(tmp, "bench.json"))
    torch_result = run_torch(cli) if torch else None

    ctx = data.get("context", {})
    cache = cmake_cache(build)
    tree = cache.get("CMAKE_HOME_DIRECTORY") or REPO_ROOT
    commit = commit_of(tree, [out, readme])
    date = ctx.get("date", "unknown").replace("T", " ")
    facts = describe(ctx, build, cache, commit, tree, date)
    command = regenerate_command(args, build, out, readme, torch)
    runs = medians(data)
    pairs = Pairs()
    sections = [f(runs, pairs) for f in (softmax_section, dot_section, threads_section,
                                        additive_section, concat_section, multihead_section)]
    bf16 = ctx.get("precision") == "bf16"
    sections[:0] = [limits_section(runs, pairs, skipped(data), bf16),
                    alternated_section(runs, pairs, bf16, skipped(data))]
    page_text = page(facts, command, bench_cmd, args, sections, runs, pairs.used,
                     torch_result)

    link = os.path.relpath(out, os.path.dirname(readme))
    block = readme_block(facts, command, headline_table(runs, pairs), link)
    with open(readme) as f:  # again: it may have changed during the run
        head, tail = readme_parts(f.read(), readme)
    temps = []
    try:
        temps.append((write_atomically(out, page_text, out), out))
        temps.append((write_atomically(readme, head + "\n" + block + "\n" + tail, readme), readme))
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
    print("report: wrote %s and the performance block of %s" % (out, readme))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Failure as e:
        sys.stderr.write("report: error: %s\n" % e)
        sys.exit(e.status)
    except KeyboardInterrupt:
        sys.stderr.write("report: interrupted; nothing written\n")
        sys.exit(1)
