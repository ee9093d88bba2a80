#!/usr/bin/python3
"""tools/export_torch.py's multihead and bilinear cases, end to end: the
seed module's state_dict and inputs go through `attnscore run`, and the
engine's outputs must match what the module itself returned (float32 on both
sides: out within 1e-4 relative, weights within 1e-5).

Usage: export_torch_test.py ATTNSCORE_CLI
"""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORT = os.path.join(ROOT, "tools", "export_torch.py")
CLI = None


class ExportTorchTest(unittest.TestCase):
    def case(self, command, export_args, run_args):
        with tempfile.TemporaryDirectory() as folder:
            subprocess.run([sys.executable, EXPORT, command, *export_args, "--out", folder],
                           check=True, capture_output=True, text=True)
            path = lambda name: os.path.join(folder, name)  # noqa: E731
            args = [CLI, "run", command, "--model", path("model.safetensors"),
                    "--queries", path("queries.npy"), "--keys", path("keys.npy"),
                    "--values", path("values.npy"), "--out", path("o.npy"),
                    "--weights-out", path("w.npy"), *run_args]
            if os.path.exists(path("valid_lens.npy")):
                args += ["--valid-lens", path("valid_lens.npy")]
            result = subprocess.run(args, capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stderr)
            out, want = np.load(path("o.npy")), np.load(path("out.npy"))
            self.assertEqual(out.shape, want.shape)
            self.assertLessEqual(np.abs(out - want).max(), 1e-4 * (1 + np.abs(want).max()))
            weights, want_weights = np.load(path("w.npy")), np.load(path("weights.npy"))
            self.assertEqual(weights.shape, want_weights.shape)
            self.assertLessEqual(np.abs(weights - want_weights).max(), 1e-5)

    def test_multihead_with_biases_and_lengths(self):
        self.case("multihead", ["--query-size", "10", "--key-size", "8", "--value-size", "6",
                                "--hiddens", "24", "--heads", "4", "--bias", "--valid-lens", "3,6"],
                  ["--heads", "4"])

    def test_multihead_without_biases(self):
        self.case("multihead", ["--query-size", "16", "--key-size", "16", "--value-size", "16",
                                "--hiddens", "32", "--heads", "8", "--queries", "9",
                                "--keys", "9"], ["--heads", "8"])

    def test_bilinear(self):
        self.case("bilinear", ["--query-size", "5", "--key-size", "7", "--queries", "3",
                               "--valid-lens", "4,10"], [])

    def test_multihead_heads_must_divide(self):
        with tempfile.TemporaryDirectory() as folder:
            result = subprocess.run(
                [sys.executable, EXPORT, "multihead", "--query-size", "4", "--key-size", "4",
                 "--value-size", "4", "--hiddens", "10", "--heads", "4", "--out", folder],
                capture_output=True, text=True)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("--heads 4 does not divide --hiddens 10", result.stderr)
            self.assertEqual(os.listdir(folder), [])


if __name__ == "__main__":
    CLI = sys.argv.pop(1)
    unittest.main()
