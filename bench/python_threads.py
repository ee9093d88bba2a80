#!/usr/bin/python3
"""What the Python package costs beside the C++ call, and whether two Python
threads run engine calls at once (the GIL is released during each call).

  PYTHONPATH=build/python /usr/bin/python3 bench/python_threads.py [--cli build/bin/attnscore]

Prints, in one run:
- the d2l dot-product toy (Q (2, 1, 2), K (2, 10, 2), V (2, 10, 4), lengths
  [2, 6]) from Python: the median per call over 100 blocks of 2,000 calls;
  with --cli, `attnscore bench` of the same shape and lengths beside it;
- two Python threads against one: a 1-thread engine, dot product (8, 256,
  1024, D 128), 10 calls per thread, the serial pair then the threaded pair,
  7 rounds; the median of parallel / serial time (0.5 is perfect on 2 free
  cores, 1.0 means no overlap at all).
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
import timeit

import numpy as np

import attnscore


def toy_from_python(engine):
    q = np.random.default_rng(0).standard_normal((2, 1, 2), dtype=np.float32)
    k = np.ones((2, 10, 2), np.float32)
    v = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))
    lens = np.array([2, 6], np.int64)

    def call():
        return engine.dot_product_attention(q, k, v, valid_lens=lens)

    for _ in range(1000):
        call()
    per_call = [timeit.timeit(call, number=2000) / 2000 * 1e6 for _ in range(100)]
    return statistics.median(per_call)


def toy_from_cli(cli):
    with tempfile.TemporaryDirectory() as work:
        lens = os.path.join(work, "lens.npy")
        np.save(lens, np.array([2, 6], np.int64))
        result = subprocess.run([cli, "bench", "dot", "--batch", "2", "--queries", "1", "--keys",
                                 "10", "--query-dim", "2", "--value-dim", "4", "--valid-lens",
                                 lens, "--repeat", "200000", "--json"],
                                check=True, capture_output=True, text=True)
    return json.loads(result.stdout)["median_us"]


def two_threads(engine, rounds=7, calls=10):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((8, 256, 128), dtype=np.float32)
    k = rng.standard_normal((8, 1024, 128), dtype=np.float32)
    v = rng.standard_normal((8, 1024, 128), dtype=np.float32)
    outs = [np.empty((8, 256, 128), np.float32) for _ in range(2)]

    def work(slot):
        for _ in range(calls):
            engine.dot_product_attention(q, k, v, out=outs[slot])

    work(0)
    ratios = []
    for _ in range(rounds):
        begin = time.perf_counter()
        work(0)
        work(1)
        serial = time.perf_counter() - begin
        threads = [threading.Thread(target=work, args=(slot,)) for slot in (0, 1)]
        begin = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ratios.append((time.perf_counter() - begin) / serial)
    return ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", help="the attnscore CLI, to time the same toy in C++")
    args = parser.parse_args()
    engine = attnscore.Engine(threads=1)
    python_us = toy_from_python(engine)
    line = "d2l dot toy from Python: %.2f us per call" % python_us
    if args.cli:
        cli_us = toy_from_cli(args.cli)
        line += "; C++ (attnscore bench): %.2f us; Python adds %.2f us" % (cli_us,
                                                                          python_us - cli_us)
    print(line)
    ratios = two_threads(engine)
    print("two threads / serial: median %.2f (rounds: %s)"
          % (statistics.median(ratios), " ".join("%.2f" % r for r in ratios)))


if __name__ == "__main__":
    main()
