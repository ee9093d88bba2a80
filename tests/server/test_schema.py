"""Every kind of REST answer attnscore-server gives, held to the component
schemas of the Open Inference Protocol's OpenAPI file
(open_inference_rest.yaml, in kserve/open-inference-protocol): their
required fields and types, written out below as a JSON schema of our own and
checked by a small validator (type, properties, required, items, anyOf,
$ref).

    ATTNSCORE_BUILD_DIR=build /usr/bin/python3 -m pytest tests/server
"""

import json

import numpy as np
import pytest

from server_testing import DOT_TOY, golden
from server_util import binary_infer_body, infer_body

PARAMETERS = {"type": "object"}
TENSOR_DATA = {"type": "array",
               "items": {"anyOf": [{"$ref": "tensor_data"}, {"type": "number"},
                                   {"type": "string"}, {"type": "boolean"}]}}
SCHEMAS = {
    "metadata_server_response": {
        "type": "object", "required": ["name", "version", "extensions"],
        "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                       "extensions": {"type": "array", "items": {"type": "string"}}}},
    "metadata_tensor": {
        "type": "object", "required": ["name", "datatype", "shape"],
        "properties": {"name": {"type": "string"}, "datatype": {"type": "string"},
                       "shape": {"type": "array", "items": {"type": "integer"}}}},
    "metadata_model_response": {
        "type": "object", "required": ["name", "platform"],
        "properties": {"name": {"type": "string"},
                       "versions": {"type": "array", "items": {"type": "string"}},
                       "platform": {"type": "string"},
                       "inputs": {"type": "array", "items": {"$ref": "metadata_tensor"}},
                       "outputs": {"type": "array", "items": {"$ref": "metadata_tensor"}}}},
    "tensor_data": TENSOR_DATA,
    "response_output": {
        "type": "object", "required": ["name", "shape", "datatype", "data"],
        "properties": {"name": {"type": "string"},
                       "shape": {"type": "array", "items": {"type": "integer"}},
                       "datatype": {"type": "string"}, "parameters": PARAMETERS,
                       "data": {"$ref": "tensor_data"}}},
    "inference_response": {
        "type": "object", "required": ["model_name", "outputs"],
        "properties": {"model_name": {"type": "string"}, "model_version": {"type": "string"},
                       "id": {"type": "string"}, "parameters": PARAMETERS,
                       "outputs": {"type": "array", "items": {"$ref": "response_output"}}}},
    "error_response": {"type": "object", "required": ["error"],
                       "properties": {"error": {"type": "string"}}},
}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def problems(value, schema, where="$"):
    """What in `value` breaks `schema`: [] when it holds."""
    if "$ref" in schema:
        return problems(value, SCHEMAS[schema["$ref"]], where)
    if "anyOf" in schema:
        if any(not problems(value, option, where) for option in schema["anyOf"]):
            return []
        return [f"{where}: {value!r} matches none of {schema['anyOf']}"]
    kind = schema.get("type")
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = kind is None or isinstance(value, TYPES[kind])
    if not ok:
        return [f"{where}: {value!r} is not {kind}"]
    found = []
    if kind == "object":
        found += [f"{where}: no '{key}'" for key in schema.get("required", []) if key not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                found += problems(value[key], sub, f"{where}.{key}")
    if kind == "array" and "items" in schema:
        for i, item in enumerate(value):
            found += problems(item, schema["items"], f"{where}[{i}]")
    return found


def test_the_validator_can_fail():
    assert problems({"name": "a", "version": "1"}, SCHEMAS["metadata_server_response"])
    assert problems({"model_name": "m", "outputs": [{"name": "o", "shape": [1], "datatype": "FP32",
                                                     "data": [None]}]},
                    SCHEMAS["inference_response"])
    assert problems({"error": 5}, SCHEMAS["error_response"])


def test_server_and_model_metadata_hold_the_schemas(server):
    for path in ("/v2", "/v2/"):
        status, _, answer = server.call("GET", path)
        assert status == 200 and problems(answer, SCHEMAS["metadata_server_response"]) == []
    for model in ("masked_softmax", "dot_product_attention", "multihead_attention",
                  "multihead_attention_packed", "additive_toy", "concat_tutorial"):
        status, _, answer = server.call("GET", f"/v2/models/{model}")
        assert status == 200, answer
        assert problems(answer, SCHEMAS["metadata_model_response"]) == [], model
        status, _, answer = server.call("GET", f"/v2/models/{model}/versions/1")
        assert status == 200 and problems(answer, SCHEMAS["metadata_model_response"]) == []


def test_inference_answers_hold_the_schema_non_finite_values_included(server):
    toy = golden(*DOT_TOY)
    x = np.array([[[1.0, np.inf, 2.0], [np.nan, 0.0, 1.0], [-np.inf, 0.0, 0.0]]], np.float32)
    body, headers = binary_infer_body({"x": x})
    header = json.loads(body[:int(headers["Inference-Header-Content-Length"])])
    header["parameters"] = {}  # answer in JSON
    text = json.dumps(header).encode()
    raw = body[int(headers["Inference-Header-Content-Length"]):]
    status, _, answer = server.call(
        "POST", "/v2/models/masked_softmax/infer", text + raw,
        headers={"Content-Type": "application/octet-stream",
                 "Inference-Header-Content-Length": str(len(text))})
    assert status == 200, answer
    assert problems(answer, SCHEMAS["inference_response"]) == []
    data = answer["outputs"][0]["data"]
    assert "NaN" in data and all(isinstance(v, (float, str)) for v in data)
    request = infer_body(toy, ["output", "attention_weights"])
    request["id"] = "42"
    status, _, answer = server.call("POST", "/v2/models/dot_product_attention/infer", request)
    assert status == 200 and answer["id"] == "42"
    assert problems(answer, SCHEMAS["inference_response"]) == []


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/v2/models/nope", None),
    ("GET", "/v2/models/nope/ready", None),
    ("POST", "/v2/models/nope/infer", infer_body(golden(*DOT_TOY))),
    ("POST", "/v2/models/dot_product_attention/infer", {"inputs": []}),
    ("POST", "/v2/models/dot_product_attention/infer", b"{"),
    ("GET", "/v2/nothing", None),
])
def test_errors_hold_the_schema(server, method, path, body):
    status, _, answer = server.call(method, path, body)
    assert status in (400, 404), answer
    assert problems(answer, SCHEMAS["error_response"]) == [], answer
