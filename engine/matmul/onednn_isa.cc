// oneDNN's ISA: the cap the engine sets, and what oneDNN reports.
#include <string>

#include "matmul/matmul.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace attnscore::matmul {

bool NativeBf16() {
  // oneDNN's ISA values are masks, each holding the features of those below it.
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bf16) == bf16;
}

Status SetMaxIsa(Isa isa) {
  dnnl::cpu_isa cap = dnnl::cpu_isa::all;
  switch (isa) {
    // oneDNN has no scalar code path; SSE4.1 is its floor.
    case Isa::kScalar:
    case Isa::kSse4:
      cap = dnnl::cpu_isa::sse41;
      break;
    case Isa::kAvx2:
      cap = dnnl::cpu_isa::avx2;
      break;
    // AVX-512 with its VNNI and bf16 extensions, but not AMX.
    case Isa::kAvx512:
      cap = dnnl::cpu_isa::avx512_core_bf16;
      break;
    case Isa::kBest:
      cap = dnnl::cpu_isa::all;
      break;
  }
  try {
    dnnl::set_max_cpu_isa(cap);
  } catch (const dnnl::error& e) {
    return Status::Unsupported(
        std::string("oneDNN's ISA can only be capped before its first primitive: ") + e.what());
  }
  return Status::Ok();
}

std::string OnednnVersion() {
  const dnnl_version_t* v = dnnl::version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string OnednnIsa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace attnscore::matmul
