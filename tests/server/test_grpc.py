"""attnscore-server's gRPC service, through a client generated from its
proto with Debian's python3-grpcio (tools/grpc_client.py): the d2l toy bit
for bit as the CLI computes it, readiness and metadata for every model as
REST gives them, bad requests with REST's error texts, metrics, the size
limit, and SIGTERM finishing an RPC in flight and delivering its answer whole.

    ATTNSCORE_BUILD_DIR=build /usr/bin/python3 -m pytest tests/server
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

from server_testing import (DOT_TOY, ROOT, SERVER, bits, golden, library, requests_counted,
                            wait_for_gauge)
from server_util import Server, build_dir, infer_body

sys.path.insert(0, os.path.join(ROOT, "tools"))
from grpc_client import GrpcClient, arrays  # noqa: E402

BUILT_IN = ["masked_softmax", "dot_product_attention", "multihead_attention",
            "multihead_attention_packed"]
LOADED = ["additive_toy", "concat_tutorial"]


@pytest.fixture(scope="module")
def client(server):
    connected = GrpcClient(server.grpc_address, build_dir())
    yield connected
    connected.close()


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "typed"])
def test_toy_over_grpc_is_the_library_bit_for_bit(server, client, tmp_path, raw):
    inputs = golden(*DOT_TOY)
    got = client.infer("dot_product_attention", inputs, ["output", "attention_weights"], raw=raw)
    out, weights = library(tmp_path, ["dot"], inputs)
    np.testing.assert_array_equal(bits(got["output"]), bits(out))
    np.testing.assert_array_equal(bits(got["attention_weights"]), bits(weights))
    # The answer's form follows the request's.
    response = client.stub.ModelInfer(client.request("dot_product_attention", inputs, raw=raw))
    assert bool(response.raw_output_contents) == raw
    assert [o.name for o in response.outputs] == ["output"]
    assert (response.model_name, response.model_version) == ("dot_product_attention", "1")


def test_loaded_model_and_parameters_over_grpc_match_rest(server, client):
    inputs = golden("additive_toy", "queries", "keys", "values", "valid_lens")
    got = client.infer("additive_toy", inputs, ["output", "attention_weights"])
    status, _, answer = server.call("POST", "/v2/models/additive_toy/infer",
                                    infer_body(inputs, ["output", "attention_weights"]))
    assert status == 200, answer
    for entry in answer["outputs"]:
        np.testing.assert_array_equal(
            bits(got[entry["name"]]),
            bits(np.array(entry["data"], np.float64).astype(np.float32).reshape(entry["shape"])))
    rng = np.random.default_rng(3)
    x = {"queries": rng.standard_normal((1, 2, 5, 4), dtype=np.float32),
         "keys": rng.standard_normal((1, 2, 5, 4), dtype=np.float32),
         "values": rng.standard_normal((1, 2, 5, 4), dtype=np.float32)}
    body = infer_body(x)
    body["parameters"] = {"causal": "top-left", "scale": 0.25}
    status, _, answer = server.call("POST", "/v2/models/multihead_attention/infer", body)
    assert status == 200, answer
    got = client.infer("multihead_attention", x, parameters={"causal": "top-left", "scale": 0.25})
    want = np.array(answer["outputs"][0]["data"], np.float64).astype(np.float32)
    np.testing.assert_array_equal(bits(got["output"].reshape(-1)), bits(want))


def test_readiness_and_metadata_for_every_model_as_rest_gives_them(server, client):
    pb = client.pb
    assert client.stub.ServerLive(pb.ServerLiveRequest()).live
    assert client.stub.ServerReady(pb.ServerReadyRequest()).ready
    meta = client.stub.ServerMetadata(pb.ServerMetadataRequest())
    _, _, rest = server.call("GET", "/v2")
    assert (meta.name, meta.version, list(meta.extensions)) == \
        (rest["name"], rest["version"], rest["extensions"])
    for name in BUILT_IN + LOADED:
        assert client.stub.ModelReady(pb.ModelReadyRequest(name=name)).ready, name
        assert client.stub.ModelReady(pb.ModelReadyRequest(name=name, version="1")).ready
        got = client.stub.ModelMetadata(pb.ModelMetadataRequest(name=name))
        status, _, want = server.call("GET", "/v2/models/" + name)
        assert status == 200
        assert (got.name, list(got.versions), got.platform) == \
            (want["name"], want["versions"], want["platform"])
        for ours, theirs in [(got.inputs, want["inputs"]), (got.outputs, want["outputs"])]:
            assert [(t.name, t.datatype, list(t.shape)) for t in ours] == \
                [(t["name"], t["datatype"], t["shape"]) for t in theirs], name
    for call, request in [(client.stub.ModelReady, pb.ModelReadyRequest(name="nope")),
                          (client.stub.ModelMetadata, pb.ModelMetadataRequest(name="nope")),
                          (client.stub.ModelReady,
                           pb.ModelReadyRequest(name="masked_softmax", version="2"))]:
        with pytest.raises(grpc.RpcError) as error:
            call(request)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND


def rest_and_grpc(server, client, model, inputs, outputs=(), parameters=None):
    """(REST status, REST error, gRPC code, gRPC details) of one bad request."""
    body = infer_body(inputs, list(outputs))
    if parameters:
        body["parameters"] = parameters
    status, _, answer = server.call("POST", f"/v2/models/{model}/infer", body)
    with pytest.raises(grpc.RpcError) as error:
        client.infer(model, inputs, outputs, raw=False, parameters=parameters)
    return status, answer["error"], error.value.code(), error.value.details()


TOY = golden(*DOT_TOY)


@pytest.mark.parametrize("model,inputs,outputs,parameters,status", [
    ("nope", TOY, (), None, 404),
    ("dot_product_attention", {"queries": TOY["queries"]}, (), None, 400),
    ("dot_product_attention", {**TOY, "keys": TOY["keys"][:, :, :1]}, (), None, 400),
    ("dot_product_attention", {**TOY, "valid_lens": TOY["queries"]}, (), None, 400),
    ("dot_product_attention", TOY, ("scores",), None, 400),
    ("dot_product_attention", TOY, (), {"temperature": 2}, 400),
    ("masked_softmax", {"x": TOY["queries"], "extra": TOY["keys"]}, (), None, 400),
], ids=["unknown model", "missing input", "shapes the op refuses", "a mistyped input",
        "an unknown output", "an unknown parameter", "an unknown input"])
def test_bad_requests_get_rests_errors(server, client, model, inputs, outputs, parameters,
                                       status):
    rest_status, rest_error, code, details = rest_and_grpc(server, client, model, inputs, outputs,
                                                           parameters)
    assert rest_status == status
    assert code == {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND}[status]
    assert details == rest_error


def test_malformed_tensors_are_invalid_argument_naming_them(client):
    pb = client.pb
    toy = golden(*DOT_TOY)
    cases = []
    request = client.request("dot_product_attention", toy, raw=False)
    del request.inputs[0].contents.fp32_contents[-1]  # one element short
    cases.append((request, "input 'queries' has shape [2, 1, 2] but 3 data elements"))
    request = client.request("dot_product_attention", toy)
    del request.raw_input_contents[-1]
    cases.append((request, "4 inputs but 3 raw_input_contents"))
    request = client.request("dot_product_attention", toy)
    request.raw_input_contents[0] = request.raw_input_contents[0][:-1]
    cases.append((request, "raw_input_contents[0] has 15 bytes"))
    request = client.request("dot_product_attention", toy)
    request.inputs[0].shape[0] = -2
    cases.append((request, "dims must be integers from 0"))
    request = client.request("dot_product_attention", toy)
    request.inputs[0].datatype = "FP16"
    cases.append((request, "has datatype 'FP16'; want FP32, INT32 or INT64"))
    request = client.request("dot_product_attention", toy, raw=False)
    request.inputs.add().CopyFrom(request.inputs[0])
    cases.append((request, "input 'queries' is given twice"))
    request = client.request("dot_product_attention", toy, raw=False)
    request.model_version = "7"
    cases.append((request, "has no version '7'"))
    for request, words in cases:
        with pytest.raises(grpc.RpcError) as error:
            client.stub.ModelInfer(request)
        assert error.value.code() in (grpc.StatusCode.INVALID_ARGUMENT,
                                      grpc.StatusCode.NOT_FOUND), words
        assert words in error.value.details(), (words, error.value.details())
    assert pb.ModelInferRequest  # the stubs came from the build's proto


def counted(server, model, code):
    _, _, text = server.call("GET", "/metrics")
    return requests_counted(text.decode(), code, model)


def test_grpc_requests_are_counted_in_metrics(server, client):
    before_ok, before_bad = counted(server, "masked_softmax", 200), counted(server, "masked_softmax",
                                                                             400)
    x = np.ones((1, 2, 3), np.float32)
    client.infer("masked_softmax", {"x": x})
    with pytest.raises(grpc.RpcError):
        client.infer("masked_softmax", {"y": x})
    assert counted(server, "masked_softmax", 200) == before_ok + 1
    assert counted(server, "masked_softmax", 400) == before_bad + 1


def test_a_message_over_the_byte_limit_is_resource_exhausted():
    with Server(SERVER, "--max-request-bytes", "65536") as small:
        client = GrpcClient(small.grpc_address, build_dir())
        try:
            with pytest.raises(grpc.RpcError) as error:
                client.infer("masked_softmax", {"x": np.ones((1, 200, 100), np.float32)})
            assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            got = client.infer("masked_softmax", {"x": np.zeros((1, 2, 4), np.float32)})
            np.testing.assert_array_equal(got["output"], np.full((1, 2, 4), 0.25, np.float32))
        finally:
            client.close()


def long_inputs():
    """Q, K, V (8, 4096, 64): about 34 GFLOP, a quarter of a second or more."""
    rng = np.random.default_rng(0)
    return {name: rng.standard_normal((8, 4096, 64), dtype=np.float32)
            for name in ("queries", "keys", "values")}


def test_calls_past_the_workers_wait_their_turn_and_past_the_queue_are_unavailable():
    """--workers 1 --max-queue 1: while a long call computes, the next waits
    for the slot, off gRPC's own threads (ServerLive is answered meanwhile),
    and gets its answer after; the one after that finds the queue full and
    gets UNAVAILABLE with REST's 503 text at once."""
    with Server(SERVER, "--workers", "1", "--max-queue", "1", "--max-request-bytes",
                str(64 << 20)) as busy:
        client = GrpcClient(busy.grpc_address, build_dir())
        try:
            toy = golden(*DOT_TOY)
            long_call = client.stub.ModelInfer.future(
                client.request("dot_product_attention", long_inputs()), timeout=120)
            assert wait_for_gauge(busy, "attnscore_in_flight", 1)
            waiting = client.stub.ModelInfer.future(client.request("dot_product_attention", toy),
                                                    timeout=120)
            assert wait_for_gauge(busy, "attnscore_queue_depth", 1)
            assert client.stub.ServerLive(client.pb.ServerLiveRequest(), timeout=5).live
            with pytest.raises(grpc.RpcError) as refused:
                client.stub.ModelInfer(client.request("dot_product_attention", toy), timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "--max-queue" in refused.value.details(), refused.value.details()
            assert not long_call.done()  # refused at once, not after the slot came free
            assert arrays(long_call.result())["output"].shape == (8, 4096, 64)
            alone = client.infer("dot_product_attention", toy)["output"]
            np.testing.assert_array_equal(bits(arrays(waiting.result())["output"]), bits(alone))
        finally:
            client.close()
        assert busy.stop() == 0



class StallingRelay:
    """A TCP relay for one gRPC connection that passes the client's bytes on
    at once and the server's at once at first; once 4 MiB of those have
    passed, it stops reading them until `release` is set and 0.5 s more,
    then reads 64 KiB every 10 ms: a client that stalls mid-answer, as on a
    busy machine, and catches up slowly. With `held`, `release` waits to be
    set and the relay reads through a 64 KiB receive buffer, so the answer's
    tail stays in the server's send queue, unacknowledged, until then. A
    reset on either side closes both."""

    def __init__(self, target, held=False):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.held = held
        self.release = threading.Event()
        if not held:
            self.release.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._relay, daemon=True).start()

    def _relay(self):
        with self.listener:
            client, _ = self.listener.accept()
        upstream = socket.socket()
        if self.held:
            upstream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        upstream.connect(self.target)
        with client, upstream:
            passing = threading.Thread(target=self._pass, args=(client, upstream), daemon=True)
            passing.start()
            self._pass(upstream, client, stall_after=4 << 20)
            passing.join()

    def _pass(self, source, sink, stall_after=None):
        passed = 0
        pace = 0
        try:
            while chunk := source.recv(64 << 10):
                sink.sendall(chunk)
                passed += len(chunk)
                if stall_after is not None and passed >= stall_after:
                    stall_after = None
                    self.release.wait(60)
                    time.sleep(0.5)
                    pace = 0.01
                if pace:
                    time.sleep(pace)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def stop_during_long_call(busy, relay=None, while_stopping=lambda: None):
    """The long call (through `relay` if given), SIGTERM once it is in
    flight, then `while_stopping()`; the call's output shape, or its error's
    code and details."""
    client = GrpcClient(relay.address if relay else busy.grpc_address, build_dir())
    x = long_inputs()
    results = []

    def call():
        try:
            results.append(client.infer("dot_product_attention", x)["output"].shape)
        except grpc.RpcError as error:
            results.append((error.code(), error.details()))

    worker = threading.Thread(target=call)
    worker.start()
    try:
        assert wait_for_gauge(busy, "attnscore_in_flight", 1)
        busy.process.send_signal(signal.SIGTERM)
        while_stopping()
    finally:
        if relay:
            relay.release.set()
        worker.join()
        client.close()
    return results[0]


def test_sigterm_delivers_the_answer_in_flight_whole_to_a_client_that_stalls():
    """gRPC, once shut down, closes a connection as soon as its last answer
    is written, and the kernel resets it, dropping what it has not sent, at
    the client's next flow-control update: so the server shuts gRPC down
    only once the answers are acknowledged. The 8 MiB answer in flight at
    SIGTERM arrives whole through a relay that stalls mid-answer (before,
    it was cut in 5 of 8 tries)."""
    with Server(SERVER, "--workers", "1", "--max-request-bytes", str(64 << 20)) as busy:
        assert stop_during_long_call(busy, StallingRelay(busy.grpc_address)) == (8, 4096, 64)
        assert busy.process.wait(30) == 0


def test_calls_after_sigterm_are_unavailable_until_the_answers_in_flight_are_delivered():
    """While the answer in flight waits on a client that does not read it,
    the server is stopping but gRPC still listens: readiness is false and a
    new call is refused with the reason; once the client reads, its answer
    is whole and the server exits 0."""
    with Server(SERVER, "--workers", "1", "--max-request-bytes", str(64 << 20)) as busy:
        newcomer = GrpcClient(busy.grpc_address, build_dir())
        refusals = []

        def call_while_stopping():
            while newcomer.stub.ServerReady(newcomer.pb.ServerReadyRequest()).ready:
                time.sleep(0.002)
            try:
                newcomer.infer("dot_product_attention", golden(*DOT_TOY))
            except grpc.RpcError as error:
                refusals.append((error.code(), error.details()))

        relay = StallingRelay(busy.grpc_address, held=True)
        try:
            shape = stop_during_long_call(busy, relay, call_while_stopping)
        finally:
            newcomer.close()
        assert refusals == [(grpc.StatusCode.UNAVAILABLE,
                             "attnscore-server is stopping: it takes no new calls")]
        assert shape == (8, 4096, 64)
        assert busy.process.wait(30) == 0


@pytest.mark.parametrize("attempt", range(6))
def test_sigterm_finishes_the_rpc_in_flight_and_exits_0_at_once(attempt):
    # The process ends within seconds of the answer (gRPC's library shutdown
    # once took 10 s, in 2 of 6 stops: hence the attempts).
    busy = Server(SERVER, "--workers", "1", "--max-request-bytes", str(64 << 20))
    assert stop_during_long_call(busy) == (8, 4096, 64)
    assert busy.process.wait(5) == 0
    busy.process.stdout.close()


def test_grpc_client_program_saves_the_outputs(server, tmp_path):
    toy = golden(*DOT_TOY)
    flags = []
    for name, array in toy.items():
        np.save(tmp_path / (name + ".npy"), array)
        flags += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "grpc_client.py"), "--address",
                    server.grpc_address, "--model", "dot_product_attention", *flags,
                    "--out", str(tmp_path / "out"), "--build", build_dir()], check=True,
                   capture_output=True)
    out, _ = library(tmp_path, ["dot"], toy, weights=False)
    np.testing.assert_array_equal(bits(np.load(tmp_path / "out" / "output.npy")), bits(out))
    failed = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "grpc_client.py"),
                             "--address", server.grpc_address, "--model", "nope", *flags,
                             "--build", build_dir()], capture_output=True, text=True)
    assert failed.returncode == 1 and "NOT_FOUND: unknown model 'nope'" in failed.stderr
