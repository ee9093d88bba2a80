#!/usr/bin/env python3
"""A client of attnscore-server's gRPC service (the Open Inference Protocol's
gRPC form), on Debian's python3-grpcio and the stubs the build writes from
server/inference.proto into BUILD/grpc/.

As a program: runs one inference and saves each output as a .npy file.

    tools/grpc_client.py --address 127.0.0.1:8001 --model dot_product_attention \\
        --input queries=q.npy --input keys=k.npy --input values=v.npy --out out/

As a module (tests/server/test_grpc.py, tools/loadtest): GrpcClient.
"""

import argparse
import os
import sys

import numpy as np


def load_stubs(build):
    """The modules inference_pb2 and inference_pb2_grpc from BUILD/grpc."""
    folder = os.path.join(build, "grpc")
    if not os.path.exists(os.path.join(folder, "inference_pb2_grpc.py")):
        raise RuntimeError(f"no gRPC stubs in {folder}: build the project first (cmake --build)")
    sys.path.insert(0, folder)
    import inference_pb2
    import inference_pb2_grpc
    return inference_pb2, inference_pb2_grpc


DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.int32): "INT32",
             np.dtype(np.int64): "INT64"}


def infer_request(pb, model, inputs, outputs=(), raw=True, parameters=None):
    """A ModelInferRequest of {name: array}: data as raw_input_contents, or
    typed contents when raw is False."""
    request = pb.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        entry = request.inputs.add(name=name, datatype=DATATYPES[array.dtype],
                                   shape=list(array.shape))
        flat = np.ascontiguousarray(array).reshape(-1)
        if raw:
            request.raw_input_contents.append(flat.astype(array.dtype.newbyteorder("<"))
                                              .tobytes())
        elif array.dtype == np.float32:
            entry.contents.fp32_contents.extend(flat.tolist())
        elif array.dtype == np.int32:
            entry.contents.int_contents.extend(flat.tolist())
        else:
            entry.contents.int64_contents.extend(flat.tolist())
    for name in outputs:
        request.outputs.add(name=name)
    for key, value in (parameters or {}).items():
        field = {bool: "bool_param", int: "int64_param", float: "double_param",
                 str: "string_param"}[type(value)]
        setattr(request.parameters[key], field, value)
    return request


class GrpcClient:
    """One channel to the server; infer() takes and gives NumPy arrays."""

    def __init__(self, address, build):
        import grpc
        self.grpc = grpc
        self.pb, pb_grpc = load_stubs(build)
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def request(self, model, inputs, outputs=(), raw=True, parameters=None):
        return infer_request(self.pb, model, inputs, outputs, raw, parameters)

    def infer(self, model, inputs, outputs=(), raw=True, parameters=None, timeout=60):
        """{output name: float32 array}; a failed call raises grpc.RpcError."""
        response = self.stub.ModelInfer(self.request(model, inputs, outputs, raw, parameters),
                                        timeout=timeout)
        return arrays(response)


def arrays(response):
    """{name: float32 array} of a ModelInferResponse, raw or typed."""
    result = {}
    for i, tensor in enumerate(response.outputs):
        if response.raw_output_contents:
            values = np.frombuffer(response.raw_output_contents[i], "<f4")
        else:
            values = np.array(tensor.contents.fp32_contents, np.float32)
        result[tensor.name] = values.reshape(list(tensor.shape))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1:8001", help="host:port of the gRPC service")
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    parser.add_argument("--output", action="append", default=[], metavar="NAME",
                        help="an output to return (default: the model's first)")
    parser.add_argument("--typed", action="store_true",
                        help="send typed contents rather than raw bytes")
    parser.add_argument("--out", default=".", help="folder for OUTPUT.npy files")
    parser.add_argument("--build", default=os.environ.get("ATTNSCORE_BUILD_DIR", "build"))
    args = parser.parse_args()
    inputs = {}
    for item in args.input:
        name, _, path = item.partition("=")
        if not path:
            parser.error(f"--input is '{item}'; want NAME=FILE.npy")
        inputs[name] = np.load(path)
    client = GrpcClient(args.address, args.build)
    try:
        outputs = client.infer(args.model, inputs, args.output, raw=not args.typed)
    except client.grpc.RpcError as error:
        print(f"grpc_client: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    finally:
        client.close()
    os.makedirs(args.out, exist_ok=True)
    for name, array in outputs.items():
        np.save(os.path.join(args.out, name + ".npy"), array)
        print(f"{name}: {list(array.shape)} -> {os.path.join(args.out, name + '.npy')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
