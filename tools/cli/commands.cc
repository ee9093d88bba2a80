#include "cli/commands.h"

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/common.h"
#include "cli/flags.h"
#include "cli/run.h"

namespace attnscore::cli {
namespace {

// Each command's synopsis: --help prints all of them, `COMMAND --help` its
// own. `run`'s come from the catalogue (cli/flags.h).
struct CommandHelp {
  const char* command;
  const char* synopsis;
};
const CommandHelp kCommands[] = {
    {"info", "  attnscore info\n"},
    {"bench",
     "  attnscore bench softmax|dot|additive|concat|bilinear --batch B --queries N --keys M\n"
     "                        [--query-dim D] [--key-dim Dk] [--hidden H] [--value-dim Dv]\n"
     "                        [--out-dim O]\n"
     "                        [--valid-lens none|full|random|random-batch|INT|FILE.npy]\n"
     "                        [--weights] [--repeat R] [--json]\n"
     "  attnscore bench multihead|multihead_attention|kv_cache_attend --batch B --queries N\n"
     "                        --keys M [--query-dim D] [--heads H] [--kv-heads G]\n"
     "                        [--causal none|top-left|bottom-right] [--softcap C]\n"
     "                        [--window-left L] [--window-right R] [--sinks Z] [--alibi]\n"
     "                        [--random-bias]\n"
     "                        [--decode [--pool] [--kv-precision fp32|bf16|int8] | --module "
     "[--bias]]\n"
     "                        [--valid-lens ...]\n"
     "                        [--weights] [--repeat R] [--json]\n"
     "  attnscore bench multihead_attention_packed --batch S --queries N --keys M\n"
     "                        [--query-dim D] [--heads H] [--kv-heads G]\n"
     "                        [--causal none|top-left|bottom-right] [--softcap C]\n"
     "                        [--window-left L] [--window-right R] [--sinks Z] [--alibi]\n"
     "                        [--repeat R] [--json]\n"
     "  attnscore bench kv_cache_step --batch B --queries N --keys M [--query-dim D]\n"
     "                        [--heads H] [--kv-heads G] [--kv-precision fp32|bf16|int8]\n"
     "                        [--softcap C] [--window-left L] [--sinks Z] [--alibi]\n"
     "                        [--repeat R] [--json]\n"},
};

const char kCommonFlags[] =
    R"(common flags: --threads T (1 to 1024, default 1), --isa scalar|sse4|avx2|avx512|best
              (default best, which yields to $ATTNSCORE_ISA when it is set),
              --precision fp32|bf16 (default fp32; bf16 rounds the dot
              product's matmul inputs to bfloat16, see below),
              --info (run and bench: after the run, print what info prints,
              with each oneDNN matmul made and the implementation it chose),
              --help (with a command: that command's usage)
A flag's value follows it (--out o.npy) or is joined by '=' (--out=o.npy).
)";

const char kDetails[] = R"(
Tensors are float32 .npy files (C order): X (B, N, M); Q (B, N, D),
K (B, M, D), V (B, M, Dv). Valid lengths are int32 or int64, shape (B,) or
(B, N). Outputs land as a unit: on success all of them, each replaced
atomically; on error none is changed or left behind (docs/cli.md).
An additive model is a .safetensors state_dict of d2l's AdditiveAttention:
float32 W_q.weight (H, Dq), W_k.weight (H, Dk) and w_v.weight (1, H), as
tools/export_torch.py writes it; then Q is (B, N, Dq) and K (B, M, Dk).
A concat model is the state_dict of the seq2seq tutorial's Attn: float32
attn.weight (M, Dq + Dk), attn.bias (M), attn_combine.weight (O, Dq + Dv)
and attn_combine.bias (O); Dq is --query-size, the file's metadata, or Q's
last dim (B, N, Dq); K is (B, N, Dk),
one key per query, V (B, M, Dv) and out (B, N, O). --weights-out writes
the attention weights (B, N, M), which tools/show_heatmaps.py draws (for
softmax they are Y itself, written again).
A multihead model is the state_dict of d2l's MultiHeadAttention: float32
W_q.weight (H, Dq), W_k.weight (H, Dk), W_v.weight (H, Dv), W_o.weight
(H, H), and the four .bias (H) for a module built with bias=True; --heads
(or the file's __metadata__ "num_heads", as tools/export_torch.py writes
it) must divide H. Q is (B, N, Dq), K (B, M, Dk), V (B, M, Dv), out (B, N, H)
and --weights-out (B, heads, N, M), one panel per head. --causal cuts each
query's keys: top-left, query i sees keys 0..i (d2l's decoder); bottom-right,
keys 0..M - N + i (new queries at the end of a cache; needs M >= N).
A bilinear model holds float32 W.weight (Dq, Dk): scores Q W Kᵀ, unscaled,
for queries and keys of different sizes; Q (B, N, Dq), K (B, M, Dk).
multihead_attention takes Q (B, N, Hq, D), K (B, M, Hkv, D), V (B, M, Hkv,
Dv), --causal, --scale and --softcap (c > 0: each score s becomes
c tanh(s / c)); its weights are (B, Hq, N, M). kv_cache_attend appends
K (B, T, Hkv, D) and V to a fresh cache of their sizes, then Q (B, N, Hq,
D), N <= T, the newest positions, attend to it, with --scale and --softcap
as multihead_attention's.

bench times the op on random data: median and min of R runs (default 20)
after 3 warm-up runs. --valid-lens: none (all keys), full (L = M given
explicitly), random (per query, uniform in [1, M]), random-batch (per batch
entry, uniform in [1, M]), one INT for every query, or the lengths in a
FILE.npy ((B,) or (B, N)). dot, additive and concat: --query-dim (default
64), --value-dim (64), --weights (also write the attention weights). dot: GFLOP/s
counts 2 L (D + Dv) per query over valid keys only, GB/s the bytes of Q, K, V
and out. additive: random weights initialised as nn.Linear does, --key-dim
(default: the query dim) and --hidden (64); "triples/ns" counts the valid
(query, key, hidden) triples, one tanh each; GFLOP/s counts the reference's
arithmetic except tanh: the projections 2 H (N Dq + Lmax Dk) per batch entry
(Lmax: its longest length), 3 per triple and 2 L Dv per query. softmax: GB/s
counts the valid scores read and every weight written; its JSON "gflops" is
null. concat: --keys is M (the value rows), --query-dim Dq (default 64),
--key-dim Dk (default Dq), --value-dim Dv, --out-dim O (default Dv); GFLOP/s
counts 2 M (Dq + Dk) + 2 L Dv + 2 O (Dq + Dv) per query. bilinear: random
W (Dq, Dk), --key-dim Dk (default Dq); GFLOP/s counts 2 N Dq Dk per batch
entry and 2 L (Dk + Dv) per query. The JSON also names the Highway target
in use and oneDNN's implementations.
multihead (and multihead_attention) times Engine::MultiHeadAttention on Q (B, N, H, D) and K, V
(B, M, G, D) (--heads H, default 8; --kv-heads G, default H; --query-dim D
per head), with --causal and --softcap (c > 0: each score s becomes c tanh(s / c), in the
op or --decode), --window-left L and --window-right R (the op's sliding window: query i at
p = i + M - N sees keys p - L..p + R; -1, the default, is unbounded), --sinks Z (every head's
sink logit) and --alibi (ALiBi with BLOOM's slopes 2^(-8 (h + 1) / H)); --decode (and kv_cache_attend) instead attends with N new queries over
a KvCache holding M keys per sequence (--pool: its sequences share a pool
of just enough blocks, each the fewest positions that are whole pages);
--module times d2l's MultiHeadAttention (num_hiddens H·D, random weights,
--bias for biases).
GFLOP/s counts 2 (D + D) per visible (query, key) per head, plus the
module's four projections; GB/s the bytes of Q, K, V and out.

--precision bf16 runs dot's two matrix products in oneDNN's bf16 matmul
(fp32 accumulation): Q, K, V and the attention weights are rounded to
bfloat16 for them, while scores, softmax, --weights-out and the output stay
float32. Calls with at most 3 queries per batch entry take fp32 row kernels
in either mode; the other ops have no bf16 mode and refuse the flag. On a
CPU without bf16 arithmetic (no avx512_bf16 or AMX, or an ISA cap below
them) the products run as float32 matmuls on the same rounded values: the
same results up to the order of the sums, at about float32's speed.

info prints the CPU's Highway targets, the ones the ISA cap allows and the
one in use, oneDNN's version and effective ISA, the cap, the threads, the
precision and whether the bf16 matmuls are native.

exit status: 0 success, 2 bad input or usage, 1 internal failure.
)";

// The flags that take no value, and those that take one.
const std::set<std::string> kSwitches = {"--json", "--help",   "--version",    "--weights",
                                         "--info", "--decode", "--pool",       "--module",
                                         "--bias", "--alibi",  "--random-bias"};
// `run`'s flags come from the catalogue (cli/flags.h).
std::set<std::string> ValuedFlags() {
  std::set<std::string> valued = {"--threads",   "--isa",     "--precision", "--batch",
                                  "--query-dim", "--key-dim", "--hidden",    "--value-dim",
                                  "--out-dim",   "--repeat",  "--heads",     "--kv-heads"};
  valued.merge(CatalogueFlags());
  return valued;
}

// The whole usage: every synopsis, the common flags and the details.
std::string Usage() {
  std::string usage = "attnscore: attention scoring functions on the CPU\n\nusage:\n";
  usage += "  attnscore --version\n";
  usage += kCommands[0].synopsis;
  for (const OpSpec& spec : Catalogue()) usage += RunSynopsis(spec);
  for (const CommandHelp& c : kCommands) {
    if (std::string(c.command) != "info") usage += c.synopsis;
  }
  return usage + kCommonFlags + kDetails;
}

// One command's usage ("run dot", "bench"): its synopsis and the common
// flags; "" for a command that has none.
std::string CommandUsage(const std::vector<std::string>& words) {
  if (words.empty()) return "";
  std::string synopsis;
  if (words[0] == "run" && words.size() > 1) {
    if (const OpSpec* spec = FindEntry(words[1])) synopsis = RunSynopsis(*spec);
  }
  for (const CommandHelp& c : kCommands) {
    if (words[0] == c.command) synopsis = c.synopsis;
  }
  if (synopsis.empty()) return "";
  return "usage:\n" + synopsis + kCommonFlags +
         "\n(attnscore --help tells everything; so does docs/cli.md)\n";
}

int Info(const Args& args) {
  Status s = CheckFlags(args, {"--threads", "--isa", "--precision"}, {}, "info");
  std::unique_ptr<Engine> engine;
  if (!s.ok() || !(s = MakeEngine(args, "", &engine)).ok()) return Fail(s);
  PrintInfo(*engine);
  return kExitOk;
}

}  // namespace

int RunCli(const std::vector<std::string>& argv) {
  Args args;
  Status s = ParseArgs(argv, kSwitches, ValuedFlags(), &args);
  if (!s.ok()) return Fail(s);
  // --help or `help` prints the usage to stdout (exit 0): a command's own
  // (`run dot --help`, `help run dot`), else the whole. No command at all
  // prints the whole usage to stderr (exit 2).
  const bool help_word = !args.words.empty() && args.words[0] == "help";
  if (args.has("--help") || help_word) {
    const std::vector<std::string> command(args.words.begin() + (help_word ? 1 : 0),
                                           args.words.end());
    const std::string usage = CommandUsage(command);
    std::fputs(usage.empty() ? Usage().c_str() : usage.c_str(), stdout);
    return kExitOk;
  }
  if (args.words.empty() && !args.has("--version")) {
    std::fputs(Usage().c_str(), stderr);
    return kExitBadInput;
  }
  // --version prints the library's version alone (exit 0).
  if (args.has("--version")) {
    if (!args.words.empty() || args.flags.size() > 1) {
      return Fail(Status::InvalidArgument("--version takes no command or other flag"));
    }
    std::printf("attnscore %s\n", Version());
    return kExitOk;
  }
  const std::string& command = args.words[0];
  const size_t wanted = command == "info" ? 1 : 2;  // info; run OP; bench OP
  if (args.words.size() > wanted) {
    return Fail(Status::InvalidArgument("unexpected argument '" + args.words[wanted] + "'"));
  }
  if (command == "info") return Info(args);
  if (command == "bench") return BenchCommand(args);
  if (command == "run") return RunCommand(args);
  return Fail(Status::InvalidArgument("unknown command '" + command + "' (see attnscore --help)"));
}

}  // namespace attnscore::cli
