#include "cli/flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

namespace attnscore::cli {
namespace {

// The short words of the entries that had them before the catalogue.
const std::map<std::string, std::string> kShortWords = {{"masked_softmax", "softmax"},
                                                        {"dot_product_attention", "dot"}};

std::string Dashed(const std::string& name) {
  std::string flag = "--" + name;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

// "a, b or c".
std::string Alternatives(const std::vector<std::string>& choices) {
  std::string text;
  for (size_t i = 0; i < choices.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  return text;
}

}  // namespace

const OpSpec* FindEntry(const std::string& word) {
  for (const auto& [name, short_word] : kShortWords) {
    if (word == short_word) return FindOp(name);
  }
  return FindOp(word);
}

std::string EntryWord(const OpSpec& spec) {
  const auto found = kShortWords.find(spec.name);
  return found == kShortWords.end() ? spec.name : found->second;
}

std::string EntryNames() {
  std::vector<std::string> words;
  for (const OpSpec& spec : Catalogue()) words.push_back(EntryWord(spec));
  return Alternatives(words);
}

std::string TensorFlag(const std::string& tensor) {
  if (tensor == "output") return "--out";
  if (tensor == "attention_weights") return "--weights-out";
  return Dashed(tensor);
}

std::string ParamFlag(const std::string& param) {
  return param == "num_heads" ? "--heads" : Dashed(param);
}

std::set<std::string> CatalogueFlags() {
  std::set<std::string> flags = {"--model"};
  for (const OpSpec& spec : Catalogue()) {
    for (const TensorSpec& t : spec.inputs) flags.insert(TensorFlag(t.name));
    for (const TensorSpec& t : spec.outputs) flags.insert(TensorFlag(t.name));
    for (const ParamSpec& p : spec.params) flags.insert(ParamFlag(p.name));
  }
  return flags;
}

const DerivedFrom* DerivedParam(const OpSpec& spec, const std::string& param) {
  static const std::map<std::pair<std::string, std::string>, DerivedFrom> derived = {
      {{"concat", "query_size"}, {"queries", 2, "Dq"}},
      {{"kv_cache_attend", "batch"}, {"keys", 0, "B"}},
      {{"kv_cache_attend", "capacity"}, {"keys", 1, "T"}},
      {{"kv_cache_attend", "kv_heads"}, {"keys", 2, "Hkv"}},
      {{"kv_cache_attend", "key_dim"}, {"keys", 3, "D"}},
      {{"kv_cache_attend", "value_dim"}, {"values", 3, "Dv"}},
      {{"kv_cache_step", "batch"}, {"query_counts", 0, "B"}},
      {{"kv_cache_step", "capacity"}, {"keys", 0, "T"}},
      {{"kv_cache_step", "kv_heads"}, {"keys", 1, "Hkv"}},
      {{"kv_cache_step", "key_dim"}, {"keys", 2, "D"}},
      {{"kv_cache_step", "value_dim"}, {"values", 2, "Dv"}}};
  const auto found = derived.find({spec.name, param});
  return found == derived.end() ? nullptr : &found->second;
}

Status FlagParams(const Args& args, const OpSpec& spec, ParamSpec::Kind kind, Params* params) {
  for (const ParamSpec& p : spec.params) {
    const std::string flag = ParamFlag(p.name);
    if (p.kind != kind || !args.has(flag)) continue;
    const std::string text = args.get(flag);
    if (p.type == ParamSpec::Type::kInt) {
      int64_t value = 0;
      // Sizes from 1; a count whose default is 0 from 0; a window's side
      // (default -1, unbounded) from -1.
      const int64_t min = p.default_value == "0" ? 0 : p.default_value == "-1" ? -1 : 1;
      ATTNSCORE_RETURN_IF_ERROR(ParseInteger(flag, text, min, int64_t{1} << 40, &value));
    } else if (p.type == ParamSpec::Type::kFloat) {
      char* end = nullptr;
      const double value = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(value)) {
        return Status::InvalidArgument(flag + " is '" + text + "'; want a finite number");
      }
    } else if (std::find(p.choices.begin(), p.choices.end(), text) == p.choices.end()) {
      return Status::InvalidArgument(flag + " wants " + Alternatives(p.choices) + ", got '" + text +
                                     "'");
    }
    (*params)[p.name] = text;
  }
  return Status::Ok();
}

bool RunNeeds(const OpSpec& spec, const TensorSpec& input) {
  if (!input.optional) return true;
  const bool over_new_positions =
      std::find(input.dims.begin(), input.dims.end(), "T") != input.dims.end();
  return spec.stateful && (over_new_positions || input.name == "counts");
}

bool RunWritesWeights(const OpSpec& spec) {
  return spec.output("attention_weights") != nullptr || spec.name == "masked_softmax";
}

std::string RunSynopsis(const OpSpec& spec) {
  const std::string head = "  attnscore run " + EntryWord(spec);
  std::vector<std::string> words;
  if (spec.is_model()) words.push_back("--model M.safetensors");
  // A parameter's value in the synopsis: N, X, or its choices.
  const auto value_of = [](const ParamSpec& p, const std::string& otherwise) {
    if (p.type != ParamSpec::Type::kChoice) return otherwise;
    std::string value;
    for (const std::string& c : p.choices) value += (value.empty() ? "" : "|") + c;
    return value;
  };
  for (const ParamSpec& p : spec.params) {
    if (p.kind != ParamSpec::Kind::kModel) continue;
    const std::string word = ParamFlag(p.name) + " " + value_of(p, "N");
    const bool optional = !p.default_value.empty() || DerivedParam(spec, p.name) != nullptr;
    words.push_back(optional ? "[" + word + "]" : word);
  }
  for (const TensorSpec& t : spec.inputs) {
    std::string upper =
        t.name == "valid_lens" ? "L" : std::string(1, static_cast<char>(std::toupper(t.name[0])));
    const std::string word = TensorFlag(t.name) + " " + upper + ".npy";
    words.push_back(RunNeeds(spec, t) ? word : "[" + word + "]");
  }
  for (const ParamSpec& p : spec.params) {
    if (p.kind != ParamSpec::Kind::kCall) continue;
    words.push_back("[" + ParamFlag(p.name) + " " +
                    value_of(p, p.type == ParamSpec::Type::kInt ? "N" : "X") + "]");
  }
  words.push_back("--out O.npy");
  if (RunWritesWeights(spec)) words.push_back("[--weights-out W.npy]");
  // Wrapped at 78 columns, continuation lines under the first flag.
  std::string text = head, line = head;
  const std::string indent(24, ' ');
  for (const std::string& word : words) {
    if (line.size() + 1 + word.size() > 78 && line != head) {
      text += "\n" + indent;
      line = indent;
    } else {
      text += " ";
      line += " ";
    }
    text += word;
    line += word;
  }
  return text + "\n";
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace attnscore::cli
