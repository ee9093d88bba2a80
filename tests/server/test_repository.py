"""attnscore-server's model repository extension (Triton's): the index of
models with their state and the reason one is not ready, and models loaded
and unloaded while the server runs, each change seen by readiness,
metadata, inference and gRPC alike.

    ATTNSCORE_BUILD_DIR=build /usr/bin/python3 -m pytest tests/server
"""

import os
import shutil
import threading

import numpy as np

from server_testing import DOT_TOY, GOLDEN, SERVER, golden, wait_for_gauge
from server_util import Server, infer_body


def index(server, body=None):
    status, _, answer = server.call("POST", "/v2/repository/index", body or b"")
    assert status == 200, answer
    return {entry["name"]: entry for entry in answer}


def additive_inputs():
    return golden("additive_toy", "queries", "keys", "values", "valid_lens")


def test_models_load_and_unload_while_the_server_runs(tmp_path):
    shutil.copy(os.path.join(GOLDEN, "additive_toy", "model.safetensors"),
                tmp_path / "toy.safetensors")
    (tmp_path / "broken.safetensors").write_bytes(b"not a safetensors file")
    with Server(SERVER, "--models", str(tmp_path)) as server:
        _, _, meta = server.call("GET", "/v2")
        assert "model_repository" in meta["extensions"]
        models = index(server)
        assert models["toy"] == {"name": "toy", "version": "1", "state": "READY"}
        assert models["dot_product_attention"]["state"] == "READY"
        assert models["broken"]["state"] == "UNAVAILABLE" and models["broken"]["reason"]
        assert "broken" not in index(server, {"ready": True})

        toy = infer_body(additive_inputs())
        status, _, first = server.call("POST", "/v2/models/toy/infer", toy)
        assert status == 200, first
        assert server.call("POST", "/v2/repository/models/toy/unload", b"")[0] == 200
        assert index(server)["toy"]["state"] == "UNAVAILABLE"
        assert "unloaded" in index(server)["toy"]["reason"]
        assert server.call("GET", "/v2/models/toy/ready")[0] == 400
        status, _, error = server.call("POST", "/v2/models/toy/infer", toy)
        assert status == 400 and "not ready" in error["error"]

        assert server.call("POST", "/v2/repository/models/toy/load", b"")[0] == 200
        assert index(server)["toy"]["state"] == "READY"
        status, _, again = server.call("POST", "/v2/models/toy/infer", toy)
        assert status == 200 and again["outputs"] == first["outputs"]

        # A file broken, then mended, while the server runs; a file added.
        (tmp_path / "toy.safetensors").write_bytes(b"garbage")
        status, _, error = server.call("POST", "/v2/repository/models/toy/load", b"")
        assert status == 400 and "failed to load" in error["error"]
        assert index(server)["toy"]["state"] == "UNAVAILABLE"
        shutil.copy(os.path.join(GOLDEN, "additive_toy", "model.safetensors"),
                    tmp_path / "toy.safetensors")
        assert server.call("POST", "/v2/repository/models/toy/load", b"")[0] == 200
        shutil.copy(os.path.join(GOLDEN, "additive_toy", "model.safetensors"),
                    tmp_path / "later.safetensors")
        assert "later" not in index(server)
        assert server.call("POST", "/v2/repository/models/later/load", b"")[0] == 200
        status, _, answer = server.call("POST", "/v2/models/later/infer", toy)
        assert status == 200 and answer["outputs"] == first["outputs"]
        # A file removed: loading it again leaves it listed, unavailable.
        os.remove(tmp_path / "later.safetensors")
        status, _, error = server.call("POST", "/v2/repository/models/later/load", b"")
        assert status == 400 and "gone" in error["error"]
        assert index(server)["later"]["state"] == "UNAVAILABLE"
        # Triton's load parameters (a config, files) are refused, not dropped.
        status, _, error = server.call("POST", "/v2/repository/models/toy/load",
                                       {"parameters": {"config": "{}"}})
        assert status == 400 and "no parameters" in error["error"]


def test_unknown_names_and_paths_are_404_and_a_bad_index_body_400():
    with Server(SERVER) as server:
        for path in ("/v2/repository/models/nope/load", "/v2/repository/models/nope/unload",
                     "/v2/repository/models/nope/reload", "/v2/repository/other"):
            status, _, error = server.call("POST", path, b"")
            assert status == 404, (path, error)
        status, _, error = server.call("POST", "/v2/repository/index", {"ready": "yes"})
        assert status == 400 and "ready" in error["error"]
        # Built-ins unload and load like files.
        assert server.call("POST", "/v2/repository/models/masked_softmax/unload", b"")[0] == 200
        assert server.call("GET", "/v2/models/masked_softmax/ready")[0] == 400
        assert server.call("POST", "/v2/repository/models/masked_softmax/load", b"")[0] == 200
        assert server.call("GET", "/v2/models/masked_softmax/ready")[0] == 200


def test_a_request_in_flight_finishes_on_the_model_it_started_with():
    rng = np.random.default_rng(0)
    long = infer_body({name: rng.standard_normal((2, 1500, 64), dtype=np.float32)
                       for name in ("queries", "keys", "values")})
    with Server(SERVER, "--workers", "1") as server:
        results = []
        worker = threading.Thread(target=lambda: results.append(
            server.call("POST", "/v2/models/dot_product_attention/infer", long)))
        worker.start()
        wait_for_gauge(server, "attnscore_in_flight", 1)
        assert server.call("POST", "/v2/repository/models/dot_product_attention/unload",
                           b"")[0] == 200
        worker.join()
        assert results[0][0] == 200
        status, _, _ = server.call("POST", "/v2/models/dot_product_attention/infer",
                                   infer_body(golden(*DOT_TOY)))
        assert status == 400
