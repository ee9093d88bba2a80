// Command-line parsing for the attnscore tool: words and --flag [value] pairs,
// in any order.
#ifndef ATTNSCORE_TOOLS_CLI_ARGS_H_
#define ATTNSCORE_TOOLS_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::cli {

struct Args {
  std::vector<std::string> words;            // e.g. {"run", "dot"}
  std::map<std::string, std::string> flags;  // "--out" -> "o.npy"; switches map to ""

  bool has(const std::string& flag) const { return flags.count(flag) != 0; }
  std::string get(const std::string& flag, const std::string& fallback = "") const;
};

// Splits argv. `switches` are the flags that take no value. Every flag must be
// known to the command (`allowed`); a flag given twice or missing its value is
// an error.
Status ParseArgs(const std::vector<std::string>& argv,
                 const std::set<std::string>& switches, Args* args);
Status CheckFlags(const Args& args, const std::set<std::string>& allowed,
                  const std::set<std::string>& required, const std::string& command);

// "--batch 4" -> 4, within [min, max]; an error names the flag otherwise.
Status ParseInt(const Args& args, const std::string& flag, int64_t fallback,
                int64_t min, int64_t max, int64_t* value);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_ARGS_H_
