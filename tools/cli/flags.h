// How the catalogue's entries appear on the command line: the word that
// names each entry, the flag of each input, output and parameter, and the
// model parameters the CLI reads off an input's shape. `run` is built from
// these alone (cli/run.h); docs/cli.md lists the result.
#ifndef ATTNSCORE_TOOLS_CLI_FLAGS_H_
#define ATTNSCORE_TOOLS_CLI_FLAGS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/args.h"

namespace attnscore::cli {

// The entry a command-line word names: the catalogue's names, and the
// short words softmax (masked_softmax) and dot (dot_product_attention).
const OpSpec* FindEntry(const std::string& word);
// The word the CLI names `spec` by: its short word if it has one.
std::string EntryWord(const OpSpec& spec);
// Every entry's word, comma-separated, in the catalogue's order.
std::string EntryNames();

// "--valid-lens" for valid_lens; output is --out, attention_weights
// --weights-out.
std::string TensorFlag(const std::string& tensor);

// Whether `run` needs `input` of `spec`: a required input, or for a KV
// cache made for one run (which starts empty) what it appends, the inputs
// over its new positions T and (packed) their counts.
bool RunNeeds(const OpSpec& spec, const TensorSpec& input);
// Whether `run` takes --weights-out for `spec`: an entry that gives the
// attention weights, or the masked softmax, whose output is its weights.
bool RunWritesWeights(const OpSpec& spec);
// "--causal" for causal; num_heads is --heads.
std::string ParamFlag(const std::string& param);
// Every flag of every entry that takes a value.
std::set<std::string> CatalogueFlags();

// A model parameter `run` reads off an input when its flag is absent:
// concat's query_size is Dq of --queries; a KV cache's sizes are those of
// --keys and --values.
struct DerivedFrom {
  std::string input;
  int dim;
  std::string label;  // the dim's name, for messages
};
const DerivedFrom* DerivedParam(const OpSpec& spec, const std::string& param);

// The parameters of `kind` that `args` gives, as text, each checked
// against its spec: an integer of at least 1 (0 where 0 is the default), a
// finite number, or one of its choices. Errors name the flag.
Status FlagParams(const Args& args, const OpSpec& spec, ParamSpec::Kind kind, Params* params);

// `run WORD`'s synopsis for --help.
std::string RunSynopsis(const OpSpec& spec);

// The product of `shape`.
int64_t Elements(const std::vector<int64_t>& shape);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_FLAGS_H_
