// attnscore_bench's main: the engine's own flags, then Google Benchmark's.
//
//   attnscore_bench [--isa scalar|sse4|avx2|avx512|best] [--threads T]
//                   [--precision fp32|bf16] [--benchmark_... flags]
//
// --isa defaults to best, which yields to $ATTNSCORE_ISA; --threads to
// $ATTNSCORE_BENCH_THREADS, else 1 (the *TwoThreads benchmarks set 1 and 2
// threads side by side, whatever it says); --precision to fp32 (bf16 also gives
// the plain oneDNN peer bf16 inputs, where oneDNN has bf16 arithmetic).
// With --benchmark_out (JSON), the file's context also names, for every
// benchmark, the Highway target and the oneDNN implementations that ran it
// (its label).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attnscore/engine.h"
#include "bench_util.h"

namespace {

constexpr char kUsage[] =
    "attnscore_bench [--isa scalar|sse4|avx2|avx512|best] [--threads T] [--precision fp32|bf16]\n"
    "                [benchmark flags]\n"
    "  --isa        the process's ISA cap (default best, which yields to $ATTNSCORE_ISA)\n"
    "  --threads    engine threads (default $ATTNSCORE_BENCH_THREADS, else 1); the\n"
    "               *TwoThreads benchmarks set 1 and 2 side by side, whatever it says\n"
    "  --precision  the engine's precision (default fp32); bf16 gives the plain oneDNN\n"
    "               matmul peer bf16 inputs too, where the CPU has bf16 arithmetic\n";

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr, "attnscore_bench: error: %s\n%s", error.c_str(), kUsage);
  std::exit(2);
}

int ParseThreads(const std::string& name, const std::string& value) {
  char* end = nullptr;
  const long threads = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || threads < 1 || threads > 1024) {
    Usage(name + " is '" + value + "'; want an integer in [1, 1024]");
  }
  return static_cast<int>(threads);
}

// Takes --isa, --threads and --precision (as "--flag value" or "--flag=value") out of argv.
attnscore::EngineOptions TakeEngineFlags(int* argc, char** argv) {
  attnscore::EngineOptions options;
  if (const char* threads = std::getenv("ATTNSCORE_BENCH_THREADS")) {
    options.threads = ParseThreads("ATTNSCORE_BENCH_THREADS", threads);
  }
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    std::string flag, value;
    for (const char* name : {"--isa", "--threads", "--precision"}) {
      if (arg == name) {
        if (i + 1 >= *argc) Usage(arg + " needs a value");
        flag = name, value = argv[++i];
      } else if (arg.rfind(std::string(name) + "=", 0) == 0) {
        flag = name, value = arg.substr(std::strlen(name) + 1);
      }
    }
    if (flag.empty()) {
      argv[kept++] = argv[i];
    } else if (flag == "--isa" && !attnscore::ParseIsa(value, &options.isa)) {
      Usage("--isa is '" + value + "'; want scalar, sse4, avx2, avx512 or best");
    } else if (flag == "--precision" && !attnscore::ParsePrecision(value, &options.precision)) {
      Usage("--precision is '" + value + "'; want fp32 or bf16");
    } else if (flag == "--threads") {
      options.threads = ParseThreads("--threads", value);
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
  return options;
}

// The JSON file reporter, holding everything back until the end: Google
// Benchmark writes the context before the first benchmark runs, and which
// implementation oneDNN picks is only known once a benchmark has run.
class JsonWithImplementations : public benchmark::JSONReporter {
 public:
  bool ReportContext(const Context& context) override {
    context_.emplace(context);
    return true;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    runs_.insert(runs_.end(), runs.begin(), runs.end());
  }
  void Finalize() override {
    std::set<std::string> named;
    for (const Run& run : runs_) {
      const std::string name = run.run_name.str();
      if (!run.report_label.empty() && named.insert(name).second) {
        benchmark::AddCustomContext("implementation " + name, run.report_label);
      }
    }
    if (context_) JSONReporter::ReportContext(*context_);
    JSONReporter::ReportRuns(runs_);
    JSONReporter::Finalize();
  }

 private:
  std::optional<Context> context_;
  std::vector<Run> runs_;
};

// Whether Google Benchmark will write a JSON file (its default format); its
// flags may also come from the environment, as BENCHMARK_OUT and the like.
bool WritesJsonFile(int argc, char** argv) {
  const char* out_env = std::getenv("BENCHMARK_OUT");
  const char* format_env = std::getenv("BENCHMARK_OUT_FORMAT");
  bool out = out_env != nullptr && *out_env != '\0';
  bool json = format_env == nullptr || std::string(format_env) == "json";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--benchmark_out=", 0) == 0) out = arg.size() > 16;
    if (arg.rfind("--benchmark_out_format=", 0) == 0) json = arg == "--benchmark_out_format=json";
  }
  return out && json;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) std::fputs(kUsage, stdout);  // then Google Benchmark's
  }
  attnscore::bench::SetEngineOptions(TakeEngineFlags(&argc, argv));
  const bool json_file = WritesJsonFile(argc, argv);  // before Initialize takes the flags
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  attnscore::bench::SharedEngine();  // its context must exist before any is reported
  JsonWithImplementations json;
  benchmark::RunSpecifiedBenchmarks(nullptr, json_file ? &json : nullptr);
  benchmark::Shutdown();
  return 0;
}
