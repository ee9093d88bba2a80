// The benches' shared parts: see bench_common.h.
#include "cli/bench_common.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "cli/common.h"

namespace attnscore::cli {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

// `j` as JSON on one line with ", " between items and ": " after keys
// (nlohmann's compact dump has no spaces; tests and scripts look for
// `"key": `). Invalid UTF-8 in a string (a --valid-lens path) becomes U+FFFD.
std::string OneLine(const Json& j) {
  const auto dump = [](const Json& scalar) {
    return scalar.dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  std::string s;
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      s += (s.empty() ? "{" : ", ") + dump(Json(key)) + ": " + OneLine(value);
    }
    return s.empty() ? "{}" : s + "}";
  }
  if (j.is_array()) {
    for (const Json& value : j) s += (s.empty() ? "[" : ", ") + OneLine(value);
    return s.empty() ? "[]" : s + "]";
  }
  return dump(j);
}

// The distinct implementations oneDNN chose for the process's matmuls,
// sorted by name.
Json OnednnImplementations(const RuntimeInfo& info) {
  std::set<std::string> names;
  for (const MatmulInfo& matmul : info.matmuls) names.insert(matmul.implementation);
  Json list = Json::array();
  for (const std::string& name : names) list.push_back(name);
  return list;
}

Status TimeCalls(const std::function<Status()>& call, int64_t repeat,
                 std::vector<double>* times_us) {
  for (int w = 0; w < 3; ++w) ATTNSCORE_RETURN_IF_ERROR(call());
  for (int64_t r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const Status s = call();
    const auto stop = std::chrono::steady_clock::now();
    ATTNSCORE_RETURN_IF_ERROR(s);
    times_us->push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  return Status::Ok();
}

namespace {

// The bytes of memory this machine has; 0 if it cannot tell.
double PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0;
}

}  // namespace

Status CheckBenchBuffers(const std::string& op, const BenchBuffers& buffers) {
  double total_bytes = 0;
  for (const auto& [name, dims] : buffers) {
    ATTNSCORE_RETURN_IF_ERROR(CheckOutputSize("bench " + name, dims));
    double floats = 1;
    for (int64_t n : dims) floats *= static_cast<double>(n);
    total_bytes += 4 * floats;
  }
  const double memory = PhysicalMemoryBytes();
  if (memory > 0 && total_bytes > memory) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "bench %s would allocate %.1f GiB of tensors, more than this machine's %.1f GiB "
                  "of memory",
                  op.c_str(), total_bytes / (1 << 30), memory / (1 << 30));
    return Status::InvalidArgument(text);
  }
  return Status::Ok();
}

Status CheckInfoWithoutJson(const Args& args) {
  if (!args.has("--json") || !args.has("--info")) return Status::Ok();
  return Status::InvalidArgument(
      "--info and --json both print to stdout; the JSON already has highway_target and "
      "onednn_implementations");
}

bool ParseNumber(const std::string& text, double* value) {
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0' && !std::isnan(*value);
}

}  // namespace attnscore::cli
