#include "cli/args.h"

#include <cerrno>
#include <cstdlib>

namespace attnscore::cli {

std::string Args::get(const std::string& flag, const std::string& fallback) const {
  auto it = flags.find(flag);
  return it == flags.end() ? fallback : it->second;
}

Status ParseArgs(const std::vector<std::string>& argv, const std::set<std::string>& switches,
                 const std::set<std::string>& valued, Args* args) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (word.rfind("--", 0) != 0) {
      args->words.push_back(word);
      continue;
    }
    // --flag=value is --flag value.
    const size_t equals = word.find('=');
    const std::string flag = word.substr(0, equals);
    if (!switches.count(flag) && !valued.count(flag)) {
      return Status::InvalidArgument("unknown flag " + flag + " (see attnscore --help)");
    }
    if (args->flags.count(flag)) return Status::InvalidArgument(flag + " is given twice");
    if (switches.count(flag)) {
      if (equals != std::string::npos) return Status::InvalidArgument(flag + " takes no value");
      args->flags[flag] = "";
    } else if (equals != std::string::npos) {
      if (equals + 1 == word.size()) return Status::InvalidArgument(flag + " needs a value");
      args->flags[flag] = word.substr(equals + 1);
    } else {
      if (i + 1 >= argv.size() || argv[i + 1].rfind("--", 0) == 0) {
        return Status::InvalidArgument(flag + " needs a value");
      }
      args->flags[flag] = argv[++i];
    }
  }
  return Status::Ok();
}

Status CheckFlags(const Args& args, const std::set<std::string>& allowed,
                  const std::set<std::string>& required, const std::string& command) {
  for (const auto& [flag, value] : args.flags) {
    if (!allowed.count(flag)) {
      return Status::InvalidArgument("unknown flag " + flag + " for '" + command +
                                     "' (see attnscore --help)");
    }
  }
  for (const std::string& flag : required) {
    if (!args.has(flag)) {
      return Status::InvalidArgument("'" + command + "' needs " + flag);
    }
  }
  return Status::Ok();
}

Status ParseInteger(const std::string& what, const std::string& text, int64_t min, int64_t max,
                    int64_t* value) {
  // An optional '-' and decimal digits, nothing else (strtoll alone would
  // also take spaces and '+'), within int64.
  const size_t digits_from = !text.empty() && text[0] == '-' ? 1 : 0;
  const bool all_digits = text.size() > digits_from && text.size() - digits_from <= 19 &&
                          text.find_first_not_of("0123456789", digits_from) == std::string::npos;
  char* end = nullptr;
  errno = 0;
  const long long parsed = all_digits ? std::strtoll(text.c_str(), &end, 10) : 0;
  if (!all_digits || errno == ERANGE) {
    return Status::InvalidArgument(what + " wants an integer, got '" + text + "'");
  }
  if (parsed < min || parsed > max) {
    return Status::InvalidArgument(what + " is " + text + "; it must be in [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *value = parsed;
  return Status::Ok();
}

Status ParseInt(const Args& args, const std::string& flag, int64_t fallback, int64_t min,
                int64_t max, int64_t* value) {
  if (!args.has(flag)) {
    *value = fallback;
    return Status::Ok();
  }
  return ParseInteger(flag, args.get(flag), min, max, value);
}

}  // namespace attnscore::cli
