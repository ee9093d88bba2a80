#!/usr/bin/python3
"""Tests for tools/isa_sweep: a short sweep over two cheap benchmarks with the
real attnscore_bench, and the bad arguments it must refuse (exit 2, one error
line, nothing written).

Run: /usr/bin/python3 tests/isa_sweep_test.py BENCH_BINARY [-v]
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

from show_heatmaps_test import png_text_chunks  # beside this file

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tools", "isa_sweep")
BENCH = None  # from the command line
# Two Highway-only benchmarks and a small one that runs oneDNN matmuls (a
# decoder step of concat attention: the tutorial's toy runs without them).
FILTER = "^BM_(MaskedSoftmax/.*misaligned:4|HighwayTanh|Concat/batch:64/)"
BENCHMARKS = 3
# The Highway target each cap dispatches to: scalar is SCALAR or, with newer
# compilers, EMU128.
TARGETS = {"scalar": ("SCALAR", "EMU128"), "sse4": ("SSE4",), "avx2": ("AVX2",),
           "avx512": ("AVX3", "AVX3_DL", "AVX3_ZEN4")}
ERROR_PREFIX = "isa_sweep: error:"


def run(*args):
    return subprocess.run([TOOL, *args], capture_output=True, text=True)


class Sweep(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.dir.name, "sweep")
        cls.result = run("--bench", BENCH, "--out", cls.out, "--filter", FILTER,
                         "--repetitions", "2", "--min-time", "0.01")

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def swept(self):
        return re.findall(r"^\[round 1/2\] (\w+): \d+ benchmarks", self.result.stderr, re.M)

    def test_succeeds_and_shows_progress(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        # "[round r/2] isa: k/3 BM_..." for every benchmark of every ISA, each
        # round running every ISA once.
        self.assertIn("sse4", self.swept(), self.result.stderr)
        for isa in self.swept():
            done = re.findall(rf"^\[round (\d)/2\] {isa}: (\d)/{BENCHMARKS} BM_",
                              self.result.stderr, re.M)
            self.assertEqual(done, [(str(r), str(n)) for r in (1, 2)
                                    for n in range(1, BENCHMARKS + 1)], self.result.stderr)
        rounds = re.findall(r"^\[round (\d)/2\] \w+: \d+ benchmarks", self.result.stderr, re.M)
        self.assertEqual(rounds, ["1"] * len(self.swept()) + ["2"] * len(self.swept()))

    def test_table_has_a_row_per_isa_with_times_and_speedups(self):
        with open(os.path.join(self.out, "isa_sweep.md")) as f:
            markdown = f.read()
        self.assertIn("speed-up over sse4", markdown)
        for op in ("MaskedSoftmax", "HighwayTanh", "Concat"):
            self.assertIn(f"**{op}**", markdown)
        for isa in self.swept():
            rows = re.findall(rf"^\| {isa} \| ([\d,.]+) µs \(×([\d.]+)\) \| (.+) \|$",
                              markdown, re.M)
            self.assertEqual(len(rows), BENCHMARKS, markdown)  # one row per op
            for time, speedup, implementations in rows:
                self.assertGreater(float(time.replace(",", "")), 0)
                if isa == "sse4":
                    self.assertEqual(speedup, "1.00")
                self.assertIn(implementations.split(",")[0], TARGETS[isa])
            # Concat's row names oneDNN's implementation too.
            self.assertEqual(sum(", onednn " in r[2] for r in rows), 1, markdown)

    def test_json_context_names_each_benchmark_s_implementation(self):
        for isa in self.swept():
            with open(os.path.join(self.out, f"{isa}.round2.json")) as f:
                context = json.load(f)["context"]
            self.assertEqual(context["isa_cap"], isa)
            named = [k for k in context if k.startswith("implementation BM_")]
            self.assertEqual(len(named), BENCHMARKS, context)
            self.assertIn(context["highway_target"], TARGETS[isa])
            for key in named:
                self.assertTrue(context[key].startswith(context["highway_target"]), context[key])

    def test_chart_is_a_png_of_every_isa_and_benchmark(self):
        path = os.path.join(self.out, "isa_sweep.png")
        self.assertEqual(png_text_chunks(path).get("Description"),
                         f"attnscore isa sweep: {len(self.swept())} ISAs x {BENCHMARKS} benchmarks")
        leftovers = [n for n in os.listdir(self.out) if ".tmp." in n]
        self.assertEqual(leftovers, [])


class BadArguments(unittest.TestCase):
    def expect_refused(self, args, part):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "sweep")
            result = run("--bench", BENCH, "--out", out, "--min-time", "0.01", *args)
            self.assertEqual(result.returncode, 2, result.stderr)
            lines = result.stderr.strip().splitlines()
            self.assertTrue(lines[-1].startswith(ERROR_PREFIX), result.stderr)
            self.assertIn(part, lines[-1])
            self.assertFalse(os.path.exists(os.path.join(out, "isa_sweep.md")))
            self.assertFalse(os.path.exists(os.path.join(out, "isa_sweep.png")))

    def test_unknown_isa(self):
        self.expect_refused(["--isas", "sse4,avx9000"], "unknown ISA 'avx9000'")

    def test_repeated_isa(self):
        self.expect_refused(["--isas", "sse4,sse4"], "want distinct ISAs")

    def test_filter_matching_nothing(self):
        self.expect_refused(["--filter", "^BM_NoSuchThing/"], "matches no benchmark")

    def test_repetitions_not_positive(self):
        self.expect_refused(["--repetitions", "0"], "want a positive number")

    def test_missing_bench(self):
        with tempfile.TemporaryDirectory() as d:
            result = run("--bench", os.path.join(d, "nothing"), "--out", d)
            self.assertEqual(result.returncode, 2)
            self.assertIn("is not an executable", result.stderr)
            self.assertEqual(os.listdir(d), [])

    def test_out_is_a_file(self):
        with tempfile.NamedTemporaryFile() as f:
            result = run("--bench", BENCH, "--out", f.name)
            self.assertEqual(result.returncode, 2)
            self.assertIn("is not a directory", result.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
        sys.exit("usage: isa_sweep_test.py BENCH_BINARY [unittest args]")
    BENCH = sys.argv.pop(1)
    unittest.main()
