// Test helpers for the file readers (.npy, .safetensors): a temporary
// directory per test, and the checks every rejected file must pass.
#ifndef ATTNSCORE_TESTS_IO_TEST_UTIL_H_
#define ATTNSCORE_TESTS_IO_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::io {

// A fresh directory for each test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix_ + ".XXXXXX")).string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::string WriteRaw(const std::string& name, const std::string& bytes) const {
    const std::string path = Path(name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // Names in the temp dir, sorted: shows stray temporary files.
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

// A failed read of `path`: the expected code, a message that starts with the
// path and mentions `fragment`.
inline ::testing::AssertionResult FailedAs(const Status& status, const std::string& path,
                                           StatusCode code, const std::string& fragment) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "code " << StatusCodeName(status.code()) << ", want " << StatusCodeName(code)
           << "; message: " << status.message();
  }
  if (status.message().rfind(path + ": ", 0) != 0) {
    return ::testing::AssertionFailure()
           << "message does not start with the path: " << status.message();
  }
  if (status.message().find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message lacks \"" << fragment << "\": " << status.message();
  }
  return ::testing::AssertionSuccess() << status.message();
}

}  // namespace attnscore::io

#endif  // ATTNSCORE_TESTS_IO_TEST_UTIL_H_
