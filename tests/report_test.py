#!/usr/bin/python3
"""Tests for bench/report.py's tables of calls timed alternated in one process
(2 threads against 1; workloads against their limits): each table from
given benchmark results, and from a short run of the real attnscore_bench
(those benchmarks only, one repetition, no PyTorch) into a page.

Run: /usr/bin/python3 tests/report_test.py BENCH_BINARY [-v]
"""

import math
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
DECODE_LIMIT = "BM_DotProductAgainstLimit/batch:8/queries:1/keys:1024/dim:64/per_query:0/" \
               "iterations:15/real_time"
ENCODER_LIMIT = "BM_DotProductAgainstLimit/batch:4/queries:128/keys:128/dim:64/per_query:1/" \
                "iterations:15/real_time"
PREFILL_LIMIT = "BM_MultiHeadAgainstMatmul/batch:1/queries:1024/keys:1024/heads:16/" \
                "kv_heads:16/dim:64/causal:1/iterations:15/real_time"
KV_LIMIT = "BM_KvCacheDecodeAgainstRead/batch:4/keys:2048/heads:16/kv_heads:4/dim:64/precision:0/" \
           "iterations:15/real_time"


def result(one, two, speedup):
    return {"one_thread_us": one, "two_threads_us": two, "speedup": speedup}


class ReportTables(unittest.TestCase):
    """Tests of report.py's functions, imported as self.report."""

    def setUp(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import report
        self.report = report


class Ratios(ReportTables):

    def test_two_decimals_or_two_digits_below_a_hundredth(self):
        self.assertEqual([self.report.ratio(x) for x in (1.5, 0.01, 0.0043, 0.0)],
                         ["1.50×", "0.01×", "0.0043×", "0.00×"])

    def test_whole_percentages_or_two_digits_below_one_percent(self):
        self.assertEqual([self.report.percent(x) for x in (1.13, 0.92, 0.01, 0.0043, 0.0)],
                         ["113%", "92%", "1%", "0.43%", "0%"])


class ThreadsTable(ReportTables):

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


def against_limit(op, limit, share):
    return {"op_us": op, "limit_us": limit, "limit_share": share}


class AlternatedTable(ReportTables):
    def test_rows_by_family_then_time_each_with_its_limit(self):
        runs = {KV_LIMIT: against_limit(1216.0, 1030.7, 0.8003),
                PREFILL_LIMIT: against_limit(31753.4, 5929.1, 0.7484),
                ENCODER_LIMIT: against_limit(144.4, 5929.4, 0.6486),
                DECODE_LIMIT: against_limit(62.8, 60.4, 0.9217),
                DECODE: result(60.3, 40.0, 1.5)}
        pairs = self.report.Pairs()
        title, _, table = self.report.alternated_section(runs, pairs, False, {})
        self.assertEqual(title, "Against their limits, alternated")
        matmul = "fp32 matmul (1024, 256) · (256, 1024)"
        self.assertEqual(table.rows, [
            ["dot product decode (8, 1, 1024), D 64", "62.8", "read of its K and V rows",
             "60.4", "92%"],
            ["dot product encoder (4, 128, 128), D 64, per-query lengths", "144.4", matmul,
             "5929", "65%"],
            ["multi-head, B 1, N 1024, M 1024, Hq 16, Hkv 16, D 64, causal top-left", "31753",
             matmul, "5929", "75%"],
            ["KvCache decode, B 4, Hq 16, Hkv 4, D 64, 2048 keys", "1216",
             "read of the K and V it holds", "1031", "80%"]])
        self.assertEqual(pairs.used, {DECODE_LIMIT, ENCODER_LIMIT, PREFILL_LIMIT, KV_LIMIT})

    def test_bf16_skipped_where_the_cpu_has_none_and_no_rows(self):
        why = "this CPU has no bf16 arithmetic (no avx512_bf16 or AMX)"
        table = self.report.alternated_section(
            {DECODE_LIMIT: against_limit(62.8, 60.4, 0.9217)}, self.report.Pairs(), True,
            {ENCODER_LIMIT: why})[2]
        self.assertEqual(table.rows, [
            ["dot product decode (8, 1, 1024), D 64", "62.8", "read of its K and V rows",
             "60.4", "92%"],
            ["dot product encoder (4, 128, 128), D 64, per-query lengths", "—",
             "bf16 matmul (1024, 256) · (256, 1024)", "—", "not measured: " + why]])
        self.assertEqual(self.report.alternated_section({DECODE: result(1.0, 1.0, 1.0)},
                                                        self.report.Pairs(), False, {})[2],
                         None)


class LimitsTable(ReportTables):
    def test_kv_cache_decode_against_the_read_and_against_the_matmul(self):
        step = "BM_KvCacheDecode/batch:4/keys:2048/heads:16/kv_heads:4/dim:64/real_time"
        matmul = "BM_LimitMatmul/precision:0/real_time"
        read = "BM_LimitRead/bytes:16777216/real_time"
        kv_bytes = 4 * 4 * 2048 * 4 * 2 * 64  # B · keys · Hkv · (D + Dv) floats
        runs = {step: {"real_time": 250.0, "time_unit": "us",
                       "bytes_per_second": kv_bytes / 250e-6},
                matmul: {"real_time": 2000.0, "time_unit": "us", "GFLOPS": 268.4},
                read: {"real_time": 140.0, "time_unit": "us",
                       "bytes_per_second": 16777216 / 140e-6}}
        title, _, tables = self.report.limits_section(runs, self.report.Pairs(), {}, False)
        self.assertEqual(title, "This machine's limits")
        rows = table_rows(tables.markdown(), "\n\n")  # the table below the limits'
        # 4 · 64 · 2048 · 16 · 4 = 33.55 MFLOP in 250 µs: 134.2 GFLOP/s, half the matmul's.
        self.assertEqual(rows, [
            ["KvCache decode, B 4, Hq 16, Hkv 4, 2048 keys", "250.0", "67.11 GB/s",
             "read, 16 MiB", "56%"],  # the same bytes as the read's, in 250 µs against 140
            ["KvCache decode, B 4, Hq 16, Hkv 4, 2048 keys, arithmetic", "250.0",
             "134.2 GFLOP/s", "fp32 matmul", "50%"]])


def short_run_rows(regex, title):
    """The rows under `title` on a page from a short run of the benchmarks
    matching `regex`."""
    with tempfile.TemporaryDirectory() as tmp:
        readme = os.path.join(tmp, "README.md")
        with open(readme, "w") as f:
            f.write("# x\n<!-- performance:begin -->\n<!-- performance:end -->\n")
        out = os.path.join(tmp, "performance.md")
        r = subprocess.run(["/usr/bin/python3", SCRIPT, "--build", BUILD, "--filter", regex,
                            "--repetitions", "1", "--no-torch", "--out", out, "--readme",
                            readme], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError("report.py exited %d: %s" % (r.returncode, r.stderr))
        with open(out) as f:
            return table_rows(f.read(), title)


def assert_positive_finite(test, *cells):
    for cell in cells:
        value = float(cell)
        test.assertTrue(0 < value < math.inf, "%r is not a positive time or ratio" % cell)


class ShortRun(unittest.TestCase):
    def test_workloads_against_their_limits(self):
        rows = short_run_rows("Against", "## Against their limits, alternated")
        self.assertEqual(sorted((r[0], r[2]) for r in rows), [
            ("KvCache decode, B 1, Hq 8, Hkv 8, D 64, 1024 keys", "read of the K and V it holds"),
            ("KvCache decode, B 1, Hq 8, Hkv 8, D 64, 1024 keys, bf16 cache",
             "read of the K and V it holds"),
            ("KvCache decode, B 1, Hq 8, Hkv 8, D 64, 1024 keys, int8 cache",
             "read of the K and V it holds"),
            ("KvCache decode, B 4, Hq 16, Hkv 4, D 64, 2048 keys", "read of the K and V it holds"),
            ("KvCache decode, B 4, Hq 16, Hkv 4, D 64, 2048 keys, bf16 cache",
             "read of the K and V it holds"),
            ("KvCache decode, B 4, Hq 16, Hkv 4, D 64, 2048 keys, int8 cache",
             "read of the K and V it holds"),
            ("dot product decode (8, 1, 1024), D 64", "read of its K and V rows"),
            ("dot product decode, one sequence (1, 1, 4096), D 64", "read of its K and V rows"),
            ("dot product encoder (4, 128, 128), D 64, per-query lengths",
             "fp32 matmul (1024, 256) · (256, 1024)"),
            ("dot product long (1, 1024, 4096), D 64", "fp32 matmul (1024, 256) · (256, 1024)"),
            ("dot product long (1, 1024, 4096), D 64, bf16",
             "bf16 matmul (1024, 256) · (256, 1024)"),
            ("multi-head, B 1, N 1024, M 1024, Hq 16, Hkv 16, D 64, causal top-left",
             "fp32 matmul (1024, 256) · (256, 1024)"),
            ("multi-head, N = M = 16384, 1 head, D 64, causal, window (1024, 0)",
             "fp32 matmul (1024, 256) · (256, 1024)")])
        # Times only: how fast they are is the benchmarks' to say, not a
        # test's (ctest runs two tests at once on this 2-core machine).
        for row in rows:
            if row[0].endswith(", bf16") and row[4].startswith("not measured"):
                # A CPU without bf16 arithmetic: the benchmark skips itself.
                self.assertEqual(row[4], "not measured: this CPU has no bf16 arithmetic "
                                         "(no avx512_bf16 or AMX)")
                continue
            assert_positive_finite(self, row[1], row[3], row[4].rstrip("%"))

    def test_the_page_tables_every_workload(self):
        rows = short_run_rows("TwoThreads", "## Two threads against one")
        self.assertEqual(sorted(r[0] for r in rows), [
            "additive big (8, 64, 512), sizes 256", "bilinear (8, 128, 512), 64",
            "concat encoder-sized (8, 256), 128 rows, sizes 256",
            "d2l's multi-head module (1, 1024, 1024), 16 heads of 64, causal",
            "decode (8, 1, 1024), 64", "decode, one sequence (1, 1, 4096), 64",
            "encoder (4, 128, 128), 64", "encoder (4, 128, 128), 64, per-query lengths",
            "long (1, 1024, 4096), 64", "masked softmax (64, 128, 512), per-query lengths",
            "multi-head prefill (1, 1024, 1024), 16 heads of 64, causal"])
        peers = {"decode (8, 1, 1024), 64": "read of 4 MiB",
                 "decode, one sequence (1, 1, 4096), 64": "read of 2 MiB"}
        for row in rows:
            # A 2-thread call while another test holds a core can take 100
            # times its 1-thread time (seen in CI): no bound on the ratio.
            assert_positive_finite(self, row[1], row[2], row[3].rstrip("×"))
            if row[0] in peers:
                self.assertEqual(row[4], peers[row[0]])
                assert_positive_finite(self, row[5].rstrip("×"))
            else:
                self.assertEqual(row[4:], ["—", "—"])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: report_test.py BENCH_BINARY [unittest args]")
    BUILD = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv.pop(1))))
    unittest.main()
