#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  try {
    return attnscore::cli::RunCli(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::bad_alloc&) {
    std::fputs("attnscore: error: out of memory\n", stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnscore: error: %s\n", e.what());
  }
  return 1;
}
