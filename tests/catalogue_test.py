#!/usr/bin/python3
"""The catalogue reaches every front end: for each entry attnscore.catalogue()
lists, random inputs of its spec's shapes (and weights, for a model) run
through Python's attnscore.Op, the C API (ctypes, no extension), `attnscore
run` and `attnscore bench`, and attnscore-server (built in for an op, from a
model file whose __metadata__ says its kind for a model); every front end
must give Python's bits. An entry a front end lacks fails here, by name.

The generic call's numbers are the typed calls' (engine/api/op_entries.cc
calls them); those are checked against float64 references by each op's own
tests. Here the reference for each front end is the C++ generic call as the
Python extension makes it, and one entry per kind is also set against the
typed Python call.

Run: /usr/bin/python3 tests/catalogue_test.py BUILD_DIR [-v]
"""

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = None
MAX_RANK = 4

# A size for each dim name the catalogue uses; a new name fails loudly.
SIZES = {"B": 2, "N": 3, "M": 5, "T": 5, "D": 4, "Dv": 3, "Dq": 6, "Dk": 5, "H": 8,
         "heads": 2, "Hq": 4, "Hkv": 2, "O": 4, "L": 5, "1": 1, "S": 3, "Tq": 5, "Tk": 9}
# Packed rows' offsets and counts: a batch of sequences of 2, 0 and 3
# queries over 4, 1 and 4 keys (S + 1 offsets each); a cache step appending
# 2 and 3 positions (T) to its B sequences, which then attend with as many
# queries (Tq).
PACKED = {"cu_seqlens_q": [0, 2, 2, 5], "cu_seqlens_k": [0, 4, 5, 9], "counts": [2, 3],
          "query_counts": [2, 3]}
# A value for each model parameter an entry requires.
MODEL_PARAMS = {"num_heads": SIZES["heads"], "query_size": SIZES["Dq"], "capacity": SIZES["T"],
                "key_dim": SIZES["D"], "value_dim": SIZES["Dv"], "batch": SIZES["B"],
                "kv_heads": SIZES["Hkv"]}


def size(dim):
    return sum(SIZES[part] for part in dim.split("+"))


def random_tensors(specs, rng, skip_optional_ints=False):
    arrays = {}
    for spec in specs:
        shape = [size(d) for d in spec["dims"]]
        if spec["dtypes"][0] == "float32":
            arrays[spec["name"]] = rng.standard_normal(shape).astype(np.float32)
        elif spec["name"] in PACKED:
            arrays[spec["name"]] = np.array(PACKED[spec["name"]], np.int64)
        elif not skip_optional_ints:  # valid lengths per query, some past M, some 0
            arrays[spec["name"]] = rng.integers(0, SIZES["M"] + 2, shape).astype(np.int64)
    return arrays


def model_params(entry):
    params = {}
    for p in entry["params"]:
        if p["kind"] == "model" and (not p["default"] or p["name"] in MODEL_PARAMS):
            params[p["name"]] = MODEL_PARAMS[p["name"]]
    return params


def bits(array):
    return np.ascontiguousarray(array, np.float32).view(np.uint32)


class NamedTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32),
                ("data", ctypes.c_void_p), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * MAX_RANK), ("strides", ctypes.c_int64 * MAX_RANK)]


class Param(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class EngineOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int32), ("isa", ctypes.c_int32),
                ("precision", ctypes.c_int32)]


def named(name, array):
    dtype = {np.dtype(np.float32): 0, np.dtype(np.int32): 1, np.dtype(np.int64): 2}[array.dtype]
    t = NamedTensor(name.encode(), dtype, array.ctypes.data, array.ndim)
    for d in range(array.ndim):
        t.dims[d] = array.shape[d]
        t.strides[d] = array.strides[d] // array.itemsize
    return t


def c_params(params):
    return (Param * max(len(params), 1))(
        *[Param(k.encode(), str(v).encode()) for k, v in params.items()])


class CatalogueTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(BUILD, "python"))
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import attnscore  # noqa: E402
        from export_torch import save_safetensors  # noqa: E402
        cls.attnscore = attnscore
        cls.save_safetensors = staticmethod(save_safetensors)
        cls.engine = attnscore.Engine()
        cls.folder = tempfile.TemporaryDirectory()
        cls.dir = cls.folder.name
        cls.entries = attnscore.catalogue()
        cls.cases = {}
        rng = np.random.default_rng(7)
        os.mkdir(os.path.join(cls.dir, "models"))
        for entry in cls.entries:
            inputs = random_tensors(entry["inputs"], rng)
            weights = random_tensors(entry["weights"], rng)
            params = model_params(entry)
            op = attnscore.Op(entry["name"], weights or None, **params)
            want = op(cls.engine, return_weights=True, **inputs)
            want = want if isinstance(want, tuple) else (want,)
            if entry["weights"]:
                path = os.path.join(cls.dir, "models", entry["name"] + ".safetensors")
                cls.save_safetensors(weights, path, {"kind": entry["name"], **params})
            cls.cases[entry["name"]] = (entry, inputs, weights, params, want)

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def test_the_catalogue_has_every_op_and_model(self):
        self.assertEqual([e["name"] for e in self.entries],
                         ["masked_softmax", "dot_product_attention", "multihead_attention",
                          "multihead_attention_packed", "kv_cache_attend", "kv_cache_step",
                          "additive", "concat", "bilinear", "multihead"])

    def test_python_generic_calls_match_the_typed_ones(self):
        a = self.attnscore
        _, x, _, _, want = self.cases["masked_softmax"]
        np.testing.assert_array_equal(bits(want[0]), bits(self.engine.masked_softmax(
            x["x"], x["valid_lens"])))
        _, x, _, _, want = self.cases["dot_product_attention"]
        typed = self.engine.dot_product_attention(x["queries"], x["keys"], x["values"],
                                                  x["valid_lens"], return_weights=True)
        for got, expect in zip(typed, want):
            np.testing.assert_array_equal(bits(got), bits(expect))
        _, x, _, _, want = self.cases["multihead_attention_packed"]
        typed = self.engine.multihead_attention_packed(
            x["queries"], x["keys"], x["values"], x["cu_seqlens_q"], x["cu_seqlens_k"],
            sinks=x["sinks"], alibi_slopes=x["alibi_slopes"])
        np.testing.assert_array_equal(bits(typed), bits(want[0]))
        _, x, _, p, want = self.cases["kv_cache_step"]
        cache = a.KvCache(p["batch"], p["capacity"], p["kv_heads"], p["key_dim"], p["value_dim"])
        cache.append(x["keys"], x["values"], counts=x["counts"])
        typed = cache.attend(self.engine, x["queries"], query_counts=x["query_counts"],
                             sinks=x["sinks"], alibi_slopes=x["alibi_slopes"])
        np.testing.assert_array_equal(bits(typed), bits(want[0]))
        _, x, w, _, want = self.cases["bilinear"]
        typed = a.BilinearAttention.from_state_dict(w)(self.engine, x["queries"], x["keys"],
                                                  x["values"], x["valid_lens"],
                                                  return_weights=True)
        for got, expect in zip(typed, want):
            np.testing.assert_array_equal(bits(got), bits(expect))

    def test_the_c_api_has_every_entry(self):
        lib = ctypes.CDLL(os.path.join(BUILD, "libattnscore.so"))
        lib.attnscore_catalogue_name.restype = ctypes.c_char_p
        lib.attnscore_status_message.restype = ctypes.c_char_p
        for f in ("attnscore_op_create", "attnscore_op_load", "attnscore_op_run",
                  "attnscore_engine_create"):
            getattr(lib, f).restype = ctypes.c_void_p
        names = [lib.attnscore_catalogue_name(i).decode()
                 for i in range(lib.attnscore_catalogue_size())]
        self.assertEqual(names, [e["name"] for e in self.entries])
        engine = ctypes.c_void_p()
        options = EngineOptions(1, 4, 0)
        self.assertIsNone(lib.attnscore_engine_create(ctypes.byref(options), ctypes.byref(engine)))

        def ok(status):
            if status:
                message = lib.attnscore_status_message(ctypes.c_void_p(status)).decode()
                lib.attnscore_status_free(ctypes.c_void_p(status))
                self.fail(message)

        for name, (entry, inputs, weights, params, want) in self.cases.items():
            with self.subTest(entry=name):
                op = ctypes.c_void_p()
                if weights:
                    path = os.path.join(self.dir, "models", name + ".safetensors").encode()
                    ok(lib.attnscore_op_load(path, None, 0, ctypes.byref(op)))
                else:
                    p = c_params(params)
                    ok(lib.attnscore_op_create(name.encode(), p, len(params), None, 0,
                                               ctypes.byref(op)))
                c_inputs = (NamedTensor * len(inputs))(*[named(k, v) for k, v in inputs.items()])
                got = [np.zeros_like(w) for w in want]
                names = [o["name"] for o in entry["outputs"]]
                c_outputs = (NamedTensor * len(got))(*[named(n, g) for n, g in zip(names, got)])
                ok(lib.attnscore_op_run(op, engine, c_inputs, len(inputs), None, 0, c_outputs,
                                        len(got)))
                lib.attnscore_op_destroy(op)
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(bits(g), bits(w))
        lib.attnscore_engine_destroy(engine)

    def cli(self, *args):
        return subprocess.run([os.path.join(BUILD, "bin", "attnscore"), *args],
                              capture_output=True, text=True)

    def test_the_cli_runs_and_benches_every_entry(self):
        words = {"masked_softmax": "softmax", "dot_product_attention": "dot"}
        for name, (entry, inputs, weights, params, want) in self.cases.items():
            word = words.get(name, name)
            with self.subTest(entry=name):
                flags = []
                for key, array in inputs.items():
                    path = os.path.join(self.dir, "%s_%s.npy" % (name, key))
                    np.save(path, array)
                    flags += ["--" + key.replace("_", "-"), path]
                if weights:
                    flags += ["--model", os.path.join(self.dir, "models", name + ".safetensors")]
                out, w = (os.path.join(self.dir, "%s_%s.npy" % (name, o)) for o in ("o", "w"))
                # The masked softmax's output is its weights: written again; a
                # packed batch gives no weights, and takes no --weights-out.
                packed = name in ("multihead_attention_packed", "kv_cache_step")
                weights_out = [] if packed else ["--weights-out", w]
                result = self.cli("run", word, *flags, "--out", out, *weights_out)
                self.assertEqual(result.returncode, 0, result.stderr)
                np.testing.assert_array_equal(bits(np.load(out)), bits(want[0]))
                if packed:
                    refused = self.cli("run", word, *flags, "--out", out, "--weights-out", w)
                    self.assertEqual(refused.returncode, 2, refused.stderr)
                    self.assertIn("--weights-out", refused.stderr)
                else:
                    np.testing.assert_array_equal(bits(np.load(w)), bits(want[-1]))
                help_text = self.cli("run", word, "--help").stdout
                self.assertIn("attnscore run " + word, help_text)
                result = self.cli("bench", word, "--batch", "2", "--queries", "2", "--keys", "4",
                                  "--repeat", "1", "--json")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("median_us", json.loads(result.stdout))

    def test_call_parameters_reach_every_front_end(self):
        """A call's parameters (scale, softcap and the window)
        through Python's Op, the typed Python call, the C op handle,
        `attnscore run` and, for a stateless entry, the server: one set of
        bits, not the defaults'."""
        a = self.attnscore
        scores = {"scale": 0.5, "softcap": 0.75}
        calls = {"multihead_attention": dict(scores, window_left=2, window_right=0),
                 "kv_cache_attend": dict(scores, window_left=2)}
        lib = ctypes.CDLL(os.path.join(BUILD, "libattnscore.so"))
        lib.attnscore_status_message.restype = ctypes.c_char_p
        for f in ("attnscore_op_create", "attnscore_op_run", "attnscore_engine_create"):
            getattr(lib, f).restype = ctypes.c_void_p
        engine = ctypes.c_void_p()
        self.assertIsNone(lib.attnscore_engine_create(ctypes.byref(EngineOptions(1, 4, 0)),
                                                      ctypes.byref(engine)))
        for name in ("multihead_attention", "kv_cache_attend"):
            entry, inputs, _, params, plain = self.cases[name]
            call = calls[name]
            with self.subTest(entry=name):
                # A cache's entry appends its keys: a fresh one for each call.
                want = a.Op(name, None, **params)(self.engine, return_weights=True, **inputs,
                                                  **call)
                self.assertFalse(np.array_equal(bits(want[0]), bits(plain[0])))
                q, k, v = inputs["queries"], inputs["keys"], inputs["values"]
                if name == "multihead_attention":
                    typed = self.engine.multihead_attention(
                        q, k, v, inputs.get("valid_lens"), return_weights=True, window=(2, 0),
                        sinks=inputs.get("sinks"), alibi_slopes=inputs.get("alibi_slopes"),
                        bias=inputs.get("attention_bias"), **scores)
                else:
                    cache = a.KvCache(params["batch"], params["capacity"], params["kv_heads"],
                                      params["key_dim"], params["value_dim"])
                    cache.append(k, v)
                    typed = cache.attend(self.engine, q, return_weights=True, window=(2, -1),
                                         sinks=inputs.get("sinks"),
                                         alibi_slopes=inputs.get("alibi_slopes"),
                                         bias=inputs.get("attention_bias"), **scores)
                for got, w in zip(typed, want):
                    np.testing.assert_array_equal(bits(got), bits(w))
                # The C op handle, the parameters as text.
                op = ctypes.c_void_p()
                p = c_params(params)
                self.assertIsNone(lib.attnscore_op_create(name.encode(), p, len(params), None,
                                                          0, ctypes.byref(op)))
                c_inputs = (NamedTensor * len(inputs))(*[named(n, x) for n, x in inputs.items()])
                got = [np.zeros_like(w) for w in want]
                outputs = [o["name"] for o in entry["outputs"]]
                c_outputs = (NamedTensor * len(got))(*[named(n, g) for n, g in zip(outputs, got)])
                status = lib.attnscore_op_run(op, engine, c_inputs, len(inputs), c_params(call),
                                              len(call), c_outputs, len(got))
                if status:
                    self.fail(lib.attnscore_status_message(ctypes.c_void_p(status)).decode())
                lib.attnscore_op_destroy(op)
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(bits(g), bits(w))
                # attnscore run NAME ... --scale 0.5 --softcap 0.75 (--window-left 2 ...)
                flags = []
                for key, array in inputs.items():
                    path = os.path.join(self.dir, "call_%s_%s.npy" % (name, key))
                    np.save(path, array)
                    flags += ["--" + key.replace("_", "-"), path]
                for key, value in params.items():
                    flags += ["--" + key.replace("_", "-"), str(value)]
                out = os.path.join(self.dir, "call_%s_out.npy" % name)
                for key, value in call.items():
                    flags += ["--" + key.replace("_", "-"), str(value)]
                result = self.cli("run", name, *flags, "--out", out)
                self.assertEqual(result.returncode, 0, result.stderr)
                np.testing.assert_array_equal(bits(np.load(out)), bits(want[0]))
                if entry["stateful"]:
                    continue
                from server_util import Server, infer_body, output_array  # noqa: E402
                with Server(os.path.join(BUILD, "bin", "attnscore-server")) as server:
                    body = infer_body(inputs, outputs)
                    body["parameters"] = call
                    status, _, answer = server.call("POST", "/v2/models/%s/infer" % name, body)
                    self.assertEqual(status, 200, answer)
                    for output, w in zip(outputs, want):
                        np.testing.assert_array_equal(bits(output_array(answer, output)),
                                                      bits(w))
        lib.attnscore_engine_destroy(engine)

    def test_the_server_serves_every_stateless_entry(self):
        from server_util import Server, infer_body, output_array  # noqa: E402
        with Server(os.path.join(BUILD, "bin", "attnscore-server"), "--models",
                    os.path.join(self.dir, "models")) as server:
            for name, (entry, inputs, weights, params, want) in self.cases.items():
                with self.subTest(entry=name):
                    status, _, meta = server.call("GET", "/v2/models/" + name)
                    if entry["stateful"]:
                        # A KV cache's state has no place in a stateless request.
                        self.assertEqual(status, 404, meta)
                        continue
                    self.assertEqual(status, 200, meta)
                    self.assertEqual(meta["parameters"]["kind"], name)
                    self.assertEqual([t["name"] for t in meta["inputs"]],
                                     [t["name"] for t in entry["inputs"]])
                    outputs = [o["name"] for o in entry["outputs"]]
                    status, _, answer = server.call("POST", "/v2/models/%s/infer" % name,
                                                    infer_body(inputs, outputs))
                    self.assertEqual(status, 200, answer)
                    for output, w in zip(outputs, want):
                        np.testing.assert_array_equal(bits(output_array(answer, output)),
                                                      bits(w))


if __name__ == "__main__":
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main()
