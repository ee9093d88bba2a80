// attnscore._attnscore: the engine and the models for NumPy arrays. The
// pure-Python package (python/attnscore/__init__.py) re-exports it and adds
// the models' from_state_dict.
//
// Every call converts its arguments first (TypeError for a wrong type),
// then runs the op's Check (ValueError with the engine's message) before it
// allocates any output, then runs the op with the GIL released, holding
// references to every array it reads or writes until the op returns.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "attnscore/attnscore.h"
#include "catalogue.h"
#include "interrupt.h"
#include "kv_cache.h"
#include "options.h"

namespace attnscore::python {
namespace {

// The dims of a call's outputs, as its check reports them.
struct Dims {
  std::vector<int64_t> out, weights;
};

// One attention op on NumPy arrays: q, k, v, the valid lengths and any
// outputs given are converted (type errors first), `check` refuses bad
// input before the missing outputs are allocated, and `run` computes with
// the GIL released. Returns out, or (out, weights) when the weights were
// asked for (return_weights, or a weights_out given).
template <typename CheckFn, typename RunFn>
py::object RunAttention(const py::object& q, const py::object& k, const py::object& v,
                        const py::object& valid_lens, bool return_weights,
                        const py::object& out, const py::object& weights_out, CheckFn check,
                        RunFn run) {
  py::object q_keep, k_keep, v_keep, lens_keep, out_array, weights_array;
  const ConstTensor q_view = InputView(q, "q", &q_keep);
  const ConstTensor k_view = InputView(k, "k", &k_keep);
  const ConstTensor v_view = InputView(v, "v", &v_keep);
  const ValidLens lens = LensView(valid_lens, &lens_keep);
  Tensor out_view, weights_view;
  if (!out.is_none()) out_view = OutputView(out, "out", &out_array);
  if (!weights_out.is_none()) weights_view = OutputView(weights_out, "weights_out", &weights_array);
  const bool want_weights = return_weights || !weights_out.is_none();

  Dims dims;
  ThrowIfError(check(q_view, k_view, v_view, lens, &dims));
  Interruptible interruptible(Elements({&dims.out, &dims.weights}));
  OutputSlot out_slot(out, dims.out, &out_view, &out_array, interruptible.active());
  OutputSlot weights_slot(want_weights ? weights_out : py::none(), dims.weights, &weights_view,
                          &weights_array, interruptible.active(), want_weights);
  RestoringOnError({&out_slot, &weights_slot}, [&] {
    ThrowIfError(interruptible.Run(
        [&] { return run(q_view, k_view, v_view, lens, out_view, weights_view); }));
  });
  if (want_weights) return py::make_tuple(out_array, weights_array);
  return out_array;
}

// A check that reports OutputShapes, as one that reports Dims.
template <typename Check>
Status ThreeDims(Check check, Dims* dims) {
  OutputShapes shapes;
  ATTNSCORE_RETURN_IF_ERROR(check(&shapes));
  dims->out.assign(shapes.out.begin(), shapes.out.end());
  dims->weights.assign(shapes.attention_weights.begin(), shapes.attention_weights.end());
  return Status::Ok();
}

// model(engine, q, k, v, ...): RunAttention with the model's Check and
// Forward on `engine`; the same for every model of the (B, N, M) ops.
template <typename Model>
py::object CallModel(const Model& model, const Engine& engine, const py::object& q,
                     const py::object& k, const py::object& v, const py::object& valid_lens,
                     bool return_weights, const py::object& out, const py::object& weights_out) {
  return RunAttention(
      q, k, v, valid_lens, return_weights, out, weights_out,
      [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens, Dims* dims) {
        return ThreeDims([&](OutputShapes* s) { return model.Check(qv, kv, vv, lens, s); }, dims);
      },
      [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens, Tensor o,
          Tensor w) { return model.Forward(engine, qv, kv, vv, lens, o, w); });
}

// A path argument (str, bytes or os.PathLike) as the bytes the OS takes.
std::string PathArgument(const py::object& path) {
  std::string bytes = py::module_::import("os").attr("fsencode")(path).cast<std::string>();
  if (bytes.find('\0') != std::string::npos) throw py::value_error("path has an embedded null byte");
  return bytes;
}

std::unique_ptr<Engine> MakeEngine(int threads, const std::string& isa,
                                   const std::string& precision) {
  EngineOptions options;
  options.threads = threads;
  if (!ParseIsa(isa, &options.isa)) {
    throw py::value_error("Engine: isa is '" + isa + "'; want scalar, sse4, avx2, avx512 or best");
  }
  if (!ParsePrecision(precision, &options.precision) || options.precision == Precision::kInt8) {
    throw py::value_error("Engine: precision is '" + precision + "'; want fp32 or bf16");
  }
  std::unique_ptr<Engine> engine;
  Status status;
  {
    py::gil_scoped_release release;  // starts the engine's threads
    status = Engine::Create(options, &engine);
  }
  ThrowIfError(status);
  return engine;
}

constexpr const char* kModuleDoc = R"(attnscore's engine and models for NumPy arrays.

Use the package, ``import attnscore``: it re-exports these classes and adds
each model's ``from_state_dict``.)";

constexpr const char* kEngineDoc = R"(Engine(threads=1, isa="best", precision="fp32")

Runs attnscore's ops on float32 NumPy arrays. ``threads`` is the number of
threads per call; ``isa`` caps the instruction set for the whole process
("scalar", "sse4", "avx2", "avx512", "best"; the first engine fixes it);
``precision`` is "fp32" or "bf16" (the dot product's matrix products).

Inputs are float32 arrays of any strides, read in place when their strides
are non-negative multiples of 4 bytes and their data is aligned; otherwise
(negative strides, unaligned data) a C-order copy is read. Anything else is
a TypeError. Valid lengths are None or an int32 / int64 array of shape (B,)
or (B, N). Outputs are allocated unless given (``out=``, ``weights_out=``:
writable float32 arrays of the right shape, written in place). A refused
call raises ValueError with the engine's message and writes nothing. The
GIL is released while an op runs; an Engine may serve many threads.)";

constexpr const char* kMaskedSoftmaxDoc = R"(masked_softmax(x, valid_lens=None, out=None) -> y

Softmax over the last axis of x (B, N, M); each row uses only its first L
scores, the rest get weight 0 (docs/semantics.md section 1). out=x computes
in place.)";

constexpr const char* kDotDoc = R"(dot_product_attention(q, k, v, valid_lens=None, return_weights=False, out=None, weights_out=None)

softmax(q kᵀ / √D, masked) v, with q (B, N, D), k (B, M, D), v (B, M, Dv).
Returns out (B, N, Dv), or (out, weights) with weights (B, N, M) when
return_weights is true or weights_out is given.)";

constexpr const char* kMultiHeadDoc =
    R"(multihead_attention(q, k, v, valid_lens=None, causal="none", scale=0.0, window=None, alibi_slopes=None, softcap=0.0, sinks=None, bias=None, return_weights=False, out=None, weights_out=None)

Multi-head attention (docs/semantics.md section 5): q (B, N, Hq, D),
k (B, M, Hkv, D), v (B, M, Hkv, Dv) with Hq a multiple of Hkv (grouped-query
and multi-query K/V); heads-first arrays pass as transposed views
(x.transpose(0, 2, 1, 3)). causal: "none", "top-left" (query i sees keys
0..i) or "bottom-right" (keys 0..M - N + i). scale 0 means 1/√D. window
(left, right): query i at p = i + M - N sees only keys p - left..p + right
(-1: that side unbounded; None: every key); a query it leaves no key gets
weights 0 and output 0. softcap
c > 0 makes each scaled score s c·tanh(s / c) before the masks and the
softmax (0: none). sinks (Hq,): a logit per query head in each of its
softmaxes' denominators (attention sinks), so its weights sum to less than 1.
alibi_slopes (Hq,): head h's score of key j for the query at p loses
slope_h·|p - j| (ALiBi). bias: float32 added to the scores (-inf masks a
key), or a bool mask (True keeps a key): rank 4, (B, Hq, N, M) with each dim
that or 1 (np.broadcast_to views pass in place).
Returns out (B, N, Hq, Dv), or (out, weights) with weights (B, Hq, N, M).)";

constexpr const char* kPackedDoc =
    R"(multihead_attention_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, causal="none", scale=0.0, window=None, alibi_slopes=None, softcap=0.0, sinks=None, bias=None, return_weights=False, out=None, weights_out=None)

A packed batch of S sequences of their own lengths (docs/semantics.md section
5.8), as FlashAttention's varlen call takes them: q (Tq, Hq, D), k (Tk, Hkv,
D), v (Tk, Hkv, Dv); sequence s is rows cu_seqlens_q[s]..cu_seqlens_q[s+1]-1
of q and rows cu_seqlens_k[s].. of k and v (offsets int32 or int64, S + 1 of
them, from 0), each its own multihead_attention call with these keywords.
No bias and no weights (each sequence's have their own shape). Returns out
(Tq, Hq, Dv).)";

constexpr const char* kCallDoc = R"(__call__(engine, q, k, v, valid_lens=None, return_weights=False, out=None, weights_out=None)

Runs the model on ``engine``. Returns out, or (out, weights) when
return_weights is true or weights_out is given.)";

}  // namespace
}  // namespace attnscore::python

PYBIND11_MODULE(_attnscore, m) {
  using namespace attnscore;          // NOLINT(google-build-using-namespace)
  using namespace attnscore::python;  // NOLINT(google-build-using-namespace)
  m.doc() = kModuleDoc;
  m.attr("__version__") = Version();
  InitInterrupts();
  BindCatalogue(m);

  py::class_<Engine, std::unique_ptr<Engine>>(m, "Engine", kEngineDoc)
      .def(py::init(&MakeEngine), py::arg("threads") = 1, py::arg("isa") = "best",
           py::arg("precision") = "fp32")
      .def_property_readonly(
          "threads", [](const Engine& e) { return e.options().threads; }, "Threads per call.")
      .def_property_readonly(
          "isa", [](const Engine& e) { return std::string(IsaName(e.options().isa)); },
          "The ISA cap in force (after $ATTNSCORE_ISA).")
      .def_property_readonly(
          "precision",
          [](const Engine& e) { return std::string(PrecisionName(e.options().precision)); },
          "\"fp32\" or \"bf16\".")
      .def("describe", &Engine::Describe,
           "Runtime facts, one per line: Highway targets, oneDNN version and ISA, matmuls made.")
      .def(
          "masked_softmax",
          [](const Engine& engine, const py::object& x, const py::object& valid_lens,
             const py::object& out) -> py::object {
            py::object x_keep, lens_keep, y_array;
            const ConstTensor x_view = InputView(x, "x", &x_keep);
            const ValidLens lens = LensView(valid_lens, &lens_keep);
            Tensor y_view;
            if (!out.is_none()) y_view = OutputView(out, "out", &y_array);
            OutputShapes shapes;
            ThrowIfError(engine.CheckMaskedSoftmax(x_view, lens, &shapes));
            const std::vector<int64_t> y_dims(shapes.out.begin(), shapes.out.end());
            Interruptible interruptible(Elements({&y_dims}));
            OutputSlot y_slot(out, y_dims, &y_view, &y_array, interruptible.active());
            RestoringOnError({&y_slot}, [&] {
              ThrowIfError(
                  interruptible.Run([&] { return engine.MaskedSoftmax(x_view, lens, y_view); }));
            });
            return y_array;
          },
          py::arg("x"), py::arg("valid_lens") = py::none(), py::arg("out") = py::none(),
          kMaskedSoftmaxDoc)
      .def(
          "dot_product_attention",
          [](const Engine& engine, const py::object& q, const py::object& k, const py::object& v,
             const py::object& valid_lens, bool return_weights, const py::object& out,
             const py::object& weights_out) {
            return RunAttention(
                q, k, v, valid_lens, return_weights, out, weights_out,
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens,
                    Dims* dims) {
                  return ThreeDims(
                      [&](OutputShapes* s) {
                        return engine.CheckDotProductAttention(qv, kv, vv, lens, s);
                      },
                      dims);
                },
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens,
                    Tensor o, Tensor w) {
                  return engine.DotProductAttention(qv, kv, vv, lens, o, w);
                });
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("valid_lens") = py::none(),
          py::arg("return_weights") = false, py::arg("out") = py::none(),
          py::arg("weights_out") = py::none(), kDotDoc)
      .def(
          "multihead_attention",
          [](const Engine& engine, const py::object& q, const py::object& k, const py::object& v,
             const py::object& valid_lens, const std::string& causal, float scale,
             const py::object& window, const py::object& alibi_slopes, const py::object& softcap,
             const py::object& sinks, const py::object& bias, bool return_weights,
             const py::object& out, const py::object& weights_out) {
            OptionArrays keep;
            const MultiHeadOptions options =
                OptionsOf(causal, scale, window, alibi_slopes, softcap, sinks, bias, &keep);
            return RunAttention(
                q, k, v, valid_lens, return_weights, out, weights_out,
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens,
                    Dims* dims) {
                  MultiHeadShapes shapes;
                  ATTNSCORE_RETURN_IF_ERROR(
                      engine.CheckMultiHeadAttention(qv, kv, vv, lens, options, &shapes));
                  dims->out.assign(shapes.out.begin(), shapes.out.end());
                  dims->weights.assign(shapes.attention_weights.begin(),
                                       shapes.attention_weights.end());
                  return Status::Ok();
                },
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens,
                    Tensor o, Tensor w) {
                  return engine.MultiHeadAttention(qv, kv, vv, lens, options, o, w);
                });
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("valid_lens") = py::none(),
          py::arg("causal") = "none", py::arg("scale") = 0.0f, py::arg("window") = py::none(),
          py::arg("alibi_slopes") = py::none(), py::arg("softcap") = 0.0,
          py::arg("sinks") = py::none(), py::arg("bias") = py::none(),
          py::arg("return_weights") = false, py::arg("out") = py::none(),
          py::arg("weights_out") = py::none(), kMultiHeadDoc)
      .def(
          "multihead_attention_packed",
          [](const Engine& engine, const py::object& q, const py::object& k, const py::object& v,
             const py::object& cu_seqlens_q, const py::object& cu_seqlens_k,
             const std::string& causal, float scale, const py::object& window,
             const py::object& alibi_slopes, const py::object& softcap, const py::object& sinks,
             const py::object& bias, bool return_weights, const py::object& out,
             const py::object& weights_out) {
            if (!bias.is_none()) {
              throw py::value_error(
                  "multihead_attention_packed: bias is shaped (B, Hq, N, M) for one batch; a "
                  "packed call takes none");
            }
            if (return_weights || !weights_out.is_none()) {
              throw py::value_error(
                  "multihead_attention_packed returns no weights (each sequence's are its own "
                  "(Hq, N_s, M_s)); call multihead_attention on a sequence for them");
            }
            OptionArrays keep;
            const MultiHeadOptions options =
                OptionsOf(causal, scale, window, alibi_slopes, softcap, sinks, bias, &keep);
            py::object q_keep_offsets, k_keep_offsets;
            const SequenceOffsets cu_q = OffsetsView(cu_seqlens_q, "cu_seqlens_q", &q_keep_offsets);
            const SequenceOffsets cu_k = OffsetsView(cu_seqlens_k, "cu_seqlens_k", &k_keep_offsets);
            return RunAttention(
                q, k, v, py::none(), false, out, py::none(),
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens&, Dims* dims) {
                  if (qv.rank != 3 || vv.rank != 3) {  // the op names what is wrong
                    return engine.MultiHeadAttentionPacked(qv, kv, vv, cu_q, cu_k, options,
                                                           Tensor());
                  }
                  dims->out = {qv.dims[0], qv.dims[1], vv.dims[2]};
                  return Status::Ok();
                },
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens&, Tensor o,
                    Tensor) {
                  return engine.MultiHeadAttentionPacked(qv, kv, vv, cu_q, cu_k, options, o);
                });
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens_q"),
          py::arg("cu_seqlens_k"), py::arg("causal") = "none", py::arg("scale") = 0.0f,
          py::arg("window") = py::none(), py::arg("alibi_slopes") = py::none(),
          py::arg("softcap") = 0.0, py::arg("sinks") = py::none(), py::arg("bias") = py::none(),
          py::arg("return_weights") = false, py::arg("out") = py::none(),
          py::arg("weights_out") = py::none(), kPackedDoc)
      .def("__repr__", [](const Engine& e) {
        return "attnscore.Engine(threads=" + std::to_string(e.options().threads) + ", isa='" +
               IsaName(e.options().isa) + "', precision='" +
               PrecisionName(e.options().precision) + "')";
      });

  py::class_<AdditiveAttention, std::unique_ptr<AdditiveAttention>>(
      m, "AdditiveAttention",
      "d2l's AdditiveAttention (docs/semantics.md section 3). Make one with "
      "AdditiveAttention.from_state_dict(sd) or AdditiveAttention.load(path).")
      .def_static(
          "_from_arrays",
          [](const py::object& w_q, const py::object& w_k, const py::object& w_v) {
            py::object q_keep, k_keep, v_keep;
            const ConstTensor q = InputView(w_q, "W_q.weight", &q_keep);
            const ConstTensor k = InputView(w_k, "W_k.weight", &k_keep);
            const ConstTensor v = InputView(w_v, "w_v.weight", &v_keep);
            std::unique_ptr<AdditiveAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = AdditiveAttention::Create(q, k, v, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("W_q"), py::arg("W_k"), py::arg("w_v"))
      .def_static(
          "load",
          [](const py::object& path) {
            const std::string file = PathArgument(path);
            std::unique_ptr<AdditiveAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = AdditiveAttention::Load(file, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("path"),
          "A model from a .safetensors state_dict (W_q.weight, W_k.weight, w_v.weight).")
      .def_property_readonly("query_size", &AdditiveAttention::query_size, "Dq")
      .def_property_readonly("key_size", &AdditiveAttention::key_size, "Dk")
      .def_property_readonly("hidden_size", &AdditiveAttention::hidden_size, "H")
      .def(
          "__call__",
          &CallModel<AdditiveAttention>,
          py::arg("engine"), py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("valid_lens") = py::none(), py::arg("return_weights") = false,
          py::arg("out") = py::none(), py::arg("weights_out") = py::none(), kCallDoc)
      .def("__repr__", [](const AdditiveAttention& a) {
        return "attnscore.AdditiveAttention(query_size=" + std::to_string(a.query_size()) +
               ", key_size=" + std::to_string(a.key_size()) +
               ", hidden_size=" + std::to_string(a.hidden_size()) + ")";
      });

  py::class_<ConcatAttention, std::unique_ptr<ConcatAttention>>(
      m, "ConcatAttention",
      "The seq2seq tutorial's Attn (docs/semantics.md section 4). Make one with "
      "ConcatAttention.from_state_dict(sd, query_size) or ConcatAttention.load(path, query_size).")
      .def_static(
          "_from_arrays",
          [](int64_t query_size, const py::object& attn_weight, const py::object& attn_bias,
             const py::object& combine_weight, const py::object& combine_bias) {
            py::object keep[4];
            const ConstTensor aw = InputView(attn_weight, "attn.weight", &keep[0]);
            const ConstTensor ab = InputView(attn_bias, "attn.bias", &keep[1]);
            const ConstTensor cw = InputView(combine_weight, "attn_combine.weight", &keep[2]);
            const ConstTensor cb = InputView(combine_bias, "attn_combine.bias", &keep[3]);
            std::unique_ptr<ConcatAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = ConcatAttention::Create(query_size, aw, ab, cw, cb, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("query_size"), py::arg("attn_weight"), py::arg("attn_bias"),
          py::arg("combine_weight"), py::arg("combine_bias"))
      .def_static(
          "load",
          [](const py::object& path, int64_t query_size) {
            const std::string file = PathArgument(path);
            std::unique_ptr<ConcatAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = ConcatAttention::Load(file, query_size, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("path"), py::arg("query_size"),
          "A model from a .safetensors state_dict (attn.weight, attn.bias, "
          "attn_combine.weight, attn_combine.bias); query_size is Dq.")
      .def_property_readonly("query_size", &ConcatAttention::query_size, "Dq")
      .def_property_readonly("key_size", &ConcatAttention::key_size, "Dk")
      .def_property_readonly("value_rows", &ConcatAttention::value_rows, "M, the rows of V")
      .def_property_readonly("value_size", &ConcatAttention::value_size, "Dv")
      .def_property_readonly("output_size", &ConcatAttention::output_size, "O")
      .def(
          "__call__",
          &CallModel<ConcatAttention>,
          py::arg("engine"), py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("valid_lens") = py::none(), py::arg("return_weights") = false,
          py::arg("out") = py::none(), py::arg("weights_out") = py::none(), kCallDoc)
      .def("__repr__", [](const ConcatAttention& c) {
        return "attnscore.ConcatAttention(query_size=" + std::to_string(c.query_size()) +
               ", key_size=" + std::to_string(c.key_size()) +
               ", value_rows=" + std::to_string(c.value_rows()) +
               ", value_size=" + std::to_string(c.value_size()) +
               ", output_size=" + std::to_string(c.output_size()) + ")";
      });

  py::class_<BilinearAttention, std::unique_ptr<BilinearAttention>>(
      m, "BilinearAttention",
      "The bilinear score qᵀ W k, the chapter's exercise (docs/semantics.md section 6). Make "
      "one with BilinearAttention.from_state_dict(sd) or BilinearAttention.load(path).")
      .def_static(
          "_from_arrays",
          [](const py::object& w) {
            py::object keep;
            const ConstTensor view = InputView(w, "W.weight", &keep);
            std::unique_ptr<BilinearAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = BilinearAttention::Create(view, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("W"))
      .def_static(
          "load",
          [](const py::object& path) {
            const std::string file = PathArgument(path);
            std::unique_ptr<BilinearAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = BilinearAttention::Load(file, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("path"), "A model from a .safetensors state_dict (W.weight (Dq, Dk)).")
      .def_property_readonly("query_size", &BilinearAttention::query_size, "Dq")
      .def_property_readonly("key_size", &BilinearAttention::key_size, "Dk")
      .def("__call__", &CallModel<BilinearAttention>, py::arg("engine"), py::arg("q"),
           py::arg("k"), py::arg("v"), py::arg("valid_lens") = py::none(),
           py::arg("return_weights") = false, py::arg("out") = py::none(),
           py::arg("weights_out") = py::none(), kCallDoc)
      .def("__repr__", [](const BilinearAttention& b) {
        return "attnscore.BilinearAttention(query_size=" + std::to_string(b.query_size()) +
               ", key_size=" + std::to_string(b.key_size()) + ")";
      });

  py::class_<MultiHeadAttention, std::unique_ptr<MultiHeadAttention>>(
      m, "MultiHeadAttention",
      "d2l's MultiHeadAttention (docs/semantics.md section 5.2). Make one with "
      "MultiHeadAttention.from_state_dict(sd, num_heads) or MultiHeadAttention.load(path, "
      "num_heads).")
      .def_static(
          "_from_arrays",
          [](int64_t num_heads, const py::object& w_q, const py::object& w_k,
             const py::object& w_v, const py::object& w_o, const py::object& b_q,
             const py::object& b_k, const py::object& b_v, const py::object& b_o) {
            py::object keep[8];
            MultiHeadWeights w;
            w.w_q = InputView(w_q, "W_q.weight", &keep[0]);
            w.w_k = InputView(w_k, "W_k.weight", &keep[1]);
            w.w_v = InputView(w_v, "W_v.weight", &keep[2]);
            w.w_o = InputView(w_o, "W_o.weight", &keep[3]);
            if (!b_q.is_none()) w.b_q = InputView(b_q, "W_q.bias", &keep[4]);
            if (!b_k.is_none()) w.b_k = InputView(b_k, "W_k.bias", &keep[5]);
            if (!b_v.is_none()) w.b_v = InputView(b_v, "W_v.bias", &keep[6]);
            if (!b_o.is_none()) w.b_o = InputView(b_o, "W_o.bias", &keep[7]);
            std::unique_ptr<MultiHeadAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = MultiHeadAttention::Create(num_heads, w, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("num_heads"), py::arg("W_q"), py::arg("W_k"), py::arg("W_v"), py::arg("W_o"),
          py::arg("b_q") = py::none(), py::arg("b_k") = py::none(), py::arg("b_v") = py::none(),
          py::arg("b_o") = py::none())
      .def_static(
          "load",
          [](const py::object& path, int64_t num_heads) {
            const std::string file = PathArgument(path);
            std::unique_ptr<MultiHeadAttention> model;
            Status status;
            {
              py::gil_scoped_release release;
              status = MultiHeadAttention::Load(file, num_heads, &model);
            }
            ThrowIfError(status);
            return model;
          },
          py::arg("path"), py::arg("num_heads"),
          "A model from a .safetensors state_dict (W_q, W_k, W_v, W_o .weight, and .bias for "
          "bias=True).")
      .def_property_readonly("num_heads", &MultiHeadAttention::num_heads)
      .def_property_readonly("num_hiddens", &MultiHeadAttention::num_hiddens, "H")
      .def_property_readonly("query_size", &MultiHeadAttention::query_size, "Dq")
      .def_property_readonly("key_size", &MultiHeadAttention::key_size, "Dk")
      .def_property_readonly("value_size", &MultiHeadAttention::value_size, "Dv")
      .def_property_readonly("has_bias", &MultiHeadAttention::has_bias)
      .def(
          "__call__",
          [](const MultiHeadAttention& model, const Engine& engine, const py::object& q,
             const py::object& k, const py::object& v, const py::object& valid_lens,
             const std::string& causal, bool return_weights, const py::object& out,
             const py::object& weights_out) {
            const Causal mask = CausalArgument(causal);
            return RunAttention(
                q, k, v, valid_lens, return_weights, out, weights_out,
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens,
                    Dims* dims) {
                  MultiHeadShapes shapes;
                  ATTNSCORE_RETURN_IF_ERROR(model.Check(qv, kv, vv, lens, mask, &shapes));
                  dims->out.assign(shapes.out.begin(), shapes.out.begin() + 3);
                  dims->weights.assign(shapes.attention_weights.begin(),
                                       shapes.attention_weights.end());
                  return Status::Ok();
                },
                [&](ConstTensor qv, ConstTensor kv, ConstTensor vv, const ValidLens& lens,
                    Tensor o, Tensor w) {
                  return model.Forward(engine, qv, kv, vv, lens, mask, o, w);
                });
          },
          py::arg("engine"), py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("valid_lens") = py::none(), py::arg("causal") = "none",
          py::arg("return_weights") = false, py::arg("out") = py::none(),
          py::arg("weights_out") = py::none(),
          "__call__(engine, q, k, v, valid_lens=None, causal=\"none\", return_weights=False, "
          "out=None, weights_out=None): out (B, N, H), or (out, weights) with weights "
          "(B, num_heads, N, M).")
      .def("__repr__", [](const MultiHeadAttention& a) {
        return "attnscore.MultiHeadAttention(num_heads=" + std::to_string(a.num_heads()) +
               ", num_hiddens=" + std::to_string(a.num_hiddens()) +
               ", query_size=" + std::to_string(a.query_size()) +
               ", key_size=" + std::to_string(a.key_size()) +
               ", value_size=" + std::to_string(a.value_size()) +
               ", bias=" + (a.has_bias() ? "True" : "False") + ")";
      });

  BindKvCache(m);
}
