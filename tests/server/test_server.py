"""attnscore-server against the library: the d2l toy through urllib and curl
bit for bit as the CLI computes it, loaded models, every kind of bad request
as a 4xx with the protocol's JSON error, the queue's 503, metrics, and
SIGTERM finishing the request in flight.

    ATTNSCORE_BUILD_DIR=build /usr/bin/python3 -m pytest tests/server
"""

import http.client
import json
import os
import re
import shutil
import socket
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from server_util import (Server, binary_infer_body, binary_outputs, infer_body,  # noqa: E402
                         output_array)
from server_testing import (DOT_TOY, GOLDEN, SERVER, bits, golden, library,  # noqa: E402
                            requests_counted, wait_for_gauge)


def test_toy_through_urllib_is_the_library_bit_for_bit(server, tmp_path):
    inputs = golden(*DOT_TOY)
    status, _, answer = server.call(
        "POST", "/v2/models/dot_product_attention/infer",
        infer_body(inputs, ["output", "attention_weights"]))
    assert status == 200, answer
    out, weights = library(tmp_path, ["dot"], inputs)
    np.testing.assert_array_equal(bits(output_array(answer, "output")), bits(out))
    np.testing.assert_array_equal(bits(output_array(answer, "attention_weights")), bits(weights))
    assert answer["model_name"] == "dot_product_attention"


def test_toy_through_curl_is_the_library_bit_for_bit(server, tmp_path):
    inputs = golden(*DOT_TOY)
    body = tmp_path / "body.json"
    body.write_text(json.dumps(infer_body(inputs)))
    result = subprocess.run(
        ["curl", "-sS", "-X", "POST", "-H", "Content-Type: application/json",
         "--data-binary", "@" + str(body), server.url + "/v2/models/dot_product_attention/infer"],
        check=True, capture_output=True, text=True)
    answer = json.loads(result.stdout)
    out, _ = library(tmp_path, ["dot"], inputs, weights=False)
    np.testing.assert_array_equal(bits(output_array(answer, "output")), bits(out))
    assert [o["name"] for o in answer["outputs"]] == ["output"]  # weights only on request


def test_binary_tensor_data_is_the_library_bit_for_bit(server, tmp_path):
    inputs = golden(*DOT_TOY)
    inputs["valid_lens"] = inputs["valid_lens"].astype(np.int32)
    body, headers = binary_infer_body(inputs, ["output", "attention_weights"])
    status, answer_headers, raw = server.call("POST", "/v2/models/dot_product_attention/infer",
                                              body, headers=headers)
    assert status == 200, raw
    assert answer_headers["Content-Type"] == "application/octet-stream"
    got = binary_outputs(answer_headers, raw)
    out, weights = library(tmp_path, ["dot"], inputs)
    np.testing.assert_array_equal(bits(got["output"]), bits(out))
    np.testing.assert_array_equal(bits(got["attention_weights"]), bits(weights))
    # The tensor data at each offset mod 4 from the body's start (the JSON
    # padded with spaces): read in place where it lies on a float's
    # alignment, copied where not; the same bits either way.
    json_bytes = int(headers["Inference-Header-Content-Length"])
    for pad in range(4):
        padded = body[:json_bytes] + b" " * pad + body[json_bytes:]
        status, answer_headers, raw = server.call(
            "POST", "/v2/models/dot_product_attention/infer", padded,
            headers=dict(headers, **{"Inference-Header-Content-Length": str(json_bytes + pad)}))
        assert status == 200, raw
        np.testing.assert_array_equal(bits(binary_outputs(answer_headers, raw)["output"]), bits(out))
    # binary_data_output without "outputs": the default output, as binary.
    body, headers = binary_infer_body(inputs)
    status, answer_headers, raw = server.call("POST", "/v2/models/dot_product_attention/infer",
                                              body, headers=headers)
    assert status == 200 and list(binary_outputs(answer_headers, raw)) == ["output"]


def test_binary_carries_non_finite_values_json_cannot(server, tmp_path):
    x = np.array([[[1.0, np.inf, 2.0], [np.nan, 0.0, 1.0]]], np.float32)
    body, headers = binary_infer_body({"x": x})
    status, answer_headers, raw = server.call("POST", "/v2/models/masked_softmax/infer", body,
                                              headers=headers)
    assert status == 200, raw
    y, _ = library(tmp_path, ["softmax"], {"x": x}, weights=False)
    np.testing.assert_array_equal(bits(binary_outputs(answer_headers, raw)["output"]), bits(y))


@pytest.mark.parametrize("change,words", [
    (lambda header, data: (header, data[:-4]), "bytes of binary data are left"),
    (lambda header, data: (header, data + b"\0" * 4), "no input's binary_data_size claims"),
    (lambda header, data: (header.replace(b'"binary_data_size": 16', b'"binary_data_size": 12'),
                           data), "binary_data_size 12"),
    (lambda header, data: (header.replace(b'"binary_data_size": 16', b'"binary_data_size": -1'),
                           data), "binary_data_size must be"),
])
def test_bad_binary_requests_are_400(server, change, words):
    inputs = golden(*DOT_TOY)
    body, headers = binary_infer_body(inputs)
    size = int(headers["Inference-Header-Content-Length"])
    header, data = change(body[:size], body[size:])
    headers["Inference-Header-Content-Length"] = str(len(header))
    status, _, error = server.call("POST", "/v2/models/dot_product_attention/infer",
                                   header + data, headers=headers)
    assert status == 400 and words in error["error"], error


@pytest.mark.parametrize("value", ["-1", "abc", "999999999", "+5"])
def test_bad_inference_header_length_is_400(server, value):
    body, headers = binary_infer_body(golden(*DOT_TOY))
    headers["Inference-Header-Content-Length"] = value
    status, _, error = server.call("POST", "/v2/models/dot_product_attention/infer", body,
                                   headers=headers)
    assert status == 400 and "Inference-Header-Content-Length" in error["error"], error


@pytest.mark.parametrize("case,lens_type", [("softmax_seed_per_batch", np.int64),
                                            ("softmax_seed_per_query", np.int32)])
def test_masked_softmax_is_the_library(server, tmp_path, case, lens_type):
    inputs = golden(case, "x", "valid_lens")
    inputs["valid_lens"] = inputs["valid_lens"].astype(lens_type)
    status, _, answer = server.call("POST", "/v2/models/masked_softmax/infer", infer_body(inputs))
    assert status == 200, answer
    y, _ = library(tmp_path, ["softmax"], inputs, weights=False)
    np.testing.assert_array_equal(bits(output_array(answer, "output")), bits(y))


def test_loaded_models_are_the_library(server, models, tmp_path):
    for name, command, case, extra in [
            ("additive_toy", "additive", "additive_toy", ()),
            ("concat_tutorial", "concat", "concat_tutorial", ())]:
        names = ["queries", "keys", "values"]
        if os.path.exists(os.path.join(GOLDEN, case, "valid_lens.npy")):
            names.append("valid_lens")
        inputs = golden(case, *names)
        status, _, answer = server.call("POST", f"/v2/models/{name}/infer",
                                        infer_body(inputs, ["output", "attention_weights"]))
        assert status == 200, answer
        out, weights = library(tmp_path, [command, "--model",
                                          str(models / (name + ".safetensors"))], inputs)
        np.testing.assert_array_equal(bits(output_array(answer, "output")), bits(out))
        np.testing.assert_array_equal(bits(output_array(answer, "attention_weights")),
                                      bits(weights))
        status, _, meta = server.call("GET", f"/v2/models/{name}")
        assert status == 200 and meta["parameters"]["kind"] == command
        assert meta["inputs"][0]["shape"][-1] == inputs["queries"].shape[-1]


def test_health_metadata_and_ready(server):
    assert server.call("GET", "/v2/health/live")[0] == 200
    assert server.call("GET", "/v2/health/ready")[0] == 200
    status, _, meta = server.call("GET", "/v2/models/dot_product_attention")
    assert status == 200
    assert [i["name"] for i in meta["inputs"]] == ["queries", "keys", "values", "valid_lens"]
    assert meta["inputs"][0]["shape"] == [-1, -1, -1]
    assert [o["name"] for o in meta["outputs"]] == ["output", "attention_weights"]
    assert server.call("GET", "/v2/models/masked_softmax/ready")[0] == 200
    status, _, error = server.call("GET", "/v2/models/nope/ready")
    assert status == 404 and "nope" in error["error"]


def good_toy():
    return infer_body(golden(*DOT_TOY))


def mutate(change):
    body = good_toy()
    change(body)
    return body


BAD_REQUESTS = [
    # (label, model, body, status, words the error must hold)
    ("malformed JSON", "dot_product_attention", b"{\"inputs\": [", 400, ["malformed JSON"]),
    ("not an object", "dot_product_attention", b"[1, 2]", 400, ["not a JSON object"]),
    ("nested too deep", "dot_product_attention",
     b'{"inputs": [' + b"[" * 100000 + b"]" * 100000 + b"]}", 400, ["nests deeper than 8"]),
    ("number past double's range", "dot_product_attention", b'{"inputs": [1e999]}', 400,
     ["malformed JSON", "number overflow"]),
    ("no inputs", "dot_product_attention", {"outputs": []}, 400, ["'inputs'"]),
    ("unknown model", "nope", good_toy(), 404, ["unknown model 'nope'"]),
    ("data length", "dot_product_attention",
     mutate(lambda b: b["inputs"][0]["data"].pop()), 400, ["'queries'", "[2, 1, 2]", "3 data"]),
    ("datatype", "dot_product_attention",
     mutate(lambda b: b["inputs"][0].update(datatype="FP64")), 400, ["'queries'", "FP64"]),
    ("FP32 queries as INT64", "dot_product_attention",
     mutate(lambda b: b["inputs"][0].update(datatype="INT64", data=[1, 2, 3, 4])), 400,
     ["'queries'", "INT64", "want FP32"]),
    ("string data", "dot_product_attention",
     mutate(lambda b: b["inputs"][0]["data"].__setitem__(1, "x")), 400, ["data[1]", "string"]),
    ("float over float32", "dot_product_attention",
     mutate(lambda b: b["inputs"][0]["data"].__setitem__(0, 1e39)), 400, ["float32"]),
    ("fractional length", "dot_product_attention",
     mutate(lambda b: b["inputs"][3]["data"].__setitem__(0, 2.5)), 400, ["not an integer"]),
    ("INT32 overflow", "dot_product_attention",
     mutate(lambda b: b["inputs"][3].update(datatype="INT32", data=[2, 2**31])), 400,
     ["data[1] = 2147483648 does not fit INT32"]),
    ("a length per batch entry too many", "dot_product_attention",
     mutate(lambda b: b["inputs"][3].update(shape=[3], data=[2, 6, 1])), 400,
     ["valid_lens has shape (3,) but the batch size is 2"]),
    ("negative length", "dot_product_attention",
     mutate(lambda b: b["inputs"][3]["data"].__setitem__(1, -1)), 400,
     ["valid_lens[1] is -1"]),
    ("lengths of rank 3", "dot_product_attention",
     mutate(lambda b: b["inputs"][3].update(shape=[2, 1, 1])), 400, ["(B,) or (B, N)"]),
    ("missing keys", "dot_product_attention",
     mutate(lambda b: b["inputs"].pop(1)), 400, ["needs input 'keys'"]),
    ("unknown input", "dot_product_attention",
     mutate(lambda b: b["inputs"][0].update(name="query")), 400, ["no input 'query'"]),
    ("input twice", "dot_product_attention",
     mutate(lambda b: b["inputs"].append(dict(b["inputs"][0]))), 400, ["twice"]),
    ("shape mismatch", "dot_product_attention",
     mutate(lambda b: b["inputs"][1].update(shape=[2, 20, 1])), 400,
     ["keys has shape (2, 20, 1)", "(B, M, D)"]),
    ("negative dim", "dot_product_attention",
     mutate(lambda b: b["inputs"][0].update(shape=[-2, -1, -2])), 400, ["dims must be"]),
    ("rank 5", "dot_product_attention",
     mutate(lambda b: b["inputs"][0].update(shape=[1, 1, 2, 1, 2])), 400, ["5 dims"]),
    ("unknown output", "dot_product_attention",
     mutate(lambda b: b.update(outputs=[{"name": "weights"}])), 400, ["no output 'weights'"]),
    ("bad outputs", "dot_product_attention",
     mutate(lambda b: b.update(outputs="output")), 400, ["'outputs'"]),
    ("nested data off its shape", "dot_product_attention",
     mutate(lambda b: b["inputs"][0].update(data=[[[1, 2]], [[3, 4], [5, 6]]])), 400,
     ["nested"]),
    ("softmax rank 2", "masked_softmax",
     {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]}, 400,
     ["x must have rank 3"]),
]


@pytest.mark.parametrize("label,model,body,status,words", BAD_REQUESTS,
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_requests_are_4xx_with_a_json_error(server, label, model, body, status, words):
    got, headers, answer = server.call("POST", f"/v2/models/{model}/infer", body)
    assert got == status, answer
    assert headers["Content-Type"].startswith("application/json")
    for word in words:
        assert word in answer["error"], (word, answer["error"])
    assert server.call("GET", "/v2/health/live")[0] == 200


def test_nested_data_following_the_shape_is_taken(server):
    body = good_toy()
    q = body["inputs"][0]
    q["data"] = np.array(q["data"], np.float32).reshape(q["shape"]).tolist()
    status, _, nested = server.call("POST", "/v2/models/dot_product_attention/infer", body)
    assert status == 200, nested
    _, _, flat = server.call("POST", "/v2/models/dot_product_attention/infer", good_toy())
    assert nested["outputs"] == flat["outputs"]


def test_oversized_body_is_413_and_unknown_route_404():
    with Server(SERVER, "--max-request-bytes", "2048") as small:
        status, _, error = small.call("POST", "/v2/models/dot_product_attention/infer",
                                      b" " * 4096)
        assert status == 413 and "--max-request-bytes" in error["error"]
        status, _, error = small.call("GET", "/v2/nothing")
        assert status == 404 and "no endpoint" in error["error"]
        assert small.stop() == 0


def test_outputs_are_bounded_by_a_quarter_of_the_byte_limit():
    with Server(SERVER, "--max-request-bytes", "65536") as small:
        # A 3 KB request whose weights (1, 200, 200) are 40,000 floats: over
        # the 16,384 that 64 KiB allows; its output alone (200 floats) is not.
        x = np.zeros((1, 200, 1), np.float32)
        inputs = {"queries": x, "keys": x, "values": x}
        body, headers = binary_infer_body(inputs, ["output", "attention_weights"])
        status, _, error = small.call("POST", "/v2/models/dot_product_attention/infer", body,
                                      headers=headers)
        assert status == 400 and "40200 floats" in error["error"] and "at most 16384" in \
            error["error"], error
        body, headers = binary_infer_body(inputs, ["output"])
        status, _, _ = small.call("POST", "/v2/models/dot_product_attention/infer", body,
                                  headers=headers)
        assert status == 200


def test_too_many_scores_is_400(server):
    # 70,000 queries and keys of one float: small bodies, 4.9e9 scores.
    ones = np.ones((1, 70000, 1), np.float32)
    body, headers = binary_infer_body({"queries": ones, "keys": ones, "values": ones})
    status, _, error = server.call("POST", "/v2/models/dot_product_attention/infer", body,
                                   headers=headers)
    assert status == 400 and "scores (B * N * M)" in error["error"], error


def long_request():
    rng = np.random.default_rng(0)
    return infer_body({"queries": rng.standard_normal((2, 1500, 64), dtype=np.float32),
                       "keys": rng.standard_normal((2, 1500, 64), dtype=np.float32),
                       "values": rng.standard_normal((2, 1500, 64), dtype=np.float32)})


def start_long_request(server):
    """A long request sent from a thread, once the server computes it:
    (the thread, the list its answer goes to, the body sent)."""
    body = json.dumps(long_request()).encode()
    results = []
    worker = threading.Thread(target=lambda: results.append(
        server.call("POST", "/v2/models/dot_product_attention/infer", body)))
    worker.start()
    assert wait_for_gauge(server, "attnscore_in_flight", 1), "no request in flight"
    return worker, results, body


def test_full_queue_is_503_with_retry_after():
    with Server(SERVER, "--workers", "1", "--max-queue", "0") as busy:
        worker, results, _ = start_long_request(busy)
        status, headers, error = busy.call("POST", "/v2/models/dot_product_attention/infer",
                                           good_toy())
        worker.join()
        assert status == 503 and headers["Retry-After"] == "1", error
        assert "--max-queue" in error["error"]
        assert results[0][0] == 200
        _, _, metrics = busy.call("GET", "/metrics")
        assert 'attnscore_requests_total{model="dot_product_attention",code="503"} 1' in \
            metrics.decode()
        assert busy.stop() == 0


def test_default_workers_count_the_cpus_the_process_may_use():
    """taskset to one CPU: one worker by default, whatever the machine has.
    SIGTERM at once after the listening line (before the accept loop may
    have started) still stops it, with status 0."""
    process = subprocess.Popen(["taskset", "-c", "0", SERVER, "--port", "0", "--grpc-port", "0"],
                               stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert "engine 1 thread(s), 1 worker(s)" in line, line
    finally:
        process.terminate()
        status = process.wait(30)
        process.stdout.close()
    assert status == 0


def test_sigterm_finishes_the_request_in_flight_and_exits_0(tmp_path):
    log = open(tmp_path / "log", "w")
    busy = Server(SERVER, "--workers", "1", log=log)
    worker, results, body = start_long_request(busy)
    busy.process.send_signal(signal.SIGTERM)
    worker.join()
    assert results[0][0] == 200
    assert busy.process.wait(30) == 0
    log.close()
    lines = (tmp_path / "log").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert any(r["status"] == 200 and r.get("model") == "dot_product_attention" and
               r["request_bytes"] == len(body) for r in records)
    assert lines[-1] == "attnscore-server: stopped"


def test_a_request_is_counted_before_its_answer_is_sent(server):
    # An answer (2M weights, ~40 MB of JSON) far larger than the loopback's
    # socket buffers: while the client has read only its status line, the
    # server is still writing the rest. The /metrics asked for then, on
    # another connection, must count the request already.
    before = requests_counted(server.call("GET", "/metrics")[2].decode(), 200)
    body = json.dumps(infer_body({"x": np.ones((1, 2, 1 << 20), np.float32)})).encode()
    host, port = server.url.split("//")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", "/v2/models/masked_softmax/infer", body,
                           {"Content-Type": "application/json"})
        answer = connection.getresponse()  # the status line and headers only
        assert answer.status == 200
        metrics = server.call("GET", "/metrics")[2].decode()
        assert requests_counted(metrics, 200) == before + 1
        answer.read()
    finally:
        connection.close()


def test_metrics_count_requests_by_model_and_status(server):
    count = requests_counted

    # A request is counted before its answer goes out (docs/serving.md), so
    # the /metrics asked for next has it: each time, refused or answered
    # (each call a new connection, which another server thread may serve).
    good = infer_body({"x": np.ones((1, 2, 3), np.float32)})
    text = server.call("GET", "/metrics")[2].decode()
    for _ in range(40):
        for body, code in ((b"{", 400), (good, 200)):
            before = text
            assert server.call("POST", "/v2/models/masked_softmax/infer", body)[0] == code
            text = server.call("GET", "/metrics")[2].decode()
            assert count(text, code) == count(before, code) + 1, code
    assert 'attnscore_request_duration_seconds_bucket{model="masked_softmax",le="+Inf"}' in text
    assert "attnscore_queue_depth 0" in text


@pytest.mark.parametrize("flags,words", [
    (["--port", "70000"], "--port"),
    (["--workers", "0"], "--workers"),
    (["--bogus"], "unknown"),
    (["--models", "/nonexistent-dir"], "/nonexistent-dir"),
])
def test_bad_flags_exit_2_naming_them(flags, words):
    result = subprocess.run([SERVER, *flags], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result
    assert words in result.stderr and result.stderr.startswith("attnscore-server: error:")


def started_with(tmp_path, folder):
    """A server on `folder`, and what it printed to stderr as it loaded."""
    log = open(tmp_path / "stderr.txt", "w+")
    running = Server(SERVER, "--models", str(folder), log=log)
    log.seek(0)
    return running, log.read()


def test_a_file_that_is_no_model_is_not_ready_and_stops_nothing(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    # Concat without its query size (no metadata, no sidecar), and a file of
    # no known kind: both listed not ready, with their reasons on stderr.
    shutil.copy(os.path.join(GOLDEN, "concat_tutorial", "model.safetensors"),
                folder / "attn.safetensors")
    (folder / "other.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}")
    os.mkfifo(folder / "pipe.safetensors")  # opened, it would block the start
    running, stderr = started_with(tmp_path, folder)
    with running:
        assert "model 'attn' is not ready" in stderr and "attn.json" in stderr and \
            "query_size" in stderr, stderr
        assert "model 'other' is not ready" in stderr and "other.safetensors" in stderr, stderr
        assert "model 'pipe' is not ready" in stderr and "not a regular file" in stderr, stderr
        for name in ("attn", "other", "pipe"):
            status, _, answer = running.call("GET", "/v2/models/%s/ready" % name)
            assert status == 400 and answer["ready"] is False, answer
            status, _, answer = running.call("POST", "/v2/models/%s/infer" % name,
                                             {"inputs": []})
            assert status == 400 and "is not ready" in answer["error"], answer
        status, _, _ = running.call("GET", "/v2/health/ready")
        assert status == 200


def export(tmp_path, folder, kind, name, *flags):
    """tools/export_torch.py KIND: the seed module's NAME.safetensors (its kind
    in the metadata) into `folder`, and its inputs and outputs."""
    case = tmp_path / name
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "export_torch.py"), kind,
                    *flags, "--name", name, "--out", str(case)], check=True, capture_output=True)
    shutil.move(str(case / (name + ".safetensors")), folder / (name + ".safetensors"))
    arrays = {n: np.load(case / (n + ".npy"))
              for n in ("queries", "keys", "values", "valid_lens", "out", "weights")
              if (case / (n + ".npy")).exists()}
    return arrays


def test_every_kind_of_model_file_serves_the_seed_modules_numbers(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    cases = {
        "add": export(tmp_path, folder, "additive", "add", "--query-size", "6", "--key-size",
                      "5", "--hidden", "7", "--queries", "3", "--valid-lens", "4,9"),
        "cat": export(tmp_path, folder, "concat", "cat", "--query-size", "6", "--key-size", "5",
                      "--value-rows", "8", "--value-dim", "3", "--output-size", "4",
                      "--batch", "2", "--queries", "3", "--valid-lens", "5,8"),
        "bil": export(tmp_path, folder, "bilinear", "bil", "--query-size", "6", "--key-size",
                      "5", "--queries", "3", "--valid-lens", "2,10"),
        "mha": export(tmp_path, folder, "multihead", "mha", "--query-size", "6", "--key-size",
                      "5", "--value-size", "4", "--hiddens", "8", "--heads", "2", "--bias",
                      "--valid-lens", "3,6"),
    }
    # A well-formed file of a tensor no model has.
    header = b'{"foo":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    header += b" " * (-len(header) % 8)
    (folder / "mystery.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + b"\x00" * 4)
    kinds = {"add": "additive", "cat": "concat", "bil": "bilinear", "mha": "multihead"}
    running, stderr = started_with(tmp_path, folder)
    with running:
        assert "model 'mystery' is not ready" in stderr, stderr
        status, _, answer = running.call("GET", "/v2/models/mystery/ready")
        assert status == 400 and answer["ready"] is False
        for name, arrays in cases.items():
            status, _, meta = running.call("GET", "/v2/models/" + name)
            assert status == 200 and meta["parameters"]["kind"] == kinds[name], meta
            inputs = {n: arrays[n] for n in ("queries", "keys", "values", "valid_lens")}
            status, _, answer = running.call(
                "POST", "/v2/models/%s/infer" % name,
                infer_body(inputs, ["output", "attention_weights"]))
            assert status == 200, (name, answer)
            out, weights = output_array(answer, "output"), output_array(answer,
                                                                         "attention_weights")
            want = arrays["out"]
            assert out.shape == want.shape, name
            assert np.abs(out - want).max() <= 1e-4 * (1 + np.abs(want).max()), name
            assert weights.shape == arrays["weights"].shape, name
            assert np.abs(weights - arrays["weights"]).max() <= 1e-5, name
        status, _, meta = running.call("GET", "/v2/models/mha")
        assert meta["parameters"]["num_heads"] == "2"
        assert [t["shape"] for t in meta["inputs"][:3]] == [[-1, -1, 6], [-1, -1, 5],
                                                             [-1, -1, 4]]


def attention_float64(q, k, v, causal, scale, softcap=0.0):
    """Multi-head attention as docs/semantics.md defines it, in float64."""
    B, N, Hq, D = q.shape
    M, Hkv = k.shape[1], k.shape[2]
    out = np.zeros((B, N, Hq, v.shape[3]))
    weights = np.zeros((B, Hq, N, M))
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = scale * q[b, :, h].astype(np.float64) @ k[b, :, g].astype(np.float64).T
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            for i in range(N):
                last = {"none": M - 1, "top-left": i, "bottom-right": M - N + i}[causal]
                s[i, last + 1:] = -np.inf
            w = np.exp(s - s.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            weights[b, h] = w
            out[b, :, h] = w @ v[b, :, g]
    return out, weights


def test_the_built_in_multihead_attention_honours_causal_scale_and_softcap(server):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    k = rng.standard_normal((2, 5, 2, 8)).astype(np.float32)
    v = rng.standard_normal((2, 5, 2, 3)).astype(np.float32)
    answers = {}
    for causal, scale, softcap in (("none", 0.0, 0.0), ("top-left", 0.0, 0.0),
                                   ("bottom-right", 0.25, 0.0), ("capped", 2.0, 1.5)):
        body = infer_body({"queries": q, "keys": k, "values": v},
                          ["output", "attention_weights"])
        mask = "none" if causal == "capped" else causal
        body["parameters"] = {"causal": mask, "scale": scale}
        if softcap:
            body["parameters"]["softcap"] = softcap
        status, _, answer = server.call("POST", "/v2/models/multihead_attention/infer", body)
        assert status == 200, answer
        want_out, want_weights = attention_float64(q, k, v, mask, scale or 8 ** -0.5, softcap)
        out = output_array(answer, "output")
        assert out.shape == (2, 3, 4, 3)
        assert np.abs(out - want_out).max() <= 1e-5 * (1 + np.abs(want_out).max()), causal
        assert np.abs(output_array(answer, "attention_weights") - want_weights).max() <= 1e-6
        answers[causal] = out
    assert not np.array_equal(answers["none"], answers["top-left"])
    body = infer_body({"queries": q, "keys": k, "values": v})
    body["parameters"] = {"softcap": -1}
    status, _, answer = server.call("POST", "/v2/models/multihead_attention/infer", body)
    assert status == 400 and "softcap is -1.000000; it must be finite and >= 0" in answer["error"], \
        answer
    body["parameters"] = {"causal": "diagonal"}
    status, _, answer = server.call("POST", "/v2/models/multihead_attention/infer", body)
    assert status == 400 and "causal is 'diagonal'" in answer["error"], answer
    body["parameters"] = {"casual": "top-left"}
    status, _, answer = server.call("POST", "/v2/models/multihead_attention/infer", body)
    assert status == 400 and "no parameter 'casual'" in answer["error"], answer


# ---------------------------------------------------------------------------
# Hostile requests and starts.

def raw_exchange(server, data, timeout=10):
    """The first response the server sends for `data` on a new connection:
    its head and the body its Content-Length frames."""
    host, port = server.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk, answer
            body += chunk
        return head + b"\r\n\r\n" + body


def status_and_error(answer):
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body).get("error", "")


def toy_json():
    return infer_body(golden(*DOT_TOY), ["output"])


@pytest.mark.parametrize("path", ["/v2", "/v2/"])
def test_server_metadata_at_both_paths(server, path):
    status, _, answer = server.call("GET", path)
    assert status == 200 and answer["name"] == "attnscore" and answer["version"], answer


def test_json_followed_by_a_nul_byte_is_refused(server):
    body = json.dumps(toy_json()).encode()
    status, _, answer = server.call("POST", "/v2/models/dot_product_attention/infer",
                                    body + b"\0garbage{{{")
    assert status == 400 and answer["error"] == \
        "malformed JSON: a NUL byte at offset %d" % len(body), answer


@pytest.mark.parametrize("lengths,why", [
    ([b"-5"], b"Content-Length is '-5'; it must be a decimal number of bytes"),
    ([b"0x10"], b"Content-Length is '0x10'"),
    ([b"99999999999999999999"], b"Content-Length is '99999999999999999999'"),
    ([b"%d", b"5"], b"2 Content-Length headers; it must have one"),
    ([b"%d", b"%d"], b"2 Content-Length headers; it must have one"),
    ([], b"no Content-Length; a POST must give its body's length"),
])
def test_a_content_length_that_cannot_frame_the_body_is_a_400(server, lengths, why):
    # Answered at once, before any body is read: no stall, no 413.
    body = json.dumps(toy_json()).encode()
    headers = b"".join(b"Content-Length: " + (n % len(body) if b"%" in n else n) + b"\r\n"
                       for n in lengths)
    start = time.monotonic()
    answer = raw_exchange(server, b"POST /v2/models/dot_product_attention/infer HTTP/1.1\r\n"
                          b"Host: test\r\n" + headers + b"\r\n" + body)
    assert time.monotonic() - start < 4  # not after a wait for a body (a read timeout)
    status, error = status_and_error(answer)
    assert status == 400 and why.decode() in error, error


def test_dims_zero_and_past_2_to_the_62_are_named(server):
    request = toy_json()
    request["inputs"][0]["shape"] = [2, 0, 2]
    request["inputs"][0]["data"] = []
    status, _, answer = server.call("POST", "/v2/models/dot_product_attention/infer", request)
    assert status == 400 and "queries has shape (2, 0, 2): every dim must be >= 1" in \
        answer["error"], answer
    request = toy_json()
    request["inputs"][0]["shape"] = [2, 1, 2 ** 62 + 1]
    status, _, answer = server.call("POST", "/v2/models/dot_product_attention/infer", request)
    assert status == 400 and "dims must be integers from 0 to 2^62" in answer["error"], answer


def test_a_sidecar_that_is_a_fifo_does_not_hold_the_start(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(os.path.join(GOLDEN, "concat_tutorial", "model.safetensors"),
                folder / "attn.safetensors")
    os.mkfifo(folder / "attn.json")  # opened for reading, it would block
    start = time.monotonic()
    running, stderr = started_with(tmp_path, folder)
    with running:
        assert time.monotonic() - start < 5
        assert "model 'attn' is not ready" in stderr and "attn.json: not a regular file" in \
            stderr, stderr


def test_sigterm_stops_a_starting_server(tmp_path):
    # SIGTERM at once, while the server starts (or just after): it exits
    # promptly either way, 143 if it was still starting.
    for _ in range(5):
        process = subprocess.Popen([SERVER, "--port", "0", "--grpc-port", "0"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        time.sleep(0.01)
        process.terminate()
        # -SIGTERM: before main() blocks it, the signal ends the process itself.
        assert process.wait(timeout=10) in (0, 128 + signal.SIGTERM, -signal.SIGTERM)
        out, err = process.communicate()
        assert process.returncode == -signal.SIGTERM or "stopped" in err, err
