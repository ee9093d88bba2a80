#include "infer.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "tensors.h"

namespace attnscore::server {

using nlohmann::json;

namespace {
constexpr int kMaxDepth = 4 + kMaxRank;
}  // namespace

std::string ErrorBody(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

InferAnswer Infer(const Model& model, const Engine& engine, std::string_view body,
                  size_t json_bytes, int64_t max_output_elements) {
  InferAnswer answer;
  auto fail = [&answer](int status, const std::string& message) {
    answer.status = status;
    answer.body = ErrorBody(message);
    answer.json_bytes = answer.body.size();
    return answer;
  };
  if (json_bytes > body.size()) {
    return fail(400, "the JSON's length " + std::to_string(json_bytes) + " is over the body's " +
                         std::to_string(body.size()) + " bytes");
  }
  // A request nests at most kMaxDepth deep (the body, inputs, an input,
  // its data, and data nested as a shape of kMaxRank dims); deeper nesting
  // is refused as it is read, before it costs memory (each level a value).
  struct TooDeep {};
  const json::parser_callback_t limit_depth = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) throw TooDeep{};
    return true;
  };
  // nlohmann's parser takes a NUL byte for the end of its input: what
  // follows one would go unread.
  const std::string_view json_text = std::string_view(body).substr(0, json_bytes);
  if (const size_t nul = json_text.find('\0'); nul != std::string_view::npos) {
    return fail(400, "malformed JSON: a NUL byte at offset " + std::to_string(nul));
  }
  json request;
  try {
    request = json::parse(json_text, limit_depth);
  } catch (const json::exception& e) {  // a syntax error, or a number past double's range
    return fail(400, std::string("malformed JSON: ") + e.what());
  } catch (const TooDeep&) {
    return fail(400, "the JSON nests deeper than " + std::to_string(kMaxDepth) +
                         " levels; a request needs at most that");
  }
  std::vector<InputTensor> inputs;
  std::vector<RequestedOutput> requested;
  std::vector<OutputData> outputs;
  Status status = ParseInputs(request, body.substr(json_bytes), &inputs);
  if (status.ok()) status = ParseRequestedOutputs(request, &requested);
  if (status.ok()) {
    const auto parameters = request.find("parameters");
    status = model.Infer(engine, inputs, parameters == request.end() ? json() : *parameters,
                         requested, max_output_elements, &outputs);
  }
  if (!status.ok()) {
    const bool client =
        status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kUnsupported;
    return fail(client ? 400 : 500, status.message());
  }
  json head = {{"model_name", model.name()}, {"model_version", "1"}};
  const auto id = request.find("id");
  if (id != request.end() && id->is_string()) head["id"] = *id;
  answer.body = AnswerBody(std::move(head), outputs, &answer.json_bytes);
  return answer;
}

}  // namespace attnscore::server
