// The C API (attnscore/c_api.h) over the C++ API: the engine and its ops;
// api/c_api_kv_cache.cc has the KV cache, api/c_api_op.cc the catalogue's
// generic call. Plain structs become views, statuses heap objects, and no
// exception crosses.
#include "attnscore/c_api.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>
#include <string>

#include "api/c_api_internal.h"
#include "attnscore/engine.h"
#include "attnscore/version.h"

namespace {

using attnscore::ConstTensor;
using attnscore::Status;
using attnscore::StatusCode;
using attnscore::Tensor;
using attnscore::c_api::Guarded;
using attnscore::c_api::In;
using attnscore::c_api::Invalid;
using attnscore::c_api::kOutOfMemory;
using attnscore::c_api::MultiHeadOptionsOf;
using attnscore::c_api::Out;
using attnscore::c_api::ToC;

// The C lengths as the C++ struct; false for a kind or type outside the enums.
bool LensOf(const attnscore_valid_lens* lens, attnscore::ValidLens* out) {
  *out = attnscore::ValidLens::None();
  if (lens == nullptr || lens->kind == ATTNSCORE_LENS_NONE) return true;
  if (lens->type != ATTNSCORE_LENS_INT32 && lens->type != ATTNSCORE_LENS_INT64) return false;
  const bool wide = lens->type == ATTNSCORE_LENS_INT64;
  if (lens->kind == ATTNSCORE_LENS_PER_BATCH) {
    *out = wide ? attnscore::ValidLens::PerBatch(static_cast<const int64_t*>(lens->data), lens->dims[0])
                : attnscore::ValidLens::PerBatch(static_cast<const int32_t*>(lens->data), lens->dims[0]);
    return true;
  }
  if (lens->kind == ATTNSCORE_LENS_PER_QUERY) {
    *out = wide ? attnscore::ValidLens::PerQuery(static_cast<const int64_t*>(lens->data),
                                                 lens->dims[0], lens->dims[1])
                : attnscore::ValidLens::PerQuery(static_cast<const int32_t*>(lens->data),
                                                 lens->dims[0], lens->dims[1]);
    return true;
  }
  return false;
}

// A *_check call: `check(q, k, v, lens, &found)` after the null and enum
// checks, `found` (the C++ shapes that the C struct Shapes mirrors) copied
// into *shapes on success. `owner` is the engine or model.
template <typename Found = attnscore::OutputShapes, typename Shapes, typename Check>
attnscore_status* CheckCall(const char* call, const void* owner,
                            const attnscore_tensor_view* queries, const attnscore_tensor_view* keys,
                            const attnscore_tensor_view* values,
                            const attnscore_valid_lens* valid_lens, Shapes* shapes, Check check) {
  static_assert(std::size(Shapes{}.out) == std::tuple_size_v<decltype(Found::out)> &&
                std::size(Shapes{}.attention_weights) ==
                    std::tuple_size_v<decltype(Found::attention_weights)>);
  if (owner == nullptr) return Invalid(call, "the engine or model is null");
  if (queries == nullptr || keys == nullptr || values == nullptr || shapes == nullptr) {
    return Invalid(call, "queries, keys, values and shapes must not be null");
  }
  attnscore::ValidLens lens;
  if (!LensOf(valid_lens, &lens)) return Invalid(call, "valid_lens has a kind or type outside its enum");
  return Guarded(call, [&] {
    Found found;
    ATTNSCORE_RETURN_IF_ERROR(check(In(queries), In(keys), In(values), lens, &found));
    std::copy(found.out.begin(), found.out.end(), shapes->out);
    std::copy(found.attention_weights.begin(), found.attention_weights.end(),
              shapes->attention_weights);
    return Status::Ok();
  });
}

bool OptionsOf(const attnscore_engine_options& in, attnscore::EngineOptions* out) {
  if (in.isa < ATTNSCORE_ISA_SCALAR || in.isa > ATTNSCORE_ISA_BEST) return false;
  if (in.precision < ATTNSCORE_FP32 || in.precision > ATTNSCORE_INT8) return false;
  out->threads = in.threads;
  out->isa = static_cast<attnscore::Isa>(in.isa);
  out->precision = static_cast<attnscore::Precision>(in.precision);
  return true;
}

}  // namespace

extern "C" {

attnscore_status_code attnscore_status_get_code(const attnscore_status* status) {
  return status == nullptr ? ATTNSCORE_OK : status->code;
}

const char* attnscore_status_message(const attnscore_status* status) {
  return status == nullptr ? "" : status->message.c_str();
}

void attnscore_status_free(attnscore_status* status) {
  if (status != &kOutOfMemory) delete status;
}

const char* attnscore_status_code_name(attnscore_status_code code) {
  return attnscore::StatusCodeName(static_cast<StatusCode>(code));
}

const char* attnscore_version(void) { return attnscore::Version(); }

attnscore_engine_options attnscore_default_engine_options(void) {
  return {1, ATTNSCORE_ISA_BEST, ATTNSCORE_FP32};
}

const char* attnscore_isa_name(int32_t isa) {
  if (isa < ATTNSCORE_ISA_SCALAR || isa > ATTNSCORE_ISA_BEST) return nullptr;
  return attnscore::IsaName(static_cast<attnscore::Isa>(isa));
}

const char* attnscore_precision_name(int32_t precision) {
  if (precision < ATTNSCORE_FP32 || precision > ATTNSCORE_INT8) return nullptr;
  return attnscore::PrecisionName(static_cast<attnscore::Precision>(precision));
}

int attnscore_parse_isa(const char* name, attnscore_isa* isa) {
  attnscore::Isa parsed;
  if (name == nullptr || isa == nullptr || !attnscore::ParseIsa(name, &parsed)) return 0;
  *isa = static_cast<attnscore_isa>(parsed);
  return 1;
}

int attnscore_parse_precision(const char* name, attnscore_precision* precision) {
  attnscore::Precision parsed;
  if (name == nullptr || precision == nullptr || !attnscore::ParsePrecision(name, &parsed)) return 0;
  *precision = static_cast<attnscore_precision>(parsed);
  return 1;
}

attnscore_status* attnscore_engine_create(const attnscore_engine_options* options,
                                          attnscore_engine** engine) {
  constexpr const char* kCall = "attnscore_engine_create";
  if (options == nullptr) return Invalid(kCall, "options is null");
  if (engine == nullptr) return Invalid(kCall, "engine is null");
  attnscore::EngineOptions cpp;
  if (!OptionsOf(*options, &cpp)) return Invalid(kCall, "options hold an isa or precision outside its enum");
  return Guarded(kCall, [&] {
    auto handle = std::make_unique<attnscore_engine>();
    ATTNSCORE_RETURN_IF_ERROR(attnscore::Engine::Create(cpp, &handle->engine));
    *engine = handle.release();
    return Status::Ok();
  });
}

void attnscore_engine_destroy(attnscore_engine* engine) { delete engine; }

attnscore_status* attnscore_engine_options_of(const attnscore_engine* engine,
                                              attnscore_engine_options* options) {
  if (engine == nullptr) return Invalid("attnscore_engine_options_of", "engine is null");
  if (options == nullptr) return Invalid("attnscore_engine_options_of", "options is null");
  const attnscore::EngineOptions& o = engine->engine->options();
  *options = {o.threads, static_cast<int32_t>(o.isa), static_cast<int32_t>(o.precision)};
  return nullptr;
}

attnscore_status* attnscore_engine_describe(const attnscore_engine* engine, char* buffer,
                                            size_t size, size_t* length) {
  constexpr const char* kCall = "attnscore_engine_describe";
  if (engine == nullptr) return Invalid(kCall, "engine is null");
  if (buffer == nullptr && size > 0) return Invalid(kCall, "buffer is null but size is not 0");
  return Guarded(kCall, [&] {
    const std::string text = engine->engine->Describe();
    if (length != nullptr) *length = text.size();
    if (size > 0) {
      const size_t n = text.size() < size - 1 ? text.size() : size - 1;
      std::memcpy(buffer, text.data(), n);
      buffer[n] = '\0';
    }
    return Status::Ok();
  });
}

attnscore_status* attnscore_masked_softmax(const attnscore_engine* engine,
                                           const attnscore_tensor_view* x,
                                           const attnscore_valid_lens* valid_lens,
                                           const attnscore_tensor* y) {
  constexpr const char* kCall = "attnscore_masked_softmax";
  if (engine == nullptr) return Invalid(kCall, "engine is null");
  if (x == nullptr || y == nullptr) return Invalid(kCall, x == nullptr ? "x is null" : "y is null");
  attnscore::ValidLens lens;
  if (!LensOf(valid_lens, &lens)) return Invalid(kCall, "valid_lens has a kind or type outside its enum");
  return Guarded(kCall, [&] { return engine->engine->MaskedSoftmax(In(x), lens, Out(y)); });
}

attnscore_status* attnscore_dot_product_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, const attnscore_tensor* out,
    const attnscore_tensor* attention_weights) {
  constexpr const char* kCall = "attnscore_dot_product_attention";
  if (engine == nullptr) return Invalid(kCall, "engine is null");
  if (queries == nullptr || keys == nullptr || values == nullptr || out == nullptr) {
    return Invalid(kCall, "queries, keys, values and out must not be null");
  }
  attnscore::ValidLens lens;
  if (!LensOf(valid_lens, &lens)) return Invalid(kCall, "valid_lens has a kind or type outside its enum");
  return Guarded(kCall, [&] {
    return engine->engine->DotProductAttention(In(queries), In(keys), In(values), lens, Out(out),
                                               Out(attention_weights));
  });
}

attnscore_status* attnscore_check_masked_softmax(const attnscore_engine* engine,
                                                 const attnscore_tensor_view* x,
                                                 const attnscore_valid_lens* valid_lens,
                                                 attnscore_output_shapes* shapes) {
  // X stands in for all three inputs: the masked softmax has one.
  return CheckCall("attnscore_check_masked_softmax", engine, x, x, x, valid_lens, shapes,
                   [&](ConstTensor view, ConstTensor, ConstTensor, const attnscore::ValidLens& lens,
                       attnscore::OutputShapes* found) {
                     return engine->engine->CheckMaskedSoftmax(view, lens, found);
                   });
}

attnscore_status* attnscore_check_dot_product_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, attnscore_output_shapes* shapes) {
  return CheckCall("attnscore_check_dot_product_attention", engine, queries, keys, values,
                   valid_lens, shapes,
                   [&](ConstTensor q, ConstTensor k, ConstTensor v, const attnscore::ValidLens& lens,
                       attnscore::OutputShapes* found) {
                     return engine->engine->CheckDotProductAttention(q, k, v, lens, found);
                   });
}

attnscore_status* attnscore_multihead_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, const attnscore_multihead_options* options,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights) {
  constexpr const char* kCall = "attnscore_multihead_attention";
  if (engine == nullptr) return Invalid(kCall, "engine is null");
  if (queries == nullptr || keys == nullptr || values == nullptr || out == nullptr) {
    return Invalid(kCall, "queries, keys, values and out must not be null");
  }
  attnscore::ValidLens lens;
  if (!LensOf(valid_lens, &lens)) return Invalid(kCall, "valid_lens has a kind or type outside its enum");
  attnscore::MultiHeadOptions multihead;
  const Status options_ok = MultiHeadOptionsOf(kCall, options, queries, &multihead);
  if (!options_ok.ok()) return ToC(options_ok);
  return Guarded(kCall, [&] {
    return engine->engine->MultiHeadAttention(In(queries), In(keys), In(values), lens, multihead,
                                              Out(out), Out(attention_weights));
  });
}

attnscore_status* attnscore_multihead_attention_packed(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, int64_t offsets,
    const attnscore_multihead_options* options, const attnscore_tensor* out) {
  constexpr const char* kCall = "attnscore_multihead_attention_packed";
  if (engine == nullptr) return Invalid(kCall, "engine is null");
  if (queries == nullptr || keys == nullptr || values == nullptr || out == nullptr) {
    return Invalid(kCall, "queries, keys, values and out must not be null");
  }
  attnscore::MultiHeadOptions multihead;
  const Status options_ok = MultiHeadOptionsOf(kCall, options, queries, &multihead);
  if (!options_ok.ok()) return ToC(options_ok);
  return Guarded(kCall, [&] {
    return engine->engine->MultiHeadAttentionPacked(
        In(queries), In(keys), In(values), attnscore::SequenceOffsets::Of(cu_seqlens_q, offsets),
        attnscore::SequenceOffsets::Of(cu_seqlens_k, offsets), multihead, Out(out));
  });
}

attnscore_status* attnscore_check_multihead_attention(const attnscore_engine* engine,
                                                      const attnscore_tensor_view* queries,
                                                      const attnscore_tensor_view* keys,
                                                      const attnscore_tensor_view* values,
                                                      const attnscore_valid_lens* valid_lens,
                                                      const attnscore_multihead_options* options,
                                                      attnscore_multihead_shapes* shapes) {
  constexpr const char* kCall = "attnscore_check_multihead_attention";
  // The options' enum is checked after the pointers and lengths, as
  // attnscore_multihead_attention does.
  return CheckCall<attnscore::MultiHeadShapes>(
      kCall, engine, queries, keys, values, valid_lens, shapes,
      [&](ConstTensor q, ConstTensor k, ConstTensor v, const attnscore::ValidLens& lens,
          attnscore::MultiHeadShapes* found) {
        attnscore::MultiHeadOptions multihead;
        ATTNSCORE_RETURN_IF_ERROR(MultiHeadOptionsOf(kCall, options, queries, &multihead));
        return engine->engine->CheckMultiHeadAttention(q, k, v, lens, multihead, found);
      });
}

}  // extern "C"
