"""Ctrl-C during a long engine call (python/src/interrupt.h): SIGINT stops
the call within about a row of its work and raises KeyboardInterrupt, and
the out= and weights_out= arrays given are left as they were; a program's
own SIGINT handler lets the call finish; afterwards SIGINT is Python's
again.

Run: PYTHONPATH=BUILD/python /usr/bin/python3 -m pytest tests/python/test_interrupt.py
"""

import os
import signal
import threading
import time

import numpy as np
import pytest

import attnscore

SENTINEL = np.float32(-7.25)


def additive(hidden):
    rng = np.random.default_rng(3)
    weights = {"W_q.weight": rng.standard_normal((hidden, 64), dtype=np.float32) * 0.1,
               "W_k.weight": rng.standard_normal((hidden, 64), dtype=np.float32) * 0.1,
               "w_v.weight": rng.standard_normal((1, hidden), dtype=np.float32)}
    return attnscore.AdditiveAttention.from_state_dict(weights)


def inputs(queries, keys):
    rng = np.random.default_rng(4)
    return (rng.standard_normal((1, queries, 64), dtype=np.float32),
            rng.standard_normal((1, keys, 64), dtype=np.float32),
            rng.standard_normal((1, keys, 32), dtype=np.float32))


def interrupt_after(seconds):
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_sigint_stops_a_long_call_and_leaves_its_outputs_alone():
    # About 7e10 tanh: 4 s on one thread of an AMD EPYC Zen 5.
    model = additive(hidden=4096)
    q, k, v = inputs(4096, 4096)
    engine = attnscore.Engine(threads=1)
    out = np.full((1, 4096, 32), SENTINEL, np.float32)
    weights = np.full((1, 4096, 4096), SENTINEL, np.float32)
    timer = interrupt_after(0.5)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        model(engine, q, k, v, out=out, weights_out=weights)
    stopped = time.monotonic() - start
    timer.join()
    # A generous bound (the call alone takes many times it): what matters is
    # that the call stopped rather than ran to its end.
    assert stopped < 3.0, stopped
    assert (out == SENTINEL).all() and (weights == SENTINEL).all()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # The engine serves the next call; SIGINT outside a call is Python's.
    small_out = np.full((1, 8, 32), SENTINEL, np.float32)
    got = model(engine, q[:, :8], k[:, :16], v[:, :16], out=small_out)
    assert got is small_out and np.isfinite(small_out).all()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)


def test_sigint_stops_the_dot_product_on_two_threads():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 16384, 64), dtype=np.float32)
    k = rng.standard_normal((1, 131072, 64), dtype=np.float32)  # 5.5e11 FLOPs
    engine = attnscore.Engine(threads=2)
    out = np.full((1, 16384, 64), SENTINEL, np.float32)
    timer = interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        engine.dot_product_attention(q, k, k, out=out)
    timer.join()
    assert (out == SENTINEL).all()


def test_a_handler_of_the_program_s_own_lets_the_call_finish():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: seen.append(number))
    try:
        model = additive(hidden=256)
        q, k, v = inputs(1024, 2048)  # about a second
        engine = attnscore.Engine(threads=1)
        want = model(engine, q, k, v)
        timer = interrupt_after(0.1)
        got = model(engine, q, k, v)
        timer.join()
        time.sleep(0.1)  # the handler runs between bytecodes
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == [signal.SIGINT]
    np.testing.assert_array_equal(got, want)
