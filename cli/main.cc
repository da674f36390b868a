// linfer: one binary, subcommands. `linfer help` lists them; `linfer COMMAND --help` lists that
// command's flags; `linfer --version` prints the version and build.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cli/commands.h"
#include "kernels/gemm.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json + *.safetensors)");

namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* help;
  std::vector<const char*> flag_files;  // the cli/ files whose flags the command reads
  int max_args = -1;  // positional arguments it takes at most (−1: it checks them itself)
};

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"logits",
       linfer::cli::Logits,
       "--model DIR --tokens 1,2,3 [--mode auto|chunked|recurrent] [--chunk_size N]: print JSON "
       "logits for every position",
       {"main.cc", "cmd_model.cc", "model_loading.cc"},
       0},
      {"generate",
       linfer::cli::Generate,
       "--model DIR --tokens 1,2,3 --max_tokens N [--temperature T --seed S]: print generated "
       "ids;\n             --server HOST:PORT [\"TEXT\" | --tokens 1,2,3] [--top_p --top_k --min_p "
       "--stop\n             --session ID --api_key K --tls_ca PEM --timeout_s S]: stream from a "
       "server",
       {"main.cc", "cmd_model.cc", "model_loading.cc", "sampling_flags.cc", "cmd_client.cc",
        "client.cc"},
       -1},
      {"chat",
       linfer::cli::Chat,
       "--server HOST:PORT [--session ID | --keep_session] [sampling flags]: multi-turn chat on\n"
       "             one session (a new one is deleted at the end unless --keep_session), one\n"
       "             turn per stdin line (/tokens 1,2,3 sends ids; /exit or EOF ends)",
       {"sampling_flags.cc", "cmd_client.cc", "client.cc"},
       -1},
      {"sessions",
       linfer::cli::Sessions,
       "--server HOST:PORT list | create [ID] | get ID | fork ID [NEW] | delete ID |\n"
       "             export ID --file F | import [NEW] --file F: manage the server's sessions",
       {"cmd_sessions.cc", "client.cc"},
       -1},
      {"serve",
       linfer::cli::Serve,
       "[--model DIR] [--port 50051 --http_port 8000 ...]: run the server (gRPC + HTTP; default "
       "model: the bundled models/tiny)",
       {"main.cc", "cmd_serve.cc", "model_loading.cc"},
       0},
      {"perplexity",
       linfer::cli::Perplexity,
       "[--model DIR] FILE: held-out loss and bits per byte (and a unigram baseline)",
       {"main.cc", "cmd_perplexity.cc", "model_loading.cc"},
       -1},
      {"info",
       linfer::cli::Info,
       "--model DIR [--device cpu|cuda]: print the model's architecture, state size and device",
       {"main.cc", "model_loading.cc"},
       0},
      {"tokenize",
       linfer::cli::Tokenize,
       "--tokenizer FILE|--model DIR [--special] TEXT: print the JSON token ids of TEXT (or stdin)",
       {"main.cc", "cmd_tokenize.cc"},
       -1},
      {"detokenize",
       linfer::cli::Detokenize,
       "--tokenizer FILE|--model DIR --ids 1,2,3 [--skip_special]: print the decoded text",
       {"main.cc", "cmd_tokenize.cc"},
       0},
  };
  return commands;
}

void PrintUsage() {
  std::fprintf(stderr, "usage: linfer <command> [flags]\n\ncommands:\n");
  for (const Command& c : Commands()) std::fprintf(stderr, "  %-10s %s\n", c.name, c.help);
  std::fprintf(stderr,
               "\n`linfer <command> --help` lists a command's flags; `linfer --version` prints "
               "the version.\n");
}

// The command named on the command line (the first argument that is not a flag), or null.
const Command* FindCommand(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (absl::StartsWith(a, "-")) continue;
    for (const Command& c : Commands()) {
      if (a == c.name) return &c;
    }
    return nullptr;
  }
  return nullptr;
}

// Whether `file` (where a flag is defined) holds flags of `command` (any CLI flag when null).
bool CommandReadsFlagsOf(const Command* command, absl::string_view file) {
  if (!absl::StrContains(file, "cli/")) return false;
  if (command == nullptr) return true;
  for (const char* f : command->flag_files) {
    if (absl::EndsWith(file, absl::StrCat("cli/", f))) return true;
  }
  return false;
}

bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--help" || a == "-help" || a == "-h" || a == "--helpfull") return true;
  }
  return false;
}

// `linfer [COMMAND] --help`: the command's description and its flags, sorted, on stdout.
int PrintHelp(const Command* command) {
  if (command == nullptr) {
    std::printf("usage: linfer <command> [flags]\n\ncommands:\n");
    for (const Command& c : Commands()) std::printf("  %-10s %s\n", c.name, c.help);
    std::printf("\nflags of every command:\n");
  } else {
    std::printf("usage: linfer %s %s\n\nflags:\n", command->name, command->help);
  }
  std::map<std::string, const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (CommandReadsFlagsOf(command, flag->Filename())) flags[std::string(name)] = flag;
  }
  for (const auto& [name, flag] : flags) {
    std::printf("  --%s (default: %s)\n      %s\n", name.c_str(), flag->DefaultValue().c_str(),
                flag->Help().c_str());
  }
  return 0;
}

void ConfigureUsage() {
  absl::FlagsUsageConfig config;
  config.version_string = [] {
    return absl::StrCat("linfer ", LINFER_VERSION, " (", LINFER_BUILD_TYPE, " build, CUDA ",
                        LINFER_WITH_CUDA_STRING, ")\n");
  };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage("linfer <command> [flags]; `linfer help` lists the commands");
}

}  // namespace

namespace linfer::cli {

int Fail(absl::string_view message) {
  std::fprintf(stderr, "linfer: error: %.*s\n", static_cast<int>(message.size()), message.data());
  return 1;
}

}  // namespace linfer::cli

int main(int argc, char** argv) {
  // OpenMP threads that spin at barriers stall badly when the cores are shared (5x slower prefill
  // on a busy 2-core machine). libgomp reads its settings before main(), so set a passive wait
  // policy and re-execute once, unless the user chose a policy. Re-execute the binary by its real
  // path so the process keeps its name (ps, pgrep and ss show "linfer", not "exe").
  //
  // OpenBLAS picks its kernels at load too, by the CPU model; on a VM whose CPUID names no model it
  // knows it falls back to generic SSE3 kernels even on AVX-512 hardware (measured on such a VM:
  // 1.3x slower batch-64 decode, 1.45x slower prefill). Unless the user chose (OPENBLAS_CORETYPE
  // set), the same restart gives it the kernels the CPU's features allow.
  bool restart = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    restart = true;
  }
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    if (const std::string core = linfer::BlasCoreUpgrade(); !core.empty()) {
      setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
      setenv("LINFER_BLAS_RESTART", linfer::BlasCoreName().c_str(), 1);  // for the log line
      restart = true;
    }
  }
  if (restart) {
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = '\0';
      execv(self, argv);  // returns only on failure: carry on with the default
    }
  }
  const Command* command = FindCommand(argc, argv);
  if (WantsHelp(argc, argv)) return PrintHelp(command);
  ConfigureUsage();
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2 || std::string(positional[1]) == "help") {
    PrintUsage();
    return positional.size() < 2 ? 2 : 0;
  }
  const std::string name = positional[1];
  std::vector<std::string> args(positional.begin() + 2, positional.end());
  for (const Command& c : Commands()) {
    if (name != c.name) continue;
    // A stray word is an error, not ignored: `--prefix_cache_slots false` leaves the flag at its
    // default and "false" over (absl's boolean flags take their value after '=').
    if (c.max_args >= 0 && args.size() > static_cast<size_t>(c.max_args)) {
      const std::string& extra = args[static_cast<size_t>(c.max_args)];
      const bool word = extra == "true" || extra == "false" || extra == "0" || extra == "1";
      std::fprintf(stderr, "linfer %s: unexpected argument '%s'%s\n", c.name, extra.c_str(),
                   word ? " (a boolean flag takes its value after '=': --flag=false)" : "");
      return 2;
    }
    return c.run(args);
  }
  std::fprintf(stderr, "linfer: unknown command '%s'\n\n", name.c_str());
  PrintUsage();
  return 2;
}
