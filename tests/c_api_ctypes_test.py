#!/usr/bin/python3
"""The C API from Python's ctypes, as an FFI user would call it: no
extension built, only libattnscore.so loaded. d2l's dot-product toy gives
its known output; a bad call gives a status with the message, not a crash.

Run: /usr/bin/python3 tests/c_api_ctypes_test.py LIBRARY [-v]
"""

import ctypes
import sys
import unittest

LIBRARY = None
MAX_RANK = 4


class TensorView(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_float)), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * MAX_RANK), ("strides", ctypes.c_int64 * MAX_RANK)]


class ValidLens(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("type", ctypes.c_int), ("data", ctypes.c_void_p),
                ("dims", ctypes.c_int64 * 2)]


class EngineOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int32), ("isa", ctypes.c_int), ("precision", ctypes.c_int)]


LENS_PER_BATCH, LENS_INT64 = 1, 1
INVALID_ARGUMENT = 1


def view(buffer, dims):
    """A dense C-order view of a ctypes float array."""
    strides = [1] * len(dims)
    for d in range(len(dims) - 2, -1, -1):
        strides[d] = strides[d + 1] * dims[d + 1]
    pad = [0] * (MAX_RANK - len(dims))
    return TensorView(ctypes.cast(buffer, ctypes.POINTER(ctypes.c_float)), len(dims),
                      (ctypes.c_int64 * MAX_RANK)(*(list(dims) + pad)),
                      (ctypes.c_int64 * MAX_RANK)(*(strides + pad)))


class CApiFromCtypes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lib = ctypes.CDLL(LIBRARY)
        lib.attnscore_version.restype = ctypes.c_char_p
        lib.attnscore_default_engine_options.restype = EngineOptions
        lib.attnscore_engine_create.restype = ctypes.c_void_p
        lib.attnscore_engine_create.argtypes = [ctypes.POINTER(EngineOptions),
                                                ctypes.POINTER(ctypes.c_void_p)]
        lib.attnscore_engine_destroy.argtypes = [ctypes.c_void_p]
        lib.attnscore_dot_product_attention.restype = ctypes.c_void_p
        lib.attnscore_dot_product_attention.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 6
        lib.attnscore_status_get_code.restype = ctypes.c_int
        lib.attnscore_status_get_code.argtypes = [ctypes.c_void_p]
        lib.attnscore_status_message.restype = ctypes.c_char_p
        lib.attnscore_status_message.argtypes = [ctypes.c_void_p]
        lib.attnscore_status_free.argtypes = [ctypes.c_void_p]
        cls.lib = lib
        options = lib.attnscore_default_engine_options()
        cls.engine = ctypes.c_void_p()
        status = lib.attnscore_engine_create(ctypes.byref(options), ctypes.byref(cls.engine))
        assert status is None, lib.attnscore_status_message(status)

    @classmethod
    def tearDownClass(cls):
        cls.lib.attnscore_engine_destroy(cls.engine)

    def call(self, values_rows):
        q = (ctypes.c_float * 4)(*([0.5] * 4))
        k = (ctypes.c_float * 40)(*([1.0] * 40))
        v = (ctypes.c_float * (2 * values_rows * 4))(*[float(i % 40) for i in range(2 * values_rows * 4)])
        out = (ctypes.c_float * 8)(*([-1.0] * 8))
        lens_data = (ctypes.c_int64 * 2)(2, 6)
        lens = ValidLens(LENS_PER_BATCH, LENS_INT64, ctypes.cast(lens_data, ctypes.c_void_p),
                         (ctypes.c_int64 * 2)(2, 0))
        qv, kv, vv = view(q, (2, 1, 2)), view(k, (2, 10, 2)), view(v, (2, values_rows, 4))
        ov = view(out, (2, 1, 4))
        status = self.lib.attnscore_dot_product_attention(
            self.engine, ctypes.byref(qv), ctypes.byref(kv), ctypes.byref(vv), ctypes.byref(lens),
            ctypes.byref(ov), None)
        return status, list(out)

    def test_version(self):
        self.assertRegex(self.lib.attnscore_version().decode(), r"^\d+\.\d+\.\d+$")

    def test_toy(self):
        status, out = self.call(10)
        self.assertIsNone(status)
        for got, want in zip(out, [2, 3, 4, 5, 10, 11, 12, 13]):
            self.assertAlmostEqual(got, want, places=5)

    def test_bad_call_is_a_status(self):
        status, out = self.call(9)
        self.assertIsNotNone(status)
        try:
            self.assertEqual(self.lib.attnscore_status_get_code(status), INVALID_ARGUMENT)
            message = self.lib.attnscore_status_message(status).decode()
            self.assertIn("values has shape (2, 9, 4)", message)
        finally:
            self.lib.attnscore_status_free(status)
        self.assertEqual(out, [-1.0] * 8)  # nothing written


if __name__ == "__main__":
    LIBRARY = sys.argv.pop(1)
    unittest.main()
