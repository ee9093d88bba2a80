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
 * operation is the C++ API's (attnscore/engine.h, catalogue.h, kv_cache.h).
 *
 * The models (additive, concat, bilinear, d2l's multi-head module), like
 * every op, are reached through the catalogue: attnscore_op_load (or
 * _create) makes an attnscore_op of any entry by name, attnscore_op_check
 * and attnscore_op_run call it on named tensors. */
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
  ATTNSCORE_INTERNAL = 4,         /* a bug or a failure of a dependency (oneDNN, memory) */
  ATTNSCORE_CANCELLED = 5         /* stopped by a cancel token (below); outputs partly written */
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

/* ---- Cancelling a call (attnscore/cancel.h) ----
 * A call made while the calling thread has a token set checks it between
 * rows of its work; once cancelled (from another thread, or a signal
 * handler), it stops and returns ATTNSCORE_CANCELLED, its outputs partly
 * written. KV-cache appends and clears are never cancelled. */

typedef struct attnscore_cancel_token attnscore_cancel_token;

/* NULL when out of memory. */
ATTNSCORE_API attnscore_cancel_token* attnscore_cancel_token_create(void);
ATTNSCORE_API void attnscore_cancel_token_destroy(attnscore_cancel_token* token);
/* From any thread or a signal handler (a lock-free atomic store); NULL is ignored. */
ATTNSCORE_API void attnscore_cancel_token_cancel(attnscore_cancel_token* token);
ATTNSCORE_API void attnscore_cancel_token_reset(attnscore_cancel_token* token);
/* 1 once cancelled (until reset), else 0; 0 for NULL. */
ATTNSCORE_API int attnscore_cancel_token_cancelled(const attnscore_cancel_token* token);
/* The calls this thread makes from now on check `token` (NULL: none; it must
 * outlive its use). Returns the token set before, to restore it. */
ATTNSCORE_API const attnscore_cancel_token* attnscore_set_thread_cancel_token(
    const attnscore_cancel_token* token);

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

/* ATTNSCORE_INT8 is a KV cache's precision only; an engine refuses it. */
typedef enum attnscore_precision {
  ATTNSCORE_FP32 = 0,
  ATTNSCORE_BF16 = 1,
  ATTNSCORE_INT8 = 2
} attnscore_precision;

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

/* ---- Multi-head attention ---- */

typedef enum attnscore_causal {
  ATTNSCORE_CAUSAL_NONE = 0,
  ATTNSCORE_CAUSAL_TOP_LEFT = 1,    /* query i sees keys 0..i */
  ATTNSCORE_CAUSAL_BOTTOM_RIGHT = 2 /* query i sees keys 0..M - N + i; needs M >= N */
} attnscore_causal;

/* Set every field: start from ATTNSCORE_MULTIHEAD_OPTIONS_INIT (or = {0}),
 * since a field left unset (softcap, new in 0.5; the window, sinks, ALiBi
 * and bias, new in 0.6) would be read as given. */
typedef struct attnscore_multihead_options {
  int32_t causal; /* attnscore_causal */
  float scale;    /* 0: 1/sqrt(D) */
  float softcap;  /* 0: none; c > 0: each score s becomes c tanh(s / c) */
  /* A sliding window when `windowed` is 1 (0: none): query i of N at
   * p = i + M - N sees keys p - window_left <= j <= p + window_right; each
   * side -1 for unbounded, else >= 0. */
  int32_t windowed;
  int64_t window_left, window_right;
  /* Attention sinks: Hq contiguous logits, one per query head, each in its
   * head's softmax denominators; NULL: none. Not NaN. */
  const float* sinks;
  /* ALiBi: Hq contiguous finite slopes, head h's scores losing
   * slope_h |p - j|; NULL: none. */
  const float* alibi_slopes;
  /* Added to the scores after the cap and ALiBi (-Inf masks a key):
   * (B, Hq, N, M), each dim that or 1; NULL: none. */
  const attnscore_tensor_view* bias;
} attnscore_multihead_options;
#define ATTNSCORE_MULTIHEAD_OPTIONS_INIT \
  { ATTNSCORE_CAUSAL_NONE, 0.0f, 0.0f, 0, -1, -1, NULL, NULL, NULL }

/* Engine::MultiHeadAttention: Q (B, N, Hq, D), K (B, M, Hkv, D),
 * V (B, M, Hkv, Dv), out (B, N, Hq, Dv), attention_weights (B, Hq, N, M) or
 * NULL; options NULL means no mask, 1/sqrt(D) and no cap. */
ATTNSCORE_API attnscore_status* attnscore_multihead_attention(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const attnscore_valid_lens* valid_lens, const attnscore_multihead_options* options,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights);

/* Engine::MultiHeadAttentionPacked (docs/semantics.md section 5.8): S
 * sequences packed row after row, Q (Tq, Hq, D), K (Tk, Hkv, D),
 * V (Tk, Hkv, Dv); sequence s holds rows cu_seqlens_q[s]..cu_seqlens_q[s+1]-1
 * of Q and cu_seqlens_k[s].. of K and V (`offsets` = S + 1 int64 each, from
 * 0 to the rows); out (Tq, Hq, Dv). Each sequence is its own
 * attnscore_multihead_attention call; options NULL: the defaults; its bias
 * must be NULL. */
ATTNSCORE_API attnscore_status* attnscore_multihead_attention_packed(
    const attnscore_engine* engine, const attnscore_tensor_view* queries,
    const attnscore_tensor_view* keys, const attnscore_tensor_view* values,
    const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, int64_t offsets,
    const attnscore_multihead_options* options, const attnscore_tensor* out);

/* The shapes a multi-head call's outputs must have: out (B, N, Hq, Dv) and
 * attention_weights (B, Hq, N, M). */
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
/* Any cache (attnscore::KvCacheShape): the calls above in one, and the
 * precision the cache holds keys and values in (attnscore_precision:
 * ATTNSCORE_BF16 rounds each element to bf16 once, as it is appended;
 * ATTNSCORE_INT8 holds 8-bit codes and their scales, docs/semantics.md
 * section 5.3). */
typedef struct attnscore_kv_cache_shape {
  int64_t batch, capacity, kv_heads, key_dim, value_dim;
  int64_t block_positions, blocks; /* a pool, or 0, 0 for none */
  int32_t precision;               /* attnscore_precision */
} attnscore_kv_cache_shape;
ATTNSCORE_API attnscore_status* attnscore_kv_cache_create_shaped(
    const attnscore_kv_cache_shape* shape, attnscore_kv_cache** cache);
/* The block multiple for elements of `precision`; 0 for a precision that
 * is none, or a dim below 1. */
ATTNSCORE_API int64_t attnscore_kv_cache_block_positions_multiple_in(int64_t key_dim,
                                                                     int64_t value_dim,
                                                                     int32_t precision);
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

/* KvCache::Attend's options (attnscore::KvCacheAttendOptions). Set every
 * field: start from ATTNSCORE_KV_CACHE_ATTEND_OPTIONS_INIT (or = {0}), since
 * a field left unset (the window, ALiBi and bias, new in 0.7) would be read
 * as given. Query i of N of sequence b, which holds L_b positions, sits at
 * p = L_b - N + i. */
typedef struct attnscore_kv_cache_attend_options {
  float scale;        /* 0: 1/sqrt(D) */
  float softcap;      /* 0: none; c > 0: each score s becomes c tanh(s / c) */
  const float* sinks; /* Hq logits or NULL, as attnscore_multihead_options' */
  /* A sliding window when `windowed` is 1 (0: none): keys from
   * p - window_left on (-1: unbounded, else >= 0); keys before are not read. */
  int32_t windowed;
  int64_t window_left;
  const float* alibi_slopes; /* Hq finite slopes or NULL, as attnscore_multihead_options' */
  /* Added to the scores: (B, Hq, N, L), L the longest sequence's length,
   * each dim that or 1; NULL: none. Not with the packed call. A mask is a
   * bias of -INFINITY where a key is masked, 0 elsewhere. */
  const attnscore_tensor_view* bias;
} attnscore_kv_cache_attend_options;
#define ATTNSCORE_KV_CACHE_ATTEND_OPTIONS_INIT \
  { 0.0f, 0.0f, NULL, 0, -1, NULL, NULL }

/* attnscore_kv_cache_attend with options; NULL options are the defaults. */
ATTNSCORE_API attnscore_status* attnscore_kv_cache_attend_with_options(
    const attnscore_kv_cache* cache, const attnscore_engine* engine,
    const attnscore_tensor_view* queries, const attnscore_kv_cache_attend_options* options,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights);

/* One call per server step (KvCache::AppendPacked): keys (T, Hkv, D) and
 * values (T, Hkv, Dv) packed, sequence b taking the next counts[b] >= 0
 * rows; `counts` is B int64, summing to T. Nothing is appended on failure. */
ATTNSCORE_API attnscore_status* attnscore_kv_cache_append_packed(
    attnscore_kv_cache* cache, const attnscore_tensor_view* keys,
    const attnscore_tensor_view* values, const int64_t* counts);
/* KvCache::AttendPacked: queries (T, Hq, D) packed, sequence b's the next
 * query_counts[b] rows (B int64 summing to T; 0: the sequence is idle), each
 * attended as attnscore_kv_cache_attend would attend it alone; out
 * (T, Hq, Dv). options NULL: the defaults; its bias must be NULL. */
ATTNSCORE_API attnscore_status* attnscore_kv_cache_attend_packed(
    const attnscore_kv_cache* cache, const attnscore_engine* engine,
    const attnscore_tensor_view* queries, const int64_t* query_counts,
    const attnscore_kv_cache_attend_options* options, const attnscore_tensor* out);

/* ---- The catalogue: every op and model by name (attnscore/catalogue.h) ---- */

typedef enum attnscore_dtype {
  ATTNSCORE_FLOAT32 = 0,
  ATTNSCORE_INT32 = 1,
  ATTNSCORE_INT64 = 2
} attnscore_dtype;

/* A tensor of the generic call, by its catalogue name ("queries",
 * "valid_lens", "W_q.weight", "output", ...): float32 with any strides, or
 * int32 / int64 (valid lengths) in C order. Inputs and weights are read,
 * outputs written. */
typedef struct attnscore_named_tensor {
  const char* name;
  int32_t dtype; /* attnscore_dtype */
  void* data;
  int32_t rank;
  int64_t dims[ATTNSCORE_MAX_RANK];
  int64_t strides[ATTNSCORE_MAX_RANK]; /* in elements */
} attnscore_named_tensor;

/* A parameter as text: {"num_heads", "8"}, {"causal", "top-left"}. */
typedef struct attnscore_param {
  const char* name;
  const char* value;
} attnscore_param;

/* An output's shape, as attnscore_op_check reports it. */
typedef struct attnscore_shape {
  int32_t rank;
  int64_t dims[ATTNSCORE_MAX_RANK];
} attnscore_shape;

/* The entries' names, in the catalogue's order: index 0 to size - 1; NULL
 * past the end. */
ATTNSCORE_API size_t attnscore_catalogue_size(void);
ATTNSCORE_API const char* attnscore_catalogue_name(size_t index);

typedef struct attnscore_op attnscore_op;

/* An entry ready to call: `name` a catalogue name, `params` its model
 * parameters (num_heads, query_size, a KV cache's sizes), `weights` a
 * model's tensors by their state_dict names (copied). */
ATTNSCORE_API attnscore_status* attnscore_op_create(const char* name, const attnscore_param* params,
                                                    size_t param_count,
                                                    const attnscore_named_tensor* weights,
                                                    size_t weight_count, attnscore_op** op);
/* A model from a .safetensors state_dict: its kind from params ("kind"),
 * else the file's __metadata__, else its tensor names; its parameters from
 * params, else the metadata. */
ATTNSCORE_API attnscore_status* attnscore_op_load(const char* path, const attnscore_param* params,
                                                  size_t param_count, attnscore_op** op);
ATTNSCORE_API void attnscore_op_destroy(attnscore_op* op);
/* The entry's name; "" for NULL. */
ATTNSCORE_API const char* attnscore_op_name(const attnscore_op* op);
/* A model parameter in force as text ("8"); NULL when it has none of that name. */
ATTNSCORE_API const char* attnscore_op_model_param(const attnscore_op* op, const char* name);
/* A size the model fixes, by its dim name in the catalogue ("Dq", "H",
 * "heads", ...); 0 when it fixes none of that name. */
ATTNSCORE_API int64_t attnscore_op_fixed_dim(const attnscore_op* op, const char* dim);
/* The entry's outputs: "output", then any given on request
 * ("attention_weights"); 0 and NULL out of range or for NULL. */
ATTNSCORE_API size_t attnscore_op_output_count(const attnscore_op* op);
ATTNSCORE_API const char* attnscore_op_output_name(const attnscore_op* op, size_t index);
/* Every check attnscore_op_run makes, without running; output i's shape
 * into shapes[i] for i below shape_count. */
ATTNSCORE_API attnscore_status* attnscore_op_check(
    const attnscore_op* op, const attnscore_engine* engine, const attnscore_named_tensor* inputs,
    size_t input_count, const attnscore_param* params, size_t param_count, attnscore_shape* shapes,
    size_t shape_count);
/* Runs the entry: writes the output named "output", and any other passed. */
ATTNSCORE_API attnscore_status* attnscore_op_run(
    const attnscore_op* op, const attnscore_engine* engine, const attnscore_named_tensor* inputs,
    size_t input_count, const attnscore_param* params, size_t param_count,
    const attnscore_named_tensor* outputs, size_t output_count);

#ifdef __cplusplus
}
#endif

#endif /* ATTNSCORE_C_API_H_ */
