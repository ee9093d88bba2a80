#!/usr/bin/python3
"""Tests for tools/check_layers: the repository passes, and copies of it with
one include planted against the layers fail, naming the file and the include.

Run: /usr/bin/python3 tests/check_layers_test.py [-v]
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
TOOL = os.path.join(ROOT, "tools", "check_layers")


def run(root):
    return subprocess.run([sys.executable, TOOL, root], capture_output=True, text=True)


class CheckLayersTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="check_layers.")
        for folder in ("include", "engine", "tools/cli", "tools/npy", "server"):
            shutil.copytree(os.path.join(ROOT, folder), os.path.join(self.dir, folder))

    def tearDown(self):
        shutil.rmtree(self.dir)

    def plant(self, path, include):
        """Adds `#include "include"` after the first line of `path`."""
        full = os.path.join(self.dir, path)
        with open(full) as f:
            lines = f.readlines()
        lines.insert(1, f'#include "{include}"\n')
        with open(full, "w") as f:
            f.writelines(lines)

    def assert_refused(self, path, include, reason):
        self.plant(path, include)
        result = run(self.dir)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn(f'{path}:2: #include "{include}": {reason}', result.stderr)
        self.assertIn("1 include(s) break the layers", result.stderr)

    def test_repository_passes(self):
        result = run(ROOT)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("none upward", result.stdout)

    def test_base_including_an_op_fails(self):
        self.assert_refused("engine/base/workspace.h", "ops/additive.h",
                            "engine/base may not include engine/ops/additive.h")

    def test_op_including_a_public_class_fails(self):
        self.assert_refused("engine/ops/concat.cc", "attnscore/engine.h",
                            "engine/ops may not include include/attnscore/engine.h")

    def test_matmul_including_the_call_layer_fails(self):
        self.assert_refused("engine/matmul/matmul.cc", "api/isa.h",
                            "engine/matmul may not include engine/api/isa.h")

    def test_kernel_including_engine_types_fails(self):
        self.assert_refused("engine/kernels/bf16.cc", "attnscore/status.h",
                            "engine/kernels may not include include/attnscore/status.h")

    def test_cli_reaching_into_the_engine_fails(self):
        self.assert_refused("tools/cli/run.cc", "kernels/masked_softmax.h",
                            "tools/cli may not include engine/kernels/masked_softmax.h")

    def test_public_header_including_a_dependency_fails(self):
        self.assert_refused("include/attnscore/tensor.h", "hwy/highway.h",
                            "a public header includes a dependency")

    def test_generated_protobuf_headers_stand_as_their_proto(self):
        # server/inference.proto is where inference.grpc.pb.h comes from.
        self.plant("server/state.h", "inference.pb.h")
        self.assertEqual(run(self.dir).returncode, 0, run(self.dir).stderr)
        self.assert_refused("server/state.cc", "other.grpc.pb.h", "not a file of the repository")

    def test_unknown_include_fails(self):
        self.assert_refused("engine/api/engine.cc", "ops/no_such_op.h",
                            "not a file of the repository")


if __name__ == "__main__":
    unittest.main()
