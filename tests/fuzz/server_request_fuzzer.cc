// libFuzzer target: the server's inference requests (server/infer.h) on
// arbitrary bodies, JSON and binary tensor data alike, against the built-in
// ops and a golden model of each kind (additive, concat, bilinear,
// multihead). Every answer must be a 200 whose JSON and binary parts add up,
// or a 400 with {"error": text}: a 500 (the engine's Internal) or a crash is
// a bug.
//
// Input: byte 0 picks the model; bytes 1-2 say where the JSON ends (0xffff:
// the whole body is JSON); the rest is the body.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnscore/attnscore.h"
#include "infer.h"
#include "models.h"

namespace {

using attnscore::server::Model;
using nlohmann::json;

struct Served {
  std::unique_ptr<attnscore::Engine> engine;
  attnscore::server::ModelMap models;
  std::vector<const Model*> list;
};

// The built-ins and the golden models (tools/fuzz runs from the repository
// root), loaded through LoadModels from a temporary folder.
const Served& Models() {
  static const Served served = [] {
    Served s;
    if (!attnscore::Engine::Create(attnscore::EngineOptions(), &s.engine).ok()) std::abort();
    namespace fs = std::filesystem;
    const fs::path folder =
        fs::temp_directory_path() / ("attnscore-fuzz-models-" + std::to_string(getpid()));
    fs::create_directories(folder);
    fs::copy_file("tests/golden/additive_toy/model.safetensors", folder / "additive.safetensors",
                  fs::copy_options::overwrite_existing);
    fs::copy_file("tests/golden/concat_tutorial/model.safetensors", folder / "concat.safetensors",
                  fs::copy_options::overwrite_existing);
    fs::copy_file("tests/golden/bilinear_per_query/model.safetensors",
                  folder / "bilinear.safetensors", fs::copy_options::overwrite_existing);
    fs::copy_file("tests/golden/multihead_causal_self/model.safetensors",
                  folder / "multihead.safetensors", fs::copy_options::overwrite_existing);
    for (const auto& [name, text] : {std::pair{"concat.json", "{\"query_size\": 32}"},
                                     std::pair{"multihead.json", "{\"num_heads\": 4}"}}) {
      std::FILE* sidecar = std::fopen((folder / name).c_str(), "w");
      if (sidecar == nullptr) std::abort();
      std::fputs(text, sidecar);
      std::fclose(sidecar);
    }
    if (!attnscore::server::LoadModels(folder.string(), &s.models).ok()) std::abort();
    fs::remove_all(folder);
    for (const auto& [name, model] : s.models) s.list.push_back(model.get());
    // Four built-in ops and the four model files, every one ready.
    for (const Model* model : s.list) {
      if (!model->ready()) std::abort();
    }
    if (s.list.size() != 8) std::abort();
    return s;
  }();
  return served;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const Served& served = Models();
  const Model& model = *served.list[data[0] % served.list.size()];
  const std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);
  const size_t split = static_cast<size_t>(data[1]) << 8 | data[2];
  const size_t json_bytes = split == 0xffff ? body.size() : split;

  const attnscore::server::InferAnswer answer =
      attnscore::server::Infer(model, *served.engine, body, json_bytes, int64_t{1} << 20);
  if (answer.json_bytes > answer.body.size()) std::abort();
  const json head = json::parse(answer.body.substr(0, answer.json_bytes), nullptr, false);
  if (!head.is_object()) std::abort();
  if (answer.status == 400) {
    if (!head.contains("error") || !head["error"].is_string()) std::abort();
    return 0;
  }
  if (answer.status != 200 || !head.contains("outputs")) std::abort();
  // The binary parts are the outputs' binary_data_size, in order, exactly.
  size_t binary = 0;
  for (const json& output : head["outputs"]) {
    size_t count = 1;
    for (const json& dim : output["shape"]) count *= dim.get<size_t>();
    if (output.contains("data")) {
      if (output["data"].size() != count) std::abort();
    } else {
      const size_t bytes = output["parameters"]["binary_data_size"].get<size_t>();
      if (bytes != count * sizeof(float)) std::abort();
      binary += bytes;
    }
  }
  if (answer.json_bytes + binary != answer.body.size()) std::abort();
  return 0;
}
