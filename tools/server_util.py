"""Starting attnscore-server for a test or a load run, and calling it with
the standard library alone."""

import json
import os
import subprocess
import urllib.error
import urllib.request

import numpy as np


class Server:
    """attnscore-server on free loopback ports (REST and gRPC), stopped by
    SIGTERM on exit."""

    def __init__(self, binary, *flags, log=subprocess.DEVNULL):
        self.process = subprocess.Popen([binary, "--port", "0", "--grpc-port", "0", *flags],
                                        stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.process.stdout.readline()
        grpc_line = self.process.stdout.readline()
        if "listening on http://" not in line or "gRPC listening on " not in grpc_line:
            self.process.kill()
            raise RuntimeError("attnscore-server did not start: " + repr(line + grpc_line))
        self.url = line.split("listening on ")[1].split()[0]
        # host:port, as grpc.insecure_channel takes it
        self.grpc_address = grpc_line.split("gRPC listening on ")[1].split()[0]

    def stop(self, timeout=30):
        """SIGTERM, then the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        self.process.stdout.close()

    def rss_kib(self):
        return self.status_kib("VmRSS")

    def status_kib(self, field):
        """A memory field of /proc/PID/status, in KiB (VmRSS, VmHWM)."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError("no " + field)

    def call(self, method, path, body=None, timeout=60, headers=None):
        """(status, headers, parsed JSON or text) of one request; a binary
        answer (binary tensor data extension) comes back as raw bytes."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers=headers or {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, headers, text = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, headers, text = error.code, error.headers, error.read()
        kind = headers.get("Content-Type", "")
        return status, headers, json.loads(text) if kind.startswith("application/json") else text


def tensor(name, array):
    """A protocol input tensor of a NumPy array (FP32, INT32 or INT64)."""
    datatype = {np.dtype(np.float32): "FP32", np.dtype(np.int32): "INT32",
                np.dtype(np.int64): "INT64"}[array.dtype]
    return {"name": name, "shape": list(array.shape), "datatype": datatype,
            "data": array.reshape(-1).tolist()}


def infer_body(inputs, outputs=None):
    """An infer request of {name: array}; `outputs` names the outputs wanted."""
    body = {"inputs": [tensor(name, array) for name, array in inputs.items()]}
    if outputs:
        body["outputs"] = [{"name": name} for name in outputs]
    return body


def decode_step_inputs(seed):
    """multihead_attention's inputs for one decode step of one sequence, issue
    50's shape: a query of 16 heads against 2,048 keys of 4 heads, D 64 (K
    and V 4 MiB), normal random from `seed`."""
    rng = np.random.default_rng(seed)
    return {"queries": rng.standard_normal((1, 1, 16, 64), dtype=np.float32),
            "keys": rng.standard_normal((1, 2048, 4, 64), dtype=np.float32),
            "values": rng.standard_normal((1, 2048, 4, 64), dtype=np.float32)}


def binary_infer_body(inputs, outputs=None):
    """(body bytes, headers) of an infer request whose tensor data follows the
    JSON as raw bytes (the binary tensor data extension); `outputs` are asked
    for as binary too."""
    entries, data = [], b""
    for name, array in inputs.items():
        entry = tensor(name, array)
        del entry["data"]
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        entry["parameters"] = {"binary_data_size": len(raw)}
        entries.append(entry)
        data += raw
    header = {"inputs": entries}
    if outputs:
        header["outputs"] = [{"name": n, "parameters": {"binary_data": True}} for n in outputs]
    else:
        header["parameters"] = {"binary_data_output": True}
    text = json.dumps(header).encode()
    return text + data, {"Content-Type": "application/octet-stream",
                         "Inference-Header-Content-Length": str(len(text))}


def binary_outputs(headers, body):
    """{name: float32 array} of a binary answer."""
    size = int(headers["Inference-Header-Content-Length"])
    answer, offset, arrays = json.loads(body[:size]), size, {}
    for entry in answer["outputs"]:
        count = entry["parameters"]["binary_data_size"]
        arrays[entry["name"]] = np.frombuffer(body[offset:offset + count], "<f4").reshape(
            entry["shape"])
        offset += count
    assert offset == len(body)
    return arrays


def output_array(answer, name):
    """An output of an infer answer as float32 (non-finite values come as the
    strings "NaN", "Infinity", "-Infinity")."""
    for entry in answer["outputs"]:
        if entry["name"] == name:
            values = [float(v) for v in entry["data"]]
            return np.array(values, np.float64).astype(np.float32).reshape(entry["shape"])
    raise KeyError(name)


def build_dir():
    return os.environ.get("ATTNSCORE_BUILD_DIR", "build")
