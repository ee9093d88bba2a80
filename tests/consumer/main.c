/* An out-of-tree C11 program on the installed library's C API: d2l's toy,
 * then one bad call. Exits 0 only if the toy's output is right and the bad
 * call is refused with a message naming the argument, having written
 * nothing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnscore/c_api.h"

static attnscore_tensor_view View3(const float* data, int64_t d0, int64_t d1, int64_t d2) {
  attnscore_tensor_view v = {data, 3, {d0, d1, d2, 0}, {d1 * d2, d2, 1, 0}};
  return v;
}

int main(void) {
  float q[2 * 1 * 2], k[2 * 10 * 2], v[2 * 10 * 4], out[2 * 4];
  const int64_t lens_data[2] = {2, 6};
  const float want[8] = {2, 3, 4, 5, 10, 11, 12, 13};
  int i;
  for (i = 0; i < 4; ++i) q[i] = 0.5f;
  for (i = 0; i < 40; ++i) k[i] = 1.0f;
  for (i = 0; i < 80; ++i) v[i] = (float)(i % 40);
  for (i = 0; i < 8; ++i) out[i] = -1.0f;

  attnscore_engine_options options = attnscore_default_engine_options();
  attnscore_engine* engine = NULL;
  attnscore_status* s = attnscore_engine_create(&options, &engine);
  if (s != NULL) {
    fprintf(stderr, "create: %s\n", attnscore_status_message(s));
    attnscore_status_free(s);
    return 1;
  }
  printf("attnscore %s (C API)\n", attnscore_version());

  attnscore_tensor_view qv = View3(q, 2, 1, 2), kv = View3(k, 2, 10, 2), vv = View3(v, 2, 10, 4);
  attnscore_tensor o = {out, 3, {2, 1, 4, 0}, {4, 4, 1, 0}};
  attnscore_valid_lens lens = {ATTNSCORE_LENS_PER_BATCH, ATTNSCORE_LENS_INT64, lens_data, {2, 0}};
  s = attnscore_dot_product_attention(engine, &qv, &kv, &vv, &lens, &o, NULL);
  if (s != NULL) {
    fprintf(stderr, "toy: %s\n", attnscore_status_message(s));
    attnscore_status_free(s);
    return 1;
  }
  for (i = 0; i < 8; ++i) {
    if (fabsf(out[i] - want[i]) > 1e-5f) return fprintf(stderr, "toy: out[%d] = %g\n", i, out[i]), 1;
  }
  printf("toy: [[2, 3, 4, 5]], [[10, 11, 12, 13]]\n");

  /* A bad call: V with 9 rows for 10 keys. */
  vv = View3(v, 2, 9, 4);
  for (i = 0; i < 8; ++i) out[i] = -1.0f;
  s = attnscore_dot_product_attention(engine, &qv, &kv, &vv, &lens, &o, NULL);
  printf("bad call: %s: %s\n", attnscore_status_code_name(attnscore_status_get_code(s)),
         attnscore_status_message(s));
  if (attnscore_status_get_code(s) != ATTNSCORE_INVALID_ARGUMENT ||
      strstr(attnscore_status_message(s), "values") == NULL || out[0] != -1.0f) {
    attnscore_status_free(s);
    return 1;
  }
  attnscore_status_free(s);
  attnscore_engine_destroy(engine);
  return 0;
}
