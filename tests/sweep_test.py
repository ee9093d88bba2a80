#!/usr/bin/python3
"""Tests for bench/sweep.py: a short sweep (M up to 256, no PyTorch) with the
real attnscore_bench, checked against the benchmark JSON it ran, and the bad
arguments it must refuse (exit 2, one error line, nothing written).

Run: /usr/bin/python3 tests/sweep_test.py BENCH_BINARY [-v]
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

from markdown_tables import table_rows  # beside this file
from show_heatmaps_test import png_text_chunks

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "bench", "sweep.py")
BUILD = None  # from the command line: the benchmark binary's build directory
KEYS = [64, 128, 256]


def run(*args):
    return subprocess.run(["/usr/bin/python3", SCRIPT, *args], capture_output=True, text=True)


class Trend(unittest.TestCase):
    def setUp(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import sweep
        self.trend = sweep.trend

    def test_a_straight_line_is_on_its_trend(self):
        # Time exactly proportional to M: every inner point on its line.
        self.assertEqual(self.trend({64: 1.0, 128: 2.0, 256: 4.0, 512: 8.0}), (1.0, 128))

    def test_names_the_point_furthest_off_either_way(self):
        worst, at = self.trend({64: 1.0, 128: 2.0, 256: 12.0, 512: 8.0, 1024: 16.0})
        # 256 against sqrt(2 · 8) = 4: 3× above; 512 against sqrt(12 · 16): 1.73× below.
        self.assertEqual(at, 256)
        self.assertAlmostEqual(worst, 3.0)
        worst, at = self.trend({64: 4.0, 128: 1.0, 256: 4.0})
        self.assertEqual((worst, at), (4.0, 128))


def shown_bounds(text):
    """The interval a number printed as `text` was rounded from."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    half = 0.5 * 10 ** -decimals
    return float(text) - half, float(text) + half


class Sweep(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.dir.name, "docs")
        cls.result = run("--build", BUILD, "--max-keys", "256", "--no-torch",
                         "--repetitions", "1", "--min-time", "0.01", "--out-dir", cls.out)
        try:
            with open(os.path.join(cls.out, "sweep.md")) as f:
                cls.page = f.read()
        except OSError:
            cls.page = ""

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_writes_page_and_plots(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        self.assertEqual(sorted(os.listdir(self.out)),
                         ["sweep.md", "sweep_limit.png", "sweep_time.png"])
        for png in ("sweep_time.png", "sweep_limit.png"):
            with open(os.path.join(self.out, png), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            png_text_chunks(os.path.join(self.out, png))  # a well-formed PNG

    def test_a_row_per_key_count_with_its_share_of_the_limit(self):
        for heading in ("## Decode:", "## Decode with", "## Prefill", "## Multi-head prefill",
                        "## Additive",
                        "## GQA decode from a KvCache in fp32",
                        "## GQA decode from a KvCache in bf16",
                        "## GQA decode from a KvCache in int8"):
            rows = table_rows(self.page, heading)
            self.assertEqual([r[0] for r in rows], [str(m) for m in KEYS], heading)
            for r in rows:
                one, rate, limit, share, two, speedup = r[1:7]
                # The share is rate ÷ limit, and the speed-up 1-thread ÷ 2-thread time.
                self.assertAlmostEqual(float(share.rstrip("%")),
                                       100 * float(rate) / float(limit), delta=0.6)
                # The times are rounded for the page (e.g. "0.5"), the speed-up
                # is not: it lies between the quotients of the times' bounds.
                (one_low, one_high), (two_low, two_high) = shown_bounds(one), shown_bounds(two)
                self.assertGreaterEqual(float(speedup.rstrip("×")) + 0.005, one_low / two_high)
                self.assertLessEqual(float(speedup.rstrip("×")) - 0.005, one_high / two_low)
                self.assertEqual(r[7:], ["—", "—"])  # no PyTorch

    def test_prefill_counts_visible_keys_only(self):
        # GFLOP/s of prefill at M: 2 (D + Dv) per visible (query, key), M (M + 1) / 2 of them.
        # The multi-head op's: 8 heads of it.
        for heading, heads in (("## Prefill", 1), ("## Multi-head prefill", 8)):
            for r in table_rows(self.page, heading):
                m, us, rate = int(r[0]), float(r[1]), float(r[2])
                flops = heads * 2 * 128 * m * (m + 1) / 2
                self.assertAlmostEqual(rate, flops / (us * 1e-6) / 1e9, delta=0.02 * rate + 0.05)

    def test_decode_on_and_off_lines_count_the_same_bytes(self):
        # K and V of D 64 in fp32: 512 bytes a key, wherever they lie.
        for heading in ("## Decode:", "## Decode with"):
            for r in table_rows(self.page, heading):
                m, (us_low, us_high), rate = int(r[0]), shown_bounds(r[1]), float(r[2])
                self.assertGreaterEqual(rate * us_high * 1e3 * 1.005, 512 * m, (heading, r))
                self.assertLessEqual(rate * us_low * 1e3 * 0.995, 512 * m, (heading, r))

    def test_gqa_decode_counts_the_bytes_its_cache_holds(self):
        # 2 KV heads of D 64, K and V: 4 bytes an element in fp32, 2 in bf16;
        # in int8 a byte a code, and the scales beside them (under a byte more).
        for precision, low, high in (("fp32", 1024, 1024), ("bf16", 512, 512),
                                     ("int8", 256, 512)):
            for r in table_rows(self.page, "## GQA decode from a KvCache in " + precision):
                m, (us_low, us_high), rate = int(r[0]), shown_bounds(r[1]), float(r[2])
                self.assertGreaterEqual(rate * us_high * 1e3 * 1.005, low * m, (precision, r))
                self.assertLessEqual(rate * us_low * 1e3 * 0.995, high * m, (precision, r))

    def test_trend_rows_name_every_series(self):
        rows = table_rows(self.page, "## Trend")
        limits = {"decode": "read of K and V", "decode off lines": "read of K and V",
                  "prefill": "oneDNN matmul",
                  "multi-head prefill": "oneDNN matmul", "additive": "score kernel alone"}
        limits.update(("GQA decode %s" % p, "read of the cache's K and V")
                      for p in ("fp32", "bf16", "int8"))
        self.assertEqual([r[0] for r in rows],
                         [label for w in limits for label in (
                             "%s, attnscore, 1 thread" % w, "%s, attnscore, 2 threads" % w,
                             "%s, its limit (%s), 1 thread" % (w, limits[w]))])
        for r in rows:
            self.assertRegex(r[1], r"^\d+\.\d\d×$")
            self.assertEqual(r[2], "128")  # the one inner point
            self.assertIn(r[3], ("yes", "**no**"))
            if r[0].endswith("attnscore, 1 thread"):
                self.assertRegex(r[4], r"^\d+\.\d\d×$")
                self.assertEqual(r[5], "128")
            else:
                self.assertEqual(r[4:], ["—", "—"])

    def test_command_to_regenerate(self):
        self.assertIn("bench/sweep.py --build", self.page)
        self.assertIn("--max-keys 256", self.page)
        self.assertIn("--benchmark_filter='BM_Sweep(Decode|DecodeOffLines|Prefill|"
                      "MultiHeadPrefill|Matmul|Additive)/keys:(64|128|256)/|"
                      "BM_SweepGqaDecode(Fp32|Bf16|Int8)/keys:(64|128|256)/|"
                      "BM_SweepAdditiveKernel/|"
                      "BM_SweepRead/bytes:(32768|65536|131072)/'", self.page)

    def test_bad_arguments_write_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "docs")
            for args, needle in (
                    (["--max-keys", "100"], "--max-keys must be a power of two"),
                    (["--max-keys", "262144"], "--max-keys must be a power of two"),
                    (["--repetitions", "0"], "--repetitions must be at least 1"),
                    (["--min-time", "0"], "--min-time must be positive"),
                    (["--build", os.path.join(tmp, "nowhere")], "benchmark binary not found")):
                r = run(*args, "--no-torch", "--out-dir", out)
                self.assertEqual(r.returncode, 2, (args, r.stderr))
                self.assertIn(needle, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()[-1:]), 1)
                self.assertFalse(os.path.exists(out), args)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: sweep_test.py BENCH_BINARY [unittest args]")
    BUILD = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv.pop(1))))
    unittest.main()
