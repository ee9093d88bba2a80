// The score kernel of additive attention (docs/semantics.md section 3):
//   S[i, j] = Σ_h w_v[h] · tanh(Qh[i, h] + Kh[j, h])
// computed tile by tile, never materialising the (N, M, H) features:
// several query rows share each loaded vector of keys (register blocking).
// Vectorised by Highway, dispatched at run time; the fast tanh and its
// measured error are described in additive_scores-inl.h.
#ifndef ATTNSCORE_KERNELS_ADDITIVE_SCORES_H_
#define ATTNSCORE_KERNELS_ADDITIVE_SCORES_H_

#include <cstddef>

namespace attnscore::kernels {

// Query rows that one AdditiveScoreBlock call shares every key vector among.
inline constexpr size_t kAdditiveRowBlock = 4;

// Key columns are read and scores written in whole vectors: callers pad
// rows to a multiple of this many floats (the widest target's lanes).
inline constexpr size_t kAdditivePadFloats = 16;

// Factors are exp(2·x) with x clamped to ±kTanhFactorClamp, so a product of
// two stays finite. The clamp leaves tanh(a + b) exact in float when either
// side is within ±kTanhFactorExactBound (tanh rounds to ±1 beyond ±9.01,
// and 22 − 12 = 10) or when neither side reaches the clamp.
inline constexpr float kTanhFactorClamp = 22.0f;
inline constexpr float kTanhFactorExactBound = 12.0f;

enum class TanhMode {
  kExpProduct,  // the fast tanh; inputs are factors from ToTanhFactors
  kHighway,     // Highway's Tanh of a + b; inputs are the projections themselves
};

// max |x[i]|; NaN is ignored or returned, depending on the target.
float MaxAbs(const float* x, size_t count);

// In place: x[i] = exp(2·clamp(x[i], ±kTanhFactorClamp)); NaN stays NaN.
void ToTanhFactors(float* x, size_t count);

// For r < rows (1..kAdditiveRowBlock) and j < width:
//   out_rows[r][j] = Σ_h w_v[h] · tanh(q_rows[r][h] + k_cols[h·k_stride + j])
// in `mode` (kExpProduct takes factors; w_sum must be Σ_h w_v[h]). Reads
// and writes columns up to width rounded up to kAdditivePadFloats, so each
// k_cols row and out row must have that many floats (pad with anything
// finite or not: padding never reaches a column below width).
void AdditiveScoreBlock(TanhMode mode, const float* const* q_rows, size_t rows,
                        const float* k_cols, size_t k_stride, size_t hidden, const float* w_v,
                        float w_sum, size_t width, float* const* out_rows);

// out[i] = tanh(x[i]) by Highway's Tanh: the benchmark's peer.
void HighwayTanhArray(const float* x, size_t count, float* out);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_ADDITIVE_SCORES_H_
