#!/usr/bin/python3
"""Tests for bench/compare_builds.py: its per-round ratios on made-up times,
a short run of the real attnscore_bench against itself, and the binaries it
must refuse (exit 2, nothing printed to stdout).

Run: /usr/bin/python3 tests/compare_builds_test.py BENCH_BINARY [-v]
"""

import importlib.util
import math
import os
import re
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "bench",
                      "compare_builds.py")
BENCH = None  # from the command line


def load_script():
    spec = importlib.util.spec_from_file_location("compare_builds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CompareTest(unittest.TestCase):
    def test_ratios_over_all_repetitions_and_per_round(self):
        compare = load_script().compare
        # Round 0: after 10% slower; round 1: the machine 2x slower for both,
        # after 10% faster; round 2 ran in BEFORE only.
        before = {0: [100.0, 102.0, 98.0], 1: [200.0, 200.0, 200.0], 2: [50.0]}
        after = {0: [110.0, 110.0, 110.0], 1: [180.0, 180.0, 180.0]}
        b, a, ratio, low, high = compare(before, after)
        self.assertEqual(b, 102.0)  # median of the 7 times
        self.assertEqual(a, 145.0)  # median of the 6 times
        self.assertAlmostEqual(ratio, 145.0 / 102.0)
        self.assertAlmostEqual(low, 0.9)
        self.assertAlmostEqual(high, 1.1)
        # No round with both (a benchmark that failed in every other round):
        # the overall ratio still, no per-round range.
        b, a, ratio, low, high = compare({0: [100.0]}, {1: [50.0]})
        self.assertEqual(ratio, 0.5)
        self.assertTrue(math.isnan(low) and math.isnan(high))


class RunTest(unittest.TestCase):
    def test_a_build_against_itself(self):
        result = subprocess.run(
            ["/usr/bin/python3", SCRIPT, BENCH, BENCH, "--rounds", "2", "--repetitions", "2",
             "--min-time", "0.01", "--filter", "BM_DotProductToy/"],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = [line for line in result.stdout.splitlines() if line.startswith("| BM_")]
        self.assertEqual(len(rows), 1, result.stdout)
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        self.assertEqual(cells[0], "BM_DotProductToy/real_time")
        before, after, ratio = float(cells[1]), float(cells[2]), float(cells[3])
        # The times are printed rounded to 0.01 µs and the ratio to 0.001,
        # the ratio from the unrounded times: it lies between the ratios of
        # the times' own bounds.
        lowest, highest = (after - 0.005) / (before + 0.005), (after + 0.005) / (before - 0.005)
        self.assertTrue(lowest - 0.0005 <= ratio <= highest + 0.0005, rows[0])
        low, high = map(float, re.fullmatch(r"(\S+) to (\S+)", cells[4]).groups())
        self.assertTrue(0 < low <= high, cells[4])
        self.assertIn("2 alternated rounds of 2 repetitions", result.stdout)

    def test_refuses_a_missing_binary(self):
        result = subprocess.run(["/usr/bin/python3", SCRIPT, BENCH, "/nonexistent/bench"],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stdout, "")
        self.assertIn("/nonexistent/bench is not an executable", result.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: compare_builds_test.py BENCH_BINARY [unittest options]")
    BENCH = sys.argv.pop(1)
    unittest.main()
