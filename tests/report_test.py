#!/usr/bin/python3
"""Tests for bench/report.py's table of 2 threads against 1: the table from
given benchmark results, and a short run of the real attnscore_bench
(the *TwoThreads benchmarks, one repetition, no PyTorch) into a page.

Run: /usr/bin/python3 tests/report_test.py BENCH_BINARY [-v]
"""

import os
import subprocess
import sys
import tempfile
import unittest

from markdown_tables import table_rows  # beside this file

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "bench",
                      "report.py")
BUILD = None  # from the command line: the benchmark binary's build directory

DECODE = "BM_DotProductTwoThreads/batch:8/queries:1/keys:1024/dim:64/per_query:0/" \
         "iterations:7/real_time"
ENCODER = "BM_DotProductTwoThreads/batch:4/queries:128/keys:128/dim:64/per_query:1/" \
          "iterations:7/real_time"
LONG = "BM_DotProductTwoThreads/batch:1/queries:1024/keys:4096/dim:64/per_query:0/" \
       "iterations:7/real_time"
READ = "BM_CachedReadTwoThreads/bytes:4194304/iterations:7/real_time"


def result(one, two, speedup):
    return {"one_thread_us": one, "two_threads_us": two, "speedup": speedup}


class ThreadsTable(unittest.TestCase):
    def setUp(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import report
        self.report = report

    def test_rows_by_time_with_the_read_beside_decode_only(self):
        runs = {LONG: result(15000.0, 8000.0, 1.87), DECODE: result(60.3, 40.0, 1.5),
                ENCODER: result(200.0, 112.5, 1.78), READ: result(180.0, 95.0, 1.9)}
        pairs = self.report.Pairs()
        title, _, table = self.report.threads_section(runs, pairs)
        self.assertEqual(title, "Two threads against one")
        self.assertEqual(table.rows, [
            ["decode (8, 1, 1024), 64", "60.3", "40.0", "1.50×", "read of 4 MiB", "1.90×"],
            ["encoder (4, 128, 128), 64, per-query lengths", "200.0", "112.5", "1.78×", "—",
             "—"],
            ["long (1, 1024, 4096), 64", "15000", "8000", "1.87×", "—", "—"]])
        self.assertEqual(pairs.used, {DECODE, ENCODER, LONG, READ})

    def test_decode_without_its_peer_and_no_rows_at_all(self):
        title, _, table = self.report.threads_section({DECODE: result(50.0, 30.0, 1.6)},
                                                      self.report.Pairs())
        self.assertEqual(table.rows, [["decode (8, 1, 1024), 64", "50.0", "30.0", "1.60×", "—",
                                       "—"]])
        self.assertEqual(self.report.threads_section({READ: result(1.0, 1.0, 1.0)},
                                                     self.report.Pairs())[2], None)


class ShortRun(unittest.TestCase):
    def test_the_page_tables_every_workload(self):
        with tempfile.TemporaryDirectory() as tmp:
            readme = os.path.join(tmp, "README.md")
            with open(readme, "w") as f:
                f.write("# x\n<!-- performance:begin -->\n<!-- performance:end -->\n")
            out = os.path.join(tmp, "performance.md")
            r = subprocess.run(["/usr/bin/python3", SCRIPT, "--build", BUILD, "--filter",
                                "TwoThreads", "--repetitions", "1", "--no-torch", "--out", out,
                                "--readme", readme], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                rows = table_rows(f.read(), "## Two threads against one")
        self.assertEqual(sorted(r[0] for r in rows), [
            "decode (8, 1, 1024), 64", "decode, one sequence (1, 1, 4096), 64",
            "encoder (4, 128, 128), 64", "encoder (4, 128, 128), 64, per-query lengths",
            "long (1, 1024, 4096), 64"])
        peers = {"decode (8, 1, 1024), 64": "read of 4 MiB",
                 "decode, one sequence (1, 1, 4096), 64": "read of 2 MiB"}
        for row in rows:
            one, two, speedup = float(row[1]), float(row[2]), float(row[3].rstrip("×"))
            self.assertGreater(one, 0)
            self.assertGreater(two, 0)
            # A median of per-round ratios on 2 cores: positive and well below 10.
            self.assertGreater(speedup, 0.2)
            self.assertLess(speedup, 10)
            if row[0] in peers:
                self.assertEqual(row[4], peers[row[0]])
                self.assertGreater(float(row[5].rstrip("×")), 0.2)
            else:
                self.assertEqual(row[4:], ["—", "—"])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: report_test.py BENCH_BINARY [unittest args]")
    BUILD = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv.pop(1))))
    unittest.main()
