#!/usr/bin/python3
"""Tests for tools/show_heatmaps.py: runs it as a subprocess on small .npy
files in a temporary directory and checks the PNG it writes (or that a bad
input makes it fail cleanly: exit 2, one error line, nothing written).

Run: /usr/bin/python3 tests/show_heatmaps_test.py [-v]
"""

import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    os.pardir, "tools", "show_heatmaps.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ERROR_PREFIX = "show_heatmaps.py: error:"


def png_text_chunks(path):
    """The PNG's tEXt chunks as {keyword: text}."""
    with open(path, "rb") as f:
        data = f.read()
    assert data.startswith(PNG_SIGNATURE), "not a PNG"
    texts, pos = {}, len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length  # length, type, data, crc
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            texts[key.decode("latin-1")] = text.decode("latin-1")
        if kind == b"IEND":
            break
    return texts


def softmax_like(shape, seed=0):
    w = np.random.default_rng(seed).random(shape)
    return (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)


class ShowHeatmapsTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.out = os.path.join(self.dir, "out.png")

    def tearDown(self):
        self._tmp.cleanup()

    def save(self, array, name="w.npy"):
        path = os.path.join(self.dir, name)
        np.save(path, array)
        return path

    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, *args],
                              capture_output=True, text=True, timeout=120)

    def assert_ok(self, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(os.path.isfile(self.out))

    def description(self):
        return png_text_chunks(self.out).get("Description")

    def assert_fails(self, args, mentions=(), out=None):
        """Exit 2, one error line naming `mentions`, no new files."""
        out = out or self.out
        before = sorted(os.listdir(self.dir))
        result = self.run_tool(*args, out)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertTrue(result.stderr.startswith(ERROR_PREFIX), result.stderr)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        for text in mentions:
            self.assertIn(text, result.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)), before)
        return result

    def test_small_weights(self):
        result = self.run_tool(self.save(softmax_like((3, 2, 5))), self.out)
        self.assert_ok(result)
        self.assertIn("3 panel(s) of 2 x 5", result.stdout)
        with open(self.out, "rb") as f:
            self.assertEqual(f.read(8), PNG_SIGNATURE)
        self.assertEqual(self.description(),
                         "attnscore heatmaps: 3 panels of 2 x 5")
        image = matplotlib.image.imread(self.out)
        self.assertGreater(image.shape[0], 0)
        self.assertGreater(image.shape[1], 0)
        # The temporary file was renamed into place, not left beside it.
        self.assertEqual(sorted(os.listdir(self.dir)), ["out.png", "w.npy"])

    def test_batches_selects_panels(self):
        w = self.save(softmax_like((3, 2, 5)))
        self.assert_ok(self.run_tool(w, self.out, "--batches", "0,2"))
        self.assertEqual(self.description(),
                         "attnscore heatmaps: 2 panels of 2 x 5")

    def test_columns_change_layout(self):
        w = self.save(softmax_like((3, 2, 5)))
        ratios = []
        for columns in ("1", "3"):
            self.assert_ok(self.run_tool(w, self.out, "--columns", columns))
            height, width = matplotlib.image.imread(self.out).shape[:2]
            ratios.append(height / width)
        self.assertGreater(ratios[0], ratios[1])

    def test_wrong_rank(self):
        self.assert_fails([self.save(softmax_like((2, 5)))], ["(2, 5)"])
        self.assert_fails([self.save(softmax_like((1, 1, 3, 2, 5)))],
                          ["(1, 1, 3, 2, 5)"])

    def test_heads_draw_a_panel_each(self):
        # run multihead's (B, H, N, M): one panel per (entry, head).
        w = self.save(softmax_like((2, 3, 2, 5)))
        result = self.run_tool(w, self.out)
        self.assert_ok(result)
        self.assertEqual(self.description(), "attnscore heatmaps: 6 panels of 2 x 5")
        height, width = matplotlib.image.imread(self.out).shape[:2]
        self.assertGreater(width, height)  # a row of 3 heads per entry, 2 rows
        self.assert_ok(self.run_tool(w, self.out, "--batches", "1"))
        self.assertEqual(self.description(), "attnscore heatmaps: 3 panels of 2 x 5")
        self.assert_fails([self.save(softmax_like((9, 8, 1, 2)), "many.npy")],
                          ["9 batch entries of 8 head(s)", "--batches"])

    def test_integer_dtype(self):
        self.assert_fails([self.save(np.ones((2, 1, 3), np.int64))],
                          ["int64"])

    def test_missing_input(self):
        self.assert_fails([os.path.join(self.dir, "nope.npy")], ["nope.npy"])

    def test_not_npy(self):
        path = os.path.join(self.dir, "junk.npy")
        with open(path, "wb") as f:
            f.write(np.random.default_rng(1).bytes(200))
        self.assert_fails([path], ["junk.npy"])

    def test_batch_out_of_range(self):
        w = self.save(softmax_like((3, 2, 5)))
        self.assert_fails([w, "--batches", "5"], ["--batches", "5"])

    def test_missing_output_directory(self):
        w = self.save(softmax_like((3, 2, 5)))
        self.assert_fails([w], ["missing"],
                          out=os.path.join(self.dir, "missing", "out.png"))

    def test_failure_keeps_existing_output(self):
        with open(self.out, "wb") as f:
            f.write(b"previous contents")
        self.assert_fails([self.save(softmax_like((2, 5)))], ["(2, 5)"])
        with open(self.out, "rb") as f:
            self.assertEqual(f.read(), b"previous contents")


if __name__ == "__main__":
    unittest.main()
