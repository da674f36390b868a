// linfer: one binary, subcommands. `linfer help` lists them.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/string_view.h"
#include "server/commands.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json + *.safetensors)");

namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* help;
};

const Command kCommands[] = {
    {"logits", linfer::cli::Logits,
     "--model DIR --tokens 1,2,3 [--mode auto|chunked|recurrent] [--chunk_size N]: print JSON "
     "logits for every position"},
    {"generate", linfer::cli::Generate,
     "--model DIR --tokens 1,2,3 --max_tokens N [--temperature T --seed S]: print generated ids;\n"
     "             --server HOST:PORT [\"TEXT\" | --tokens 1,2,3] [--top_p --top_k --min_p --stop\n"
     "             --session ID --api_key K --tls_ca PEM --timeout_s S]: stream from a server"},
    {"chat", linfer::cli::Chat,
     "--server HOST:PORT [--session ID] [sampling flags]: multi-turn chat on one session, one\n"
     "             turn per stdin line (/tokens 1,2,3 sends ids; /exit or EOF ends)"},
    {"sessions", linfer::cli::Sessions,
     "--server HOST:PORT list | create [ID] | get ID | fork ID [NEW] | delete ID |\n"
     "             export ID --file F | import [NEW] --file F: manage the server's sessions"},
    {"serve", linfer::cli::Serve,
     "[--model DIR] [--port 50051 --http_port 9090 ...]: run the gRPC server (default model: "
     "the bundled models/tiny)"},
    {"perplexity", linfer::cli::Perplexity,
     "[--model DIR] FILE: held-out loss and bits per byte (and a unigram baseline)"},
    {"info", linfer::cli::Info, "--model DIR: print the model's architecture and state size"},
    {"tokenize", linfer::cli::Tokenize,
     "--tokenizer FILE|--model DIR [--special] TEXT: print the JSON token ids of TEXT (or stdin)"},
    {"detokenize", linfer::cli::Detokenize,
     "--tokenizer FILE|--model DIR --ids 1,2,3 [--skip_special]: print the decoded text"},
};

void PrintUsage() {
  std::fprintf(stderr, "usage: linfer <command> [flags]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(stderr, "  %-10s %s\n", c.name, c.help);
  std::fprintf(stderr, "\n`linfer --help` lists every flag.\n");
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
  // policy and re-execute once, unless the user chose a policy.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
  }
  absl::SetProgramUsageMessage("linfer <command> [flags]; `linfer help` lists the commands");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2 || std::string(positional[1]) == "help") {
    PrintUsage();
    return positional.size() < 2 ? 2 : 0;
  }
  const std::string name = positional[1];
  std::vector<std::string> args(positional.begin() + 2, positional.end());
  for (const Command& c : kCommands) {
    if (name == c.name) return c.run(args);
  }
  std::fprintf(stderr, "linfer: unknown command '%s'\n\n", name.c_str());
  PrintUsage();
  return 2;
}
