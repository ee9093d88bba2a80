"""attnscore-server's HTTP layer against hostile clients (server/http.h):
slow headers, pipelined and half-closed requests, a request line with no
end, a head that never completes, and framing it refuses, each sent as
a client would send it.

    ATTNSCORE_BUILD_DIR=build /usr/bin/python3 -m pytest tests/server
"""

import json
import os
import socket
import threading
import time

import numpy as np

from server_testing import SERVER
from server_util import Server, infer_body

SANITIZED = os.environ.get("ATTNSCORE_SANITIZED") == "1"


def address(server):
    host, port = server.url.split("//")[1].split(":")
    return host, int(port)


def post(path, body, extra=""):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def read_answers(sock, count, timeout=10):
    """The first `count` answers on `sock`: [(status, headers, body)]."""
    sock.settimeout(timeout)
    data, answers = b"", []
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            lines = data[:end].decode().split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:])}
            size = int(headers.get("content-length", 0))
            if len(data) >= end + 4 + size:
                answers.append((int(lines[0].split()[1]), headers, data[end + 4:end + 4 + size]))
                data = data[end + 4 + size:]
                continue
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return answers


def toy():
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    return x, json.dumps(infer_body({"x": x})).encode()


def test_pipelined_requests_are_answered_in_order():
    x, body = toy()
    with Server(SERVER) as server, socket.create_connection(address(server)) as sock:
        sock.sendall(post("/v2/models/masked_softmax/infer", body) +
                     b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" +
                     post("/v2/models/nope/infer", body))
        answers = read_answers(sock, 3)
        assert [a[0] for a in answers] == [200, 200, 404]
        got = np.array(json.loads(answers[0][2])["outputs"][0]["data"], np.float32)
        want = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(got, (want / want.sum(-1, keepdims=True)).reshape(-1),
                                   rtol=1e-6)
        assert json.loads(answers[1][2]) == {"live": True}


def test_a_half_closed_request_is_answered_then_closed():
    _, body = toy()
    with Server(SERVER) as server, socket.create_connection(address(server)) as sock:
        sock.sendall(post("/v2/models/masked_softmax/infer", body) +
                     b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)  # as nc -N does
        answers = read_answers(sock, 3)
        assert [a[0] for a in answers] == [200, 200]  # both, then the close
        assert sock.recv(10) == b""


def test_slow_headers_do_not_hold_the_server():
    """8 clients each sending a header byte every 0.5 s, at --connections 8:
    a normal request is answered at once, taking the place of the client
    that has waited longest."""
    with Server(SERVER, "--connections", "8") as server:
        stop = threading.Event()
        socks = []

        def slow():
            sock = socket.create_connection(address(server))
            socks.append(sock)
            sock.sendall(b"POST /v2/models/masked_softmax/infer HTTP/1.1\r\nHost: x\r\n")
            try:
                while not stop.is_set():
                    sock.sendall(b"X")
                    time.sleep(0.5)
            except OSError:
                pass  # taken over

        threads = [threading.Thread(target=slow) for _ in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        begin = time.monotonic()
        status, _, answer = server.call("GET", "/v2/health/ready", timeout=10)
        elapsed = time.monotonic() - begin
        stop.set()
        for thread in threads:
            thread.join()
        for sock in socks:
            sock.close()
        assert status == 200 and answer == {"ready": True}
        assert elapsed < 2.0, elapsed


def test_a_head_that_never_completes_is_closed_at_the_request_timeout():
    with Server(SERVER, "--request-timeout", "1") as server, \
            socket.create_connection(address(server)) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(10)
        begin = time.monotonic()
        assert sock.recv(100) == b""
        assert 0.9 < time.monotonic() - begin < 5


def test_a_request_line_with_no_end_is_431_without_growing():
    with Server(SERVER) as server, socket.create_connection(address(server)) as sock:
        assert server.call("GET", "/v2/health/live")[0] == 200
        before = server.rss_kib()
        try:
            sock.sendall(b"GET /" + b"a" * (8 << 20))  # 8 MiB, no newline
        except OSError:
            pass  # the server answered and closed before taking it all
        answers = read_answers(sock, 1)
        assert answers and answers[0][0] == 431, answers
        assert "over 65536 bytes" in json.loads(answers[0][2])["error"]
        if not SANITIZED:
            assert server.rss_kib() - before < 2048
        assert server.call("GET", "/v2/health/live")[0] == 200


def test_framing_the_layer_refuses():
    cases = [
        (b"POST /v2/models/masked_softmax/infer HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501, "Transfer-Encoding"),
        (b"GET /v2/health/live HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP/1.1"),
        (b"GET /v2/health/live HTTP/1.1\r\nHost : x\r\n\r\n", 400, "malformed header"),
        (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "malformed header"),
        (b"GET v2/health/live HTTP/1.1\r\n\r\n", 400, "malformed request line"),
        (b"GET /v2/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "%-escape"),
        (b"GET /v2 HTTP/1.1\r\n\r\n", 400, "0 Host headers"),
        (b"GET /v2 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "2 Host headers"),
        (b"GET /v2 HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", 417, "100-continue"),
    ]
    with Server(SERVER) as server:
        for request, status, words in cases:
            with socket.create_connection(address(server)) as sock:
                sock.sendall(request)
                answers = read_answers(sock, 2)
                assert len(answers) == 1 and answers[0][0] == status, (request, answers)
                assert words in json.loads(answers[0][2])["error"], (request, answers)
                assert answers[0][1].get("connection") == "close"


def test_a_refused_body_is_not_read_yet_the_client_gets_the_answer():
    """413 for a 20 MiB body, answered before the body is read; the client,
    still sending, reads the answer rather than a reset."""
    with Server(SERVER) as server, socket.create_connection(address(server)) as sock:
        sock.sendall(b"POST /v2/models/masked_softmax/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 20971520\r\n\r\n")
        try:
            sock.sendall(b" " * (1 << 20))
        except OSError:
            pass
        answers = read_answers(sock, 1)
        assert answers and answers[0][0] == 413
        assert "--max-request-bytes" in json.loads(answers[0][2])["error"]


def test_a_client_that_expects_100_continue_is_told_to_send_its_body():
    _, body = toy()
    with Server(SERVER) as server, socket.create_connection(address(server)) as sock:
        head = post("/v2/models/masked_softmax/infer", body, "Expect: 100-continue\r\n")
        sock.sendall(head[:len(head) - len(body)])
        sock.settimeout(10)
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answers = read_answers(sock, 1)
        assert answers and answers[0][0] == 200


def test_blank_lines_do_not_extend_the_request_timeout():
    with Server(SERVER, "--request-timeout", "1") as server, \
            socket.create_connection(address(server)) as sock:
        begin = time.monotonic()
        try:
            for _ in range(40):
                sock.sendall(b"\r\n")
                time.sleep(0.1)
        except OSError:
            pass  # closed
        sock.settimeout(10)
        try:
            assert sock.recv(100) == b""
        except ConnectionResetError:
            pass
        assert time.monotonic() - begin < 3.5
