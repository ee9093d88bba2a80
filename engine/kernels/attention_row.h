// One query row against its keys and values, for problems with very few
// queries (decode): matrix-vector products, where a oneDNN matmul spends more
// on set-up than on arithmetic. Vectorised by Highway, dispatched at run time.
#ifndef ATTNSCORE_KERNELS_ATTENTION_ROW_H_
#define ATTNSCORE_KERNELS_ATTENTION_ROW_H_

#include <cstddef>
#include <cstdint>

namespace attnscore::kernels {

// scores[j] = scale · Σ_d q[d] · k[j·k_row_stride + d] for j < keys.
// q and each key row are `depth` contiguous floats.
void ScoreRow(const float* q, size_t depth, const float* k, int64_t k_row_stride, size_t keys,
              float scale, float* scores);

// out[c] = Σ_j weights[j] · v[j·v_row_stride + c] for c < value_dim, j < keys.
// Each value row is `value_dim` contiguous floats; out is overwritten.
void MixRow(const float* weights, size_t keys, const float* v, int64_t v_row_stride,
            size_t value_dim, float* out);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_ATTENTION_ROW_H_
