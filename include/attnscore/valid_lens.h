// Valid lengths: how many leading keys each query may attend to.
#ifndef ATTNSCORE_VALID_LENS_H_
#define ATTNSCORE_VALID_LENS_H_

#include <cstdint>

namespace attnscore {

// None (every key valid), one length per batch entry (B,), or one per query
// (B, N); int32 or int64, contiguous. A length L >= M means all M keys; L = 0
// means uniform weights 1/M (as the reference's -1e6 mask gives); L < 0 is an
// error.
struct ValidLens {
  enum class Kind { kNone, kPerBatch, kPerQuery };

  Kind kind = Kind::kNone;
  bool is_int64 = false;
  const void* data = nullptr;
  int64_t dims[2] = {};  // (B) or (B, N)

  static ValidLens None() { return ValidLens(); }
  static ValidLens PerBatch(const int32_t* lens, int64_t batch) {
    return Make(Kind::kPerBatch, false, lens, batch, 0);
  }
  static ValidLens PerBatch(const int64_t* lens, int64_t batch) {
    return Make(Kind::kPerBatch, true, lens, batch, 0);
  }
  static ValidLens PerQuery(const int32_t* lens, int64_t batch, int64_t queries) {
    return Make(Kind::kPerQuery, false, lens, batch, queries);
  }
  static ValidLens PerQuery(const int64_t* lens, int64_t batch, int64_t queries) {
    return Make(Kind::kPerQuery, true, lens, batch, queries);
  }

 private:
  static ValidLens Make(Kind kind, bool is_int64, const void* data, int64_t d0,
                        int64_t d1) {
    ValidLens lens;
    lens.kind = kind;
    lens.is_int64 = is_int64;
    lens.data = data;
    lens.dims[0] = d0;
    lens.dims[1] = d1;
    return lens;
  }
};

}  // namespace attnscore

#endif  // ATTNSCORE_VALID_LENS_H_
