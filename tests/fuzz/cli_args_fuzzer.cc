// libFuzzer target: the CLI's argument parser (tools/cli/args) on arbitrary
// argument vectors, the input split at NUL bytes. Every outcome is a Status;
// what it accepts must agree with the vector: every element a command word,
// a flag (--flag or --flag=value) or a flag's value; CheckFlags passing only for known flags with the
// required one present; every integer accepted equal to its text's value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cli/args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using attnscore::cli::Args;
  std::vector<std::string> argv(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\0') {
      argv.emplace_back();
    } else {
      argv.back() += static_cast<char>(data[i]);
    }
  }
  // The tool's switches and its bench command's flags.
  const std::set<std::string> switches = {"--json", "--help", "--weights", "--info"};
  const std::set<std::string> valued = {"--batch", "--queries", "--keys", "--repeat",
                                        "--threads", "--isa"};
  Args args;
  if (!attnscore::cli::ParseArgs(argv, switches, valued, &args).ok()) return 0;
  // Every element is a command word, a flag ("--flag" or "--flag=value") or
  // the value of the flag before it, exactly once.
  size_t flag_elements = 0, separate_values = 0;
  for (const std::string& element : argv) {
    if (element.rfind("--", 0) != 0) continue;
    ++flag_elements;
    const size_t equals = element.find('=');
    if (equals == std::string::npos && valued.count(element)) ++separate_values;
  }
  if (flag_elements != args.flags.size()) std::abort();
  if (args.words.size() + flag_elements + separate_values != argv.size()) std::abort();
  const std::set<std::string> bench_flags = {"--batch", "--queries", "--keys", "--repeat",
                                             "--threads", "--isa", "--json", "--info"};
  if (attnscore::cli::CheckFlags(args, bench_flags, {"--batch"}, "bench dot").ok()) {
    if (!args.has("--batch")) std::abort();
    for (const auto& [flag, value] : args.flags) {
      if (!bench_flags.count(flag)) std::abort();
    }
  }
  for (const char* flag : {"--batch", "--queries", "--keys", "--repeat", "--threads"}) {
    int64_t value = -7;
    if (!attnscore::cli::ParseInt(args, flag, 3, 1, 1 << 20, &value).ok()) continue;
    const long long expected = args.has(flag) ? std::strtoll(args.get(flag).c_str(), nullptr, 10) : 3;
    if (value != expected || value < 1 || value > (1 << 20)) std::abort();
  }
  return 0;
}
