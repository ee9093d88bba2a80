#include "cli/common.h"

#include <cstdio>

namespace attnscore::cli {

std::string EscapeControlBytes(const std::string& text) {
  std::string line;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      line += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      line += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
    }
  }
  return line;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "attnscore: error: %s\n", EscapeControlBytes(status.message()).c_str());
  return status.code() == StatusCode::kInternal ? kExitInternal : kExitBadInput;
}

Status MakeEngine(const Args& args, const std::string& op, std::unique_ptr<Engine>* engine) {
  EngineOptions options;
  int64_t threads;
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--threads", 1, 1, 1024, &threads));
  options.threads = static_cast<int>(threads);
  const std::string isa = args.get("--isa", "best");
  if (!ParseIsa(isa, &options.isa)) {
    return Status::InvalidArgument("--isa is '" + isa +
                                   "'; want scalar, sse4, avx2, avx512 or best");
  }
  const std::string precision = args.get("--precision", "fp32");
  if (!ParsePrecision(precision, &options.precision) || options.precision == Precision::kInt8) {
    return Status::InvalidArgument("--precision is '" + precision + "'; want fp32 or bf16");
  }
  if (options.precision == Precision::kBf16 && !op.empty() && op != "dot") {
    return Status::InvalidArgument("--precision bf16: only dot has a bf16 mode; " + op +
                                   " runs in fp32");
  }
  return Engine::Create(options, engine);
}

void PrintInfo(const Engine& engine) {
  std::printf("attnscore %s\n%s", Version(), engine.Describe().c_str());
}

Status CheckOutputSize(const std::string& what, const std::vector<int64_t>& shape) {
  int64_t floats = 1;
  for (int64_t n : shape) {
    if (__builtin_mul_overflow(floats, n, &floats) || floats > kMaxOutputFloats) {
      return Status::InvalidArgument(what + " would need more than 2^31 floats (8 GiB)");
    }
  }
  return Status::Ok();
}

}  // namespace attnscore::cli
