// attnscore.KvCache: a cache's appends and attention for NumPy arrays,
// plain (B, ...) and packed with a count per sequence.
#include "kv_cache.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "attnscore/attnscore.h"
#include "interrupt.h"
#include "options.h"

namespace attnscore::python {
namespace {

// A count per sequence: a 1-D array (or sequence) of integers, as int64.
TensorView<const int64_t> CountsView(const py::object& obj, const char* name, py::object* keep) {
  const py::module_ numpy = py::module_::import("numpy");
  py::array a = numpy.attr("asarray")(obj);
  const char kind = a.dtype().kind();
  if ((kind != 'i' && kind != 'u') || a.ndim() != 1) {
    throw py::type_error(std::string("KvCache: ") + name +
                         " must be (B,) integers, one per sequence; got " +
                         py::str(a.attr("dtype")).cast<std::string>() + " of shape " +
                         py::str(a.attr("shape")).cast<std::string>());
  }
  a = numpy.attr("ascontiguousarray")(a, py::arg("dtype") = numpy.attr("int64"));
  *keep = a;
  return TensorView<const int64_t>(static_cast<const int64_t*>(a.data()), {a.shape(0)});
}

// The cache's options from multihead_attention's (its causal is the cache's own).
KvCacheAttendOptions AttendOptionsOf(const MultiHeadOptions& multihead) {
  KvCacheAttendOptions options;
  options.scale = multihead.scale;
  options.softcap = multihead.softcap;
  options.window = multihead.window;
  options.sinks = multihead.sinks;
  options.alibi_slopes = multihead.alibi_slopes;
  options.bias = multihead.bias;
  options.mask = multihead.mask;
  return options;
}

}  // namespace

void BindKvCache(py::module_& m) {
  py::class_<KvCache, std::unique_ptr<KvCache>>(
      m, "KvCache",
      "KvCache(batch, capacity, kv_heads, key_dim, value_dim, precision='fp32', "
      "block_positions=0, blocks=0): keys and values of B sequences for decoding "
      "(docs/semantics.md section 5.3), held as fp32, rounded once to bf16, or as int8 "
      "codes with their scales; with "
      "block_positions and blocks, the sequences share a pool of that many blocks.")
      .def(py::init([](int64_t batch, int64_t capacity, int64_t kv_heads, int64_t key_dim,
                       int64_t value_dim, const std::string& precision, int64_t block_positions,
                       int64_t blocks) {
             KvCacheShape shape;
             shape.batch = batch, shape.capacity = capacity, shape.kv_heads = kv_heads;
             shape.key_dim = key_dim, shape.value_dim = value_dim;
             shape.block_positions = block_positions, shape.blocks = blocks;
             if (!ParsePrecision(precision, &shape.precision)) {
               throw py::value_error("KvCache: precision is '" + precision +
                                     "'; want 'fp32', 'bf16' or 'int8'");
             }
             std::unique_ptr<KvCache> cache;
             ThrowIfError(KvCache::Create(shape, &cache));
             return cache;
           }),
           py::arg("batch"), py::arg("capacity"), py::arg("kv_heads"), py::arg("key_dim"),
           py::arg("value_dim"), py::arg("precision") = "fp32", py::arg("block_positions") = 0,
           py::arg("blocks") = 0)
      .def_property_readonly(
          "precision",
          [](const KvCache& cache) { return std::string(PrecisionName(cache.shape().precision)); },
          "How keys and values are held: 'fp32', 'bf16' or 'int8'.")
      .def("length", &KvCache::length, py::arg("sequence"),
           "Positions the sequence holds (0 for one out of range).")
      .def("blocks_in_use", &KvCache::blocks_in_use,
           "The pool's blocks the sequences hold (0 without a pool).")
      .def_static(
          "block_positions_multiple",
          [](int64_t key_dim, int64_t value_dim, const std::string& precision) {
            Precision p = Precision::kFp32;
            if (!ParsePrecision(precision, &p)) {
              throw py::value_error("KvCache.block_positions_multiple: precision is '" + precision +
                                    "'; want 'fp32', 'bf16' or 'int8'");
            }
            return KvCache::BlockPositionsMultiple(key_dim, value_dim, p);
          },
          py::arg("key_dim"), py::arg("value_dim"), py::arg("precision") = "fp32",
          "The multiple a pool's block_positions must be: the fewest positions whose "
          "keys and values, in `precision`, are whole pages of this machine (0 where a dim "
          "is below 1).")
      .def(
          "append",
          [](KvCache& cache, const py::object& keys, const py::object& values,
             const py::object& counts) {
            py::object k_keep, v_keep, counts_keep;
            const ConstTensor k = InputView(keys, "keys", &k_keep);
            const ConstTensor v = InputView(values, "values", &v_keep);
            if (counts.is_none()) {
              ThrowIfError(cache.Append(k, v));
              return;
            }
            const TensorView<const int64_t> per = CountsView(counts, "counts", &counts_keep);
            ThrowIfError(cache.AppendPacked(k, v, per));
          },
          py::arg("keys"), py::arg("values"), py::arg("counts") = py::none(),
          "Appends keys (B, T, Hkv, D) and values (B, T, Hkv, Dv) to every sequence; "
          "with counts (B,) integers, packed keys (T, Hkv, D) and values (T, Hkv, Dv), "
          "sequence b taking the next counts[b] rows (T = sum(counts); 0: none). "
          "Nothing is appended when it fails.")
      .def(
          "append_to",
          [](KvCache& cache, int64_t sequence, const py::object& keys, const py::object& values) {
            py::object k_keep, v_keep;
            const ConstTensor k = InputView(keys, "keys", &k_keep);
            const ConstTensor v = InputView(values, "values", &v_keep);
            ThrowIfError(cache.AppendTo(sequence, k, v));
          },
          py::arg("sequence"), py::arg("keys"), py::arg("values"),
          "Appends keys (T, Hkv, D) and values (T, Hkv, Dv) to one sequence.")
      .def(
          "clear", [](KvCache& cache, int64_t sequence) { ThrowIfError(cache.Clear(sequence)); },
          py::arg("sequence"))
      .def(
          "attend",
          [](const KvCache& cache, const Engine& engine, const py::object& q,
             const py::object& query_counts, bool return_weights, float scale,
             const py::object& window, const py::object& alibi_slopes, const py::object& softcap,
             const py::object& sinks, const py::object& bias) -> py::object {
            if (py::isinstance<py::bool_>(query_counts)) {
              throw py::type_error(
                  "KvCache.attend: query_counts is None or (B,) integers, got a bool; pass "
                  "return_weights= by name");
            }
            py::object q_keep, counts_keep, out_array, weights_array;
            const ConstTensor qv = InputView(q, "q", &q_keep);
            OptionArrays keep;
            const KvCacheAttendOptions options = AttendOptionsOf(
                OptionsOf("none", scale, window, alibi_slopes, softcap, sinks, bias, &keep));
            const int64_t value_dim = cache.shape().value_dim;
            if (!query_counts.is_none()) {
              const TensorView<const int64_t> counts =
                  CountsView(query_counts, "query_counts", &counts_keep);
              if (return_weights) {
                throw py::value_error(
                    "KvCache.attend: packed queries return no weights (each sequence's are "
                    "(Hq, N_b, L_b)); attend without query_counts for them");
              }
              if (qv.rank != 3) {
                throw py::value_error(
                    "KvCache.attend: with query_counts, q must have rank 3 "
                    "(T, Hq, D), the sequences' queries packed");
              }
              const std::vector<int64_t> dims{qv.dims[0], qv.dims[1], value_dim};
              const Tensor out = NewOutput(dims, &out_array);
              ThrowIfError(Interruptible(Elements({&dims})).Run([&] {
                return cache.AttendPacked(engine, qv, counts, options, out);
              }));
              return out_array;
            }
            if (qv.rank != 4) {
              throw py::value_error("KvCache.attend: q must have rank 4 (B, N, Hq, D)");
            }
            int64_t longest = 0;
            for (int64_t b = 0; b < cache.shape().batch; ++b) {
              longest = std::max(longest, cache.length(b));
            }
            const Tensor out =
                NewOutput({qv.dims[0], qv.dims[1], qv.dims[2], value_dim}, &out_array);
            const std::vector<int64_t> scores{qv.dims[0], qv.dims[2], qv.dims[1], longest};
            Tensor weights;
            if (return_weights) weights = NewOutput(scores, &weights_array);
            ThrowIfError(Interruptible(Elements({&scores})).Run([&] {
              return cache.Attend(engine, qv, options, out, weights);
            }));
            if (return_weights) return py::make_tuple(out_array, weights_array);
            return out_array;
          },
          py::arg("engine"), py::arg("q"), py::arg("query_counts") = py::none(),
          py::arg("return_weights") = false, py::arg("scale") = 0.0f,
          py::arg("window") = py::none(), py::arg("alibi_slopes") = py::none(),
          py::arg("softcap") = 0.0, py::arg("sinks") = py::none(), py::arg("bias") = py::none(),
          R"(attend(engine, q, query_counts=None, return_weights=False, scale=0.0, window=None, alibi_slopes=None, softcap=0.0, sinks=None, bias=None)

q (B, N, Hq, D): each sequence's N newest positions (appended first), query
i of sequence b at position p = L_b - N + i attending causally to its keys.
With query_counts (B,) integers, q is packed (T, Hq, D): sequence b's are
the next query_counts[b] rows, 0 leaving it idle, and out is (T, Hq, Dv).
The keywords as multihead_attention's: scale (0: 1/sqrt(D)); window (left,
right), keys p - left..p (the cache is causal); alibi_slopes (Hq,);
softcap; sinks (Hq,); bias (B, Hq, N, L) float32 or bool (True keeps), L
the longest sequence's length, each dim that or 1 (not with query_counts).
Returns out (B, N, Hq, Dv), or (out, weights (B, Hq, N, L)).)")
      .def("__repr__", [](const KvCache& c) {
        const KvCacheShape& s = c.shape();
        return "attnscore.KvCache(batch=" + std::to_string(s.batch) +
               ", capacity=" + std::to_string(s.capacity) +
               ", kv_heads=" + std::to_string(s.kv_heads) +
               ", key_dim=" + std::to_string(s.key_dim) +
               ", value_dim=" + std::to_string(s.value_dim) +
               (s.precision != Precision::kFp32
                    ? ", precision='" + std::string(PrecisionName(s.precision)) + "'"
                    : std::string()) +
               (s.block_positions > 0 ? ", block_positions=" + std::to_string(s.block_positions) +
                                            ", blocks=" + std::to_string(s.blocks)
                                      : std::string()) +
               ")";
      });
}

}  // namespace attnscore::python
