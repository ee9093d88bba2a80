"""What the server's test modules share: the binaries, the golden cases, and
the library's own numbers (through the CLI) to hold the server's answers to."""

import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from server_util import build_dir  # noqa: E402

GOLDEN = os.path.join(ROOT, "tests", "golden")
SERVER = os.path.join(build_dir(), "bin", "attnscore-server")
CLI = os.path.join(build_dir(), "bin", "attnscore")


def golden(case, *names):
    return {name: np.load(os.path.join(GOLDEN, case, name + ".npy")) for name in names}


def library(tmp_path, command, inputs, weights=True, extra=()):
    """The CLI's output (and weights) for `inputs`: the library's numbers."""
    flags = []
    for name, array in inputs.items():
        path = tmp_path / (name + ".npy")
        np.save(path, array)
        flags += ["--" + name.replace("_", "-"), str(path)]
    out = tmp_path / "out.npy"
    flags += ["--out", str(out)]
    if weights:
        flags += ["--weights-out", str(tmp_path / "w.npy")]
    subprocess.run([CLI, "run", *command, *flags, *extra], check=True)
    return np.load(out), (np.load(tmp_path / "w.npy") if weights else None)


def requests_counted(metrics, code, model="masked_softmax"):
    """attnscore_requests_total of the model and status in a /metrics text."""
    prefix = 'attnscore_requests_total{model="%s",code="%d"}' % (model, code)
    for line in metrics.splitlines():
        if line.startswith(prefix):
            return int(line.split()[-1])
    return 0


def bits(array):
    return np.ascontiguousarray(array, np.float32).view(np.uint32)


DOT_TOY = ("dot_toy", "queries", "keys", "values", "valid_lens")


def wait_for_gauge(server, name, value, seconds=10):
    """True once the server's /metrics gives gauge `name` at `value`, polled
    every 2 ms for up to `seconds`; False if it never does."""
    line = f"{name} {value}\n"
    for _ in range(int(seconds / 0.002)):
        _, _, text = server.call("GET", "/metrics")
        if line in (text if isinstance(text, str) else text.decode()):
            return True
        time.sleep(0.002)
    return False
