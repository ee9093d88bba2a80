#include <string>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  return attnscore::cli::RunCli(std::vector<std::string>(argv + 1, argv + argc));
}
