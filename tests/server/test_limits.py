"""attnscore-server's memory bound: request bodies are reserved against
--max-inflight-bytes before they are read (a body refused is never read:
the answer goes out and the connection closes), so many connections
uploading at once cost the server the budget, not their sum, and a burst
leaves no memory behind: the heaps keep what requests free while they run
and give it back once the server is idle for a second. A gRPC message,
which gRPC reads before the service sees it, takes its bytes of the budget
then (refused at once where they do not fit), and gRPC's own buffers are
held to twice the budget.

    ATTNSCORE_BUILD_DIR=build /usr/bin/python3 -m pytest tests/server
"""

import os
import socket
import sys
import threading
import time

import grpc
import numpy as np
import pytest

from server_testing import ROOT, SERVER, library
from server_util import (Server, binary_infer_body, binary_outputs, build_dir,
                         decode_step_inputs, infer_body)

sys.path.insert(0, os.path.join(ROOT, "tools"))
from grpc_client import infer_request, load_stubs  # noqa: E402

MIB = 1 << 20
# An ASan server's resident memory is mostly the sanitizer's own.
SANITIZED = os.environ.get("ATTNSCORE_SANITIZED") == "1"


def metric(server, name):
    _, _, text = server.call("GET", "/metrics")
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def held_comes_to(server, value, seconds=20):
    """Whether attnscore_inflight_bytes reaches `value` within `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if metric(server, "attnscore_inflight_bytes") == value:
            return True
        time.sleep(0.02)
    return False


def resident_comes_to_at_most(server, kib, seconds=5):
    """The server's resident KiB once it is at most `kib`, or after `seconds`
    (the heaps are trimmed once a second while no request computes)."""
    end = time.monotonic() + seconds
    while True:
        resident = server.status_kib("VmRSS")
        if resident <= kib or time.monotonic() >= end:
            return resident
        time.sleep(0.05)


def upload(url, sockets, statuses, declared, sent):
    """Sends the headers of a `declared`-byte body and `sent` bytes of it, then
    keeps the connection open (in `sockets`); the status line, if one came
    back, goes to `statuses`."""
    host, port = url.split("//")[1].split(":")
    sock = socket.create_connection((host, int(port)))
    sockets.append(sock)
    sock.sendall((f"POST /v2/models/masked_softmax/infer HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n").encode())
    chunk = b" " * MIB
    try:
        for _ in range(sent // MIB):
            sock.sendall(chunk)
    except OSError:
        pass  # refused: the server answered and closed
    sock.settimeout(0.2)
    try:
        statuses.append(sock.recv(64).split(b" ")[1].decode())
    except (OSError, IndexError):
        pass


def test_forty_large_uploads_cost_the_budget_not_their_sum():
    # The deployment's settings: 2 workers, so a budget of 2 x 16 MiB.
    with Server(SERVER, "--workers", "2", "--max-queue", "16") as server:
        x = np.ones((2, 3, 4), np.float32)
        assert server.call("POST", "/v2/models/masked_softmax/infer", infer_body({"x": x}))[0] == 200
        idle = server.status_kib("VmRSS")
        sockets, statuses = [], []
        threads = [threading.Thread(target=upload,
                                    args=(server.url, sockets, statuses, 15 * MIB, 14 * MIB))
                   for _ in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        peak = server.status_kib("VmHWM")
        # Two hold the budget; the others were refused unread.
        assert metric(server, "attnscore_inflight_bytes") <= 32 * MIB
        for sock in sockets:
            sock.close()
        # The half-sent bodies end with their connections and give their bytes back.
        assert held_comes_to(server, 0)
        # The bound docs/serving.md states: the budget, and room for the
        # threads' stacks and buffers (4 MiB); after, 10% of idle and the
        # share of the 40 connection threads that ran (96 KiB each: the
        # pages of stack they touched).
        if not SANITIZED:
            assert peak - idle <= 32 * 1024 + 4 * 1024, (idle, peak)
            bound = idle * 1.10 + 40 * 96
            after = resident_comes_to_at_most(server, bound)
            assert after <= bound, (idle, after)
        # And the server still answers.
        status, _, answer = server.call("POST", "/v2/models/masked_softmax/infer",
                                        infer_body({"x": x}))
        assert status == 200, answer


def test_large_requests_reuse_the_heaps_and_give_them_back_when_idle(tmp_path):
    # Decode-shaped requests of 4 MiB of binary data each (K and V of 2,048
    # keys), one after another from two clients: what one frees serves the
    # next, so resident memory stays within a few requests' bytes of idle
    # (unmapped buffers would cost their page faults every time), and
    # returns to idle once the server rests.
    inputs = decode_step_inputs(3)
    body, headers = binary_infer_body(inputs)
    expected, _ = library(tmp_path, ["multihead_attention"], inputs, weights=False)
    with Server(SERVER, "--workers", "2") as server:
        x = np.ones((2, 3, 4), np.float32)
        assert server.call("POST", "/v2/models/masked_softmax/infer", infer_body({"x": x}))[0] == 200
        idle = server.status_kib("VmRSS")
        answers = []

        def client():
            for _ in range(30):
                status, answer_headers, answer = server.call(
                    "POST", "/v2/models/multihead_attention/infer", body, headers=headers)
                answers.append((status, answer_headers, answer))

        clients = [threading.Thread(target=client) for _ in range(2)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        for status, answer_headers, answer in answers:
            assert status == 200, answer
            assert np.array_equal(binary_outputs(answer_headers, answer)["output"], expected)
        if not SANITIZED:
            # Each request holds its body and its tensors (8 MiB), two at
            # once; the blocks freed are kept for the next, not added to.
            peak = server.status_kib("VmHWM")
            assert peak - idle <= 2 * 8 * 1024 + 4 * 1024, (idle, peak)
            bound = idle * 1.10
            after = resident_comes_to_at_most(server, bound)
            assert after <= bound, (idle, after)


def test_a_body_over_the_budget_waits_then_gets_503_with_retry_after():
    with Server(SERVER, "--workers", "1", "--max-request-bytes", str(MIB),
                "--max-inflight-bytes", str(MIB)) as server:
        sockets, statuses = [], []
        holder = threading.Thread(target=upload,
                                  args=(server.url, sockets, statuses, MIB, MIB // 2))
        holder.start()
        holder.join()
        assert held_comes_to(server, MIB)
        begin = time.monotonic()
        x = np.ones((1, 2, 2), np.float32)
        status, headers, answer = server.call("POST", "/v2/models/masked_softmax/infer",
                                              infer_body({"x": x}))
        waited = time.monotonic() - begin
        assert status == 503 and headers["Retry-After"] == "1", answer
        assert "--max-inflight-bytes 1048576" in answer["error"]
        assert waited >= 0.4
        for sock in sockets:
            sock.close()
        assert held_comes_to(server, 0)
        assert server.call("POST", "/v2/models/masked_softmax/infer", infer_body({"x": x}))[0] == 200


def grpc_channels(server, count):
    """`count` gRPC channels to the server, each on a connection of its own."""
    return [grpc.insecure_channel(server.grpc_address, options=[
        ("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", -1)]) for _ in range(count)]


def softmax_message(x):
    return infer_request(load_stubs(build_dir())[0], "masked_softmax", {"x": x})


def test_a_grpc_message_over_the_budget_is_unavailable_at_once():
    # A REST upload holds the whole budget; a gRPC call then finds no room
    # for its message (read already) and is refused at once with the
    # budget's text; once the upload goes, the same call is answered.
    with Server(SERVER, "--workers", "1", "--max-request-bytes", str(MIB),
                "--max-inflight-bytes", str(MIB)) as server:
        sockets, statuses = [], []
        upload(server.url, sockets, statuses, MIB, MIB // 2)
        assert held_comes_to(server, MIB)
        [channel] = grpc_channels(server, 1)
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        message = softmax_message(np.zeros((1, 2, 4), np.float32)).SerializeToString()
        try:
            begin = time.monotonic()
            with pytest.raises(grpc.RpcError) as error:
                infer(message, timeout=60)
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "--max-inflight-bytes 1048576" in error.value.details()
            assert time.monotonic() - begin < 0.4
            for sock in sockets:
                sock.close()
            assert held_comes_to(server, 0)
            response = load_stubs(build_dir())[0].ModelInferResponse.FromString(
                infer(message, timeout=60))
            out = np.frombuffer(response.raw_output_contents[0], np.float32)
            np.testing.assert_array_equal(out, np.full(8, 0.25, np.float32))
            assert held_comes_to(server, 0)
        finally:
            channel.close()


def test_grpc_connections_keep_at_most_twice_the_budget_of_buffers_once_idle():
    # gRPC keeps a read buffer per connection about the size of its last
    # messages: 16 connections that sent two 3 MiB messages each kept 30 MiB
    # between them without a bound. The server holds gRPC's buffers to twice
    # the byte budget (here 2 x 4 MiB), freeing idle connections' first.
    with Server(SERVER, "--workers", "1", "--max-request-bytes", str(4 * MIB)) as server:
        x = np.ones((1, 768, 1024), np.float32)
        message = softmax_message(x).SerializeToString()
        channels = grpc_channels(server, 16)
        idle = server.status_kib("VmRSS")
        try:
            for _ in range(2):
                for channel in channels:
                    answer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(
                        message, timeout=60)
                    response = load_stubs(build_dir())[0].ModelInferResponse.FromString(answer)
                    out = np.frombuffer(response.raw_output_contents[0], np.float32)
                    np.testing.assert_array_equal(out, np.full(x.size, 1 / 1024, np.float32))
            if not SANITIZED:
                bound = idle * 1.10 + 2 * 4 * 1024 + 4 * 1024
                after = resident_comes_to_at_most(server, bound)
                assert after <= bound, (idle, after)
        finally:
            for channel in channels:
                channel.close()


def test_a_grpc_message_far_over_the_limit_costs_at_most_twice_the_budget():
    # gRPC reads a message over --max-request-bytes before refusing it: one
    # of 64 MiB took the server 65 MiB above idle without a bound on gRPC's
    # buffers; with twice the budget (2 x 4 MiB), the message is refused
    # as gRPC runs out of it.
    with Server(SERVER, "--workers", "1", "--max-request-bytes", str(4 * MIB)) as server:
        [channel] = grpc_channels(server, 1)
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            x = np.zeros((1, 2, 4), np.float32)
            assert infer(softmax_message(x).SerializeToString(), timeout=60)
            idle = server.status_kib("VmRSS")
            huge = softmax_message(np.zeros((16, 1024, 1024), np.float32)).SerializeToString()
            with pytest.raises(grpc.RpcError) as error:
                infer(huge, timeout=60)
            assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            if not SANITIZED:
                peak = server.status_kib("VmHWM")
                assert peak - idle <= 2 * 4 * 1024 + 8 * 1024, (idle, peak)
            # The connection still serves.
            answer = infer(softmax_message(x).SerializeToString(), timeout=60)
            assert answer
        finally:
            channel.close()


def test_the_largest_budget_serves_over_both_protocols():
    # --max-inflight-bytes at its most (2^62): gRPC's buffers are held to
    # twice it, capped where the doubling would not fit.
    with Server(SERVER, "--max-inflight-bytes", str(1 << 62)) as server:
        x = np.zeros((1, 2, 4), np.float32)
        status, _, answer = server.call("POST", "/v2/models/masked_softmax/infer",
                                        infer_body({"x": x}))
        assert status == 200, answer
        [channel] = grpc_channels(server, 1)
        try:
            answer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(
                softmax_message(x).SerializeToString(), timeout=60)
            response = load_stubs(build_dir())[0].ModelInferResponse.FromString(answer)
            out = np.frombuffer(response.raw_output_contents[0], np.float32)
            np.testing.assert_array_equal(out, np.full(8, 0.25, np.float32))
        finally:
            channel.close()
