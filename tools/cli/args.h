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

// Splits argv into words and flags. `switches` take no value, `valued` take
// one, as "--flag value" or "--flag=value"; any other flag is refused as
// unknown, and so is a flag given twice or missing its value.
Status ParseArgs(const std::vector<std::string>& argv, const std::set<std::string>& switches,
                 const std::set<std::string>& valued, Args* args);
// Every flag must be one the command takes (`allowed`), and `required` ones
// must be there.
Status CheckFlags(const Args& args, const std::set<std::string>& allowed,
                  const std::set<std::string>& required, const std::string& command);

// The one integer parser of every flag: an optional '-' and decimal digits,
// within [min, max]; errors name `what` (the flag).
Status ParseInteger(const std::string& what, const std::string& text, int64_t min, int64_t max,
                    int64_t* value);

// "--batch 4" -> 4 by ParseInteger; `fallback` when the flag is absent.
Status ParseInt(const Args& args, const std::string& flag, int64_t fallback, int64_t min,
                int64_t max, int64_t* value);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_ARGS_H_
