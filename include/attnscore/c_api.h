/* The attnscore C API: the C++ API's operations for C and for foreign
 * function interfaces. Valid C11 and C++.
 *
 *   attnscore_engine* engine = NULL;
 *   attnscore_engine_options options = attnscore_default_engine_options();
 *   attnscore_status* s = attnscore_engine_create(&options, &engine);
 *   s = attnscore_dot_product_attention(engine, &q, &k, &v, &lens, &out, NULL);
 *   if (s) { fprintf(stderr, "%s\n", attnscore_status_message(s)); attnscore_status_free(s); }
 *   attnscore_engine_destroy(engine);
 *
 * Every call returns NULL on success, or a status the caller owns and frees
 * with attnscore_status_free: its code and message belong to that call
 * alone, so any thread may read them. No C++ exception crosses this API. A
 * call that fails has written nothing to its outputs. Handles are opaque;
 * an engine and a model may be used by many threads at once, and are
 * destroyed by their owner once no call is using them. Tensors are views of
 * the caller's memory, never kept past a call. The contract of each
 * operation is the C++ API's (attnscore/engine.h, additive.h, concat.h). */
#ifndef ATTNSCORE_C_API_H_
#define ATTNSCORE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "attnscore/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status ---- */

typedef enum attnscore_status_code {
  ATTNSCORE_OK = 0,
  ATTNSCORE_INVALID_ARGUMENT = 1, /* the caller's input is malformed; nothing was written */
  ATTNSCORE_UNSUPPORTED = 2,      /* valid input the engine or this CPU cannot serve */
  ATTNSCORE_IO_ERROR = 3,         /* a file could not be read */
  ATTNSCORE_INTERNAL = 4          /* a bug or a failure of a dependency (oneDNN, memory) */
} attnscore_status_code;

typedef struct attnscore_status attnscore_status;

/* ATTNSCORE_OK for NULL (success). */
ATTNSCORE_API attnscore_status_code attnscore_status_get_code(const attnscore_status* status);
/* "" for NULL; otherwise valid until attnscore_status_free(status). */
ATTNSCORE_API const char* attnscore_status_message(const attnscore_status* status);
/* Frees a status; NULL is fine. */
ATTNSCORE_API void attnscore_status_free(attnscore_status* status);
/* "ok", "invalid argument", ... */
ATTNSCORE_API const char* attnscore_status_code_name(attnscore_status_code code);

/* "MAJOR.MINOR.PATCH" of the library loaded. */
ATTNSCORE_API const char* attnscore_version(void);

/* ---- Tensors and valid lengths ---- */

#define ATTNSCORE_MAX_RANK 4

/* A view of float32 memory: rank dims, strides in elements (not bytes). */
typedef struct attnscore_tensor_view { /* read by the call */
  const float* data;
  int32_t rank;
  int64_t dims[ATTNSCORE_MAX_RANK];
  int64_t strides[ATTNSCORE_MAX_RANK];
} attnscore_tensor_view;

typedef struct attnscore_tensor { /* written by the call */
  float* data;
  int32_t rank;
  int64_t dims[ATTNSCORE_MAX_RANK];
  int64_t strides[ATTNSCORE_MAX_RANK];
} attnscore_tensor;

typedef enum attnscore_lens_kind {
  ATTNSCORE_LENS_NONE = 0,      /* every key valid */
  ATTNSCORE_LENS_PER_BATCH = 1, /* dims[0] = B lengths */
  ATTNSCORE_LENS_PER_QUERY = 2  /* dims[0] x dims[1] = B x N lengths */
} attnscore_lens_kind;

typedef enum attnscore_lens_type { ATTNSCORE_LENS_INT32 = 0, ATTNSCORE_LENS_INT64 = 1 } attnscore_lens_type;

/* Contiguous lengths; a NULL attnscore_valid_lens* means none. The enums'
 * fields are plain integers, so any value a caller stores is refused
 * cleanly rather than read as an invalid enum. */
typedef struct attnscore_valid_lens {
  int32_t kind; /* attnscore_lens_kind */
  int32_t type; /* attnscore_lens_type */
  const void* data;
  int64_t dims[2];
} attnscore_valid_lens;

/* ---- Engine ---- */

typedef enum attnscore_isa {
  ATTNSCORE_ISA_SCALAR = 0,
  ATTNSCORE_ISA_SSE4 = 1,
  ATTNSCORE_ISA_AVX2 = 2,
  ATTNSCORE_ISA_AVX512 = 3,
  ATTNSCORE_ISA_BEST = 4
} attnscore_isa;

typedef enum attnscore_precision { ATTNSCORE_FP32 = 0, ATTNSCORE_BF16 = 1 } attnscore_precision;

typedef struct attnscore_engine_options {
  int32_t threads;   /* per call, 1 to 1024 (attnscore::kMaxThreads) */
  int32_t isa;       /* attnscore_isa */
  int32_t precision; /* attnscore_precision */
} attnscore_engine_options;

/* 1 thread, the best ISA, fp32. */
ATTNSCORE_API attnscore_engine_options attnscore_default_engine_options(void);
/* "scalar", ...; NULL for a value outside the enum. */
ATTNSCORE_API const char* attnscore_isa_name(int32_t isa);
ATTNSCORE_API const char* attnscore_precision_name(int32_t precision);
/* 1 and *isa set when name is one of the names above, else 0. */
ATTNSCORE_API int attnscore_parse_isa(const char* name, attnscore_isa* isa);
ATTNSCORE_API int attnscore_parse_precision(const char* name, attnscore_precision* precision);

typedef struct attnscore_engine attnscore_engine;

ATTNSCORE_API attnscore_status* attnscore_engine_create(const attnscore_engine_options* options,
                                                        attnscore_engine** engine);
ATTNSCORE_API void attnscore_engine_destroy(attnscore_engine* engine);
/* The options in force (the ISA cap applied). */
ATTNSCORE_API attnscore_status* attnscore_engine_options_of(const attnscore_engine* engine,
                                                            attnscore_engine_options* options);
/* Engine::Describe's text into buffer[0, size) with its terminating NUL, cut
 * to fit; *length (when not NULL) receives its full length. */
ATTNSCORE_API attnscore_status* attnscore_engine_describe(const attnscore_engine* engine, char* buffer,
                                                          size_t size, size_t* length);

/* Y = masked_softmax(X, valid_lens) over the last axis; X, Y (B, N, M). */
ATTNSCORE_API attnscore_status* attnscore_masked_softmax(const attnscore_engine* engine,
                                                         const attnscore_tensor_view* x,
                                                         const attnscore_valid_lens* valid_lens,
                                                         const attnscore_tensor* y);

/* out = softmax(Q Kᵀ / sqrt(D), masked) V; attention_weights (B, N, M) may be NULL. */
ATTNSCORE_API attnscore_status* attnscore_dot_product_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, const attnscore_tensor* out,
    const attnscore_tensor* attention_weights);

/* The shapes a call's outputs must have: out (B, N, F) and
 * attention_weights (B, N, M); for the masked softmax both are X's. */
typedef struct attnscore_output_shapes {
  int64_t out[3];
  int64_t attention_weights[3];
} attnscore_output_shapes;

/* The *_check calls: every check the op makes of its inputs (shapes,
 * strides, valid lengths), without running it, and its output shapes; a
 * caller that allocates the outputs refuses bad input before allocating any.
 * The message of a refusal is the op's own. */
ATTNSCORE_API attnscore_status* attnscore_check_masked_softmax(const attnscore_engine* engine,
                                                               const attnscore_tensor_view* x,
                                                               const attnscore_valid_lens* valid_lens,
                                                               attnscore_output_shapes* shapes);
ATTNSCORE_API attnscore_status* attnscore_check_dot_product_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, attnscore_output_shapes* shapes);

/* ---- Additive attention (d2l's AdditiveAttention) ---- */

typedef struct attnscore_additive attnscore_additive;

/* W_q.weight (H, Dq), W_k.weight (H, Dk), w_v.weight (1, H); copied. */
ATTNSCORE_API attnscore_status* attnscore_additive_create(const attnscore_tensor_view* w_q,
                                                          const attnscore_tensor_view* w_k,
                                                          const attnscore_tensor_view* w_v,
                                                          attnscore_additive** model);
/* The same from a .safetensors state_dict. */
ATTNSCORE_API attnscore_status* attnscore_additive_load(const char* path, attnscore_additive** model);
ATTNSCORE_API void attnscore_additive_destroy(attnscore_additive* model);
/* Dq, Dk and H; 0 for a NULL model. */
ATTNSCORE_API int64_t attnscore_additive_query_size(const attnscore_additive* model);
ATTNSCORE_API int64_t attnscore_additive_key_size(const attnscore_additive* model);
ATTNSCORE_API int64_t attnscore_additive_hidden_size(const attnscore_additive* model);
ATTNSCORE_API attnscore_status* attnscore_additive_check(
    const attnscore_additive* model, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, attnscore_output_shapes* shapes);
ATTNSCORE_API attnscore_status* attnscore_additive_forward(
    const attnscore_additive* model, const attnscore_engine* engine,
    const attnscore_tensor_view* queries, const attnscore_tensor_view* keys,
    const attnscore_tensor_view* values, const attnscore_valid_lens* valid_lens,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights);

/* ---- Concat attention (the seq2seq tutorial's Attn) ---- */

typedef struct attnscore_concat attnscore_concat;

/* attn.weight (M, Dq + Dk), attn.bias (M), attn_combine.weight (O, Dq + Dv),
 * attn_combine.bias (O); copied. */
ATTNSCORE_API attnscore_status* attnscore_concat_create(
    int64_t query_size, const attnscore_tensor_view* attn_weight,
    const attnscore_tensor_view* attn_bias, const attnscore_tensor_view* combine_weight,
    const attnscore_tensor_view* combine_bias, attnscore_concat** model);
ATTNSCORE_API attnscore_status* attnscore_concat_load(const char* path, int64_t query_size,
                                                      attnscore_concat** model);
ATTNSCORE_API void attnscore_concat_destroy(attnscore_concat* model);
/* Dq, Dk, M, Dv and O; 0 for a NULL model. */
ATTNSCORE_API int64_t attnscore_concat_query_size(const attnscore_concat* model);
ATTNSCORE_API int64_t attnscore_concat_key_size(const attnscore_concat* model);
ATTNSCORE_API int64_t attnscore_concat_value_rows(const attnscore_concat* model);
ATTNSCORE_API int64_t attnscore_concat_value_size(const attnscore_concat* model);
ATTNSCORE_API int64_t attnscore_concat_output_size(const attnscore_concat* model);
ATTNSCORE_API attnscore_status* attnscore_concat_check(
    const attnscore_concat* model, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, attnscore_output_shapes* shapes);
ATTNSCORE_API attnscore_status* attnscore_concat_forward(
    const attnscore_concat* model, const attnscore_engine* engine,
    const attnscore_tensor_view* queries, const attnscore_tensor_view* keys,
    const attnscore_tensor_view* values, const attnscore_valid_lens* valid_lens,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights);

/* ---- Multi-head attention ---- */

typedef enum attnscore_causal {
  ATTNSCORE_CAUSAL_NONE = 0,
  ATTNSCORE_CAUSAL_TOP_LEFT = 1,    /* query i sees keys 0..i */
  ATTNSCORE_CAUSAL_BOTTOM_RIGHT = 2 /* query i sees keys 0..M - N + i; needs M >= N */
} attnscore_causal;

typedef struct attnscore_multihead_options {
  int32_t causal; /* attnscore_causal */
  float scale;    /* 0: 1/sqrt(D) */
} attnscore_multihead_options;

/* Engine::MultiHeadAttention: Q (B, N, Hq, D), K (B, M, Hkv, D),
 * V (B, M, Hkv, Dv), out (B, N, Hq, Dv), attention_weights (B, Hq, N, M) or
 * NULL; options NULL means no mask and 1/sqrt(D). */
ATTNSCORE_API attnscore_status* attnscore_multihead_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, const attnscore_multihead_options* options,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights);

/* The shapes a multi-head call's outputs must have: out (B, N, Hq, Dv), or
 * for the module (B, N, H, 0); attention_weights (B, Hq, N, M). */
typedef struct attnscore_multihead_shapes {
  int64_t out[4];
  int64_t attention_weights[4];
} attnscore_multihead_shapes;

/* attnscore_multihead_attention's checks, as the other *_check calls. */
ATTNSCORE_API attnscore_status* attnscore_check_multihead_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, const attnscore_multihead_options* options,
    attnscore_multihead_shapes* shapes);

/* d2l's MultiHeadAttention: W_q.weight (H, Dq), W_k.weight (H, Dk),
 * W_v.weight (H, Dv), W_o.weight (H, H), and the four biases (H) or all
 * four NULL; copied. */
typedef struct attnscore_multihead attnscore_multihead;

ATTNSCORE_API attnscore_status* attnscore_multihead_create(
    int64_t num_heads, const attnscore_tensor_view* w_q, const attnscore_tensor_view* w_k,
    const attnscore_tensor_view* w_v, const attnscore_tensor_view* w_o,
    const attnscore_tensor_view* b_q, const attnscore_tensor_view* b_k,
    const attnscore_tensor_view* b_v, const attnscore_tensor_view* b_o,
    attnscore_multihead** model);
ATTNSCORE_API attnscore_status* attnscore_multihead_load(const char* path, int64_t num_heads,
                                                         attnscore_multihead** model);
ATTNSCORE_API void attnscore_multihead_destroy(attnscore_multihead* model);
/* num_heads and num_hiddens H; 0 for a NULL model. */
ATTNSCORE_API int64_t attnscore_multihead_num_heads(const attnscore_multihead* model);
ATTNSCORE_API int64_t attnscore_multihead_num_hiddens(const attnscore_multihead* model);
/* attnscore_multihead_forward's checks, as the other *_check calls. */
ATTNSCORE_API attnscore_status* attnscore_multihead_check(
    const attnscore_multihead* model, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, int32_t causal, attnscore_multihead_shapes* shapes);
/* Q (B, N, Dq), K (B, M, Dk), V (B, M, Dv), out (B, N, H),
 * attention_weights (B, num_heads, N, M) or NULL; causal: attnscore_causal. */
ATTNSCORE_API attnscore_status* attnscore_multihead_forward(
    const attnscore_multihead* model, const attnscore_engine* engine,
    const attnscore_tensor_view* queries, const attnscore_tensor_view* keys,
    const attnscore_tensor_view* values, const attnscore_valid_lens* valid_lens, int32_t causal,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights);

/* ---- A key-value cache for decoding (attnscore::KvCache) ---- */

typedef struct attnscore_kv_cache attnscore_kv_cache;

ATTNSCORE_API attnscore_status* attnscore_kv_cache_create(int64_t batch, int64_t capacity,
                                                          int64_t kv_heads, int64_t key_dim,
                                                          int64_t value_dim,
                                                          attnscore_kv_cache** cache);
/* Sequences sharing a pool of `blocks` blocks of `block_positions`
 * positions, each block of a head's keys and values whole pages; each
 * sequence may grow to `capacity` (attnscore::KvCacheShape). 0, 0 is no
 * pool, as attnscore_kv_cache_create. */
ATTNSCORE_API attnscore_status* attnscore_kv_cache_create_pooled(
    int64_t batch, int64_t capacity, int64_t kv_heads, int64_t key_dim, int64_t value_dim,
    int64_t block_positions, int64_t blocks, attnscore_kv_cache** cache);
/* The multiple a pool's block_positions must be for keys of `key_dim` and
 * values of `value_dim` floats (attnscore::KvCache::BlockPositionsMultiple);
 * 0 where either is below 1. */
ATTNSCORE_API int64_t attnscore_kv_cache_block_positions_multiple(int64_t key_dim,
                                                                  int64_t value_dim);
ATTNSCORE_API void attnscore_kv_cache_destroy(attnscore_kv_cache* cache);
/* The pool's blocks in use; 0 without a pool or for a NULL cache. */
ATTNSCORE_API int64_t attnscore_kv_cache_blocks_in_use(const attnscore_kv_cache* cache);
/* Positions sequence b holds; 0 for a NULL cache or a b out of range. */
ATTNSCORE_API int64_t attnscore_kv_cache_length(const attnscore_kv_cache* cache, int64_t sequence);
/* keys (B, T, Hkv, D), values (B, T, Hkv, Dv) to every sequence. */
ATTNSCORE_API attnscore_status* attnscore_kv_cache_append(attnscore_kv_cache* cache,
                                                          const attnscore_tensor_view* keys,
                                                          const attnscore_tensor_view* values);
/* keys (T, Hkv, D), values (T, Hkv, Dv) to one sequence. */
ATTNSCORE_API attnscore_status* attnscore_kv_cache_append_to(attnscore_kv_cache* cache,
                                                             int64_t sequence,
                                                             const attnscore_tensor_view* keys,
                                                             const attnscore_tensor_view* values);
ATTNSCORE_API attnscore_status* attnscore_kv_cache_clear(attnscore_kv_cache* cache,
                                                         int64_t sequence);
/* Queries (B, N, Hq, D), each sequence's N newest positions; out
 * (B, N, Hq, Dv); attention_weights (B, Hq, N, L) or NULL. */
ATTNSCORE_API attnscore_status* attnscore_kv_cache_attend(const attnscore_kv_cache* cache,
                                                          const attnscore_engine* engine,
                                                          const attnscore_tensor_view* queries,
                                                          const attnscore_tensor* out,
                                                          const attnscore_tensor* attention_weights);

/* ---- Bilinear attention (scores qᵀ W k) ---- */

typedef struct attnscore_bilinear attnscore_bilinear;

/* W.weight (Dq, Dk); copied. */
ATTNSCORE_API attnscore_status* attnscore_bilinear_create(const attnscore_tensor_view* w,
                                                          attnscore_bilinear** model);
ATTNSCORE_API attnscore_status* attnscore_bilinear_load(const char* path,
                                                        attnscore_bilinear** model);
ATTNSCORE_API void attnscore_bilinear_destroy(attnscore_bilinear* model);
/* Dq and Dk; 0 for a NULL model. */
ATTNSCORE_API int64_t attnscore_bilinear_query_size(const attnscore_bilinear* model);
ATTNSCORE_API int64_t attnscore_bilinear_key_size(const attnscore_bilinear* model);
ATTNSCORE_API attnscore_status* attnscore_bilinear_check(
    const attnscore_bilinear* model, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, attnscore_output_shapes* shapes);
ATTNSCORE_API attnscore_status* attnscore_bilinear_forward(
    const attnscore_bilinear* model, const attnscore_engine* engine,
    const attnscore_tensor_view* queries, const attnscore_tensor_view* keys,
    const attnscore_tensor_view* values, const attnscore_valid_lens* valid_lens,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights);

#ifdef __cplusplus
}
#endif

#endif /* ATTNSCORE_C_API_H_ */
