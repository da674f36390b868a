// The gRPC server on real loopback ports, in process: every RPC and every error code, cancel
// mid-stream (the slot is free afterwards), deadlines, queue full, drain, TLS and API keys.
#include "server/server.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/device_lost.h"
#include "linfer/v1/generation.grpc.pb.h"
#include "linfer/v1/models.grpc.pb.h"
#include "linfer/v1/sessions.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"

namespace linfer {
namespace {

namespace fs = std::filesystem;

// with_tokenizer: the model directory's tokenizer too (the fla fixtures have none).
std::unique_ptr<Server> StartServer(
    EngineOptions eo = {}, ServerOptions so = {},
    const std::string& model_dir = std::string(LINFER_FLA_FIXTURES) + "/gdn_default",
    bool with_tokenizer = false) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_dir);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  eo.state_memory_bytes = 1 << 20;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(*std::move(model), eo);
  EXPECT_TRUE(engine.ok());
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (with_tokenizer) {
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t =
        tokenizer::Tokenizer::FromDirectory(model_dir);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) tok = *std::move(t);
  }
  so.grpc_port = 0;
  if (so.http_port != 0) so.http_port = -1;  // HTTP (any free port) only when the test asks
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start(so, *std::move(engine), std::move(tok), "gdn_default");
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::shared_ptr<grpc::Channel> Connect(
    const Server& s,
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials()) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", s.grpc_port()), creds);
}

v1::GenerateRequest Ids(std::vector<int32_t> ids, int max_tokens) {
  v1::GenerateRequest r;
  for (int32_t id : ids) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stop()->set_max_tokens(max_tokens);
  r.mutable_stop()->set_ignore_eos(true);
  return r;
}

struct Streamed {
  std::vector<int32_t> tokens;
  v1::GenerateResponse last;
  grpc::Status status;
};

Streamed Generate(v1::Generation::Stub& stub, const v1::GenerateRequest& req,
                  grpc::ClientContext* ctx = nullptr) {
  grpc::ClientContext local;
  if (ctx == nullptr) ctx = &local;
  auto reader = stub.Generate(ctx, req);
  Streamed out;
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    out.tokens.insert(out.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    out.last = msg;
  }
  out.status = reader->Finish();
  return out;
}

// grpc.health.v1.Health/Check of the whole server (an empty request): the response's bytes, or
// the call's error. SERVING is field 1 = 1, NOT_SERVING field 1 = 2.
const std::string kServing("\x08\x01", 2), kNotServing("\x08\x02", 2);
std::string HealthCheck(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext h;
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status health;
  generic.UnaryCall(&h, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      health = s;
                      done = true;
                      cv.notify_one();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!health.ok()) return "error: " + health.error_message();
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return "error: no response";
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// GET `path` on 127.0.0.1:`port` over a plain socket: the whole answer (status line, headers,
// body), or "" when the connection fails.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, n);
    }
  }
  ::close(fd);
  return answer;
}

// The value of the first sample of a /metrics text whose line starts with `series` (name and
// labels up to where they differ), or −1.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(series)) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// The generation-token counter a /metrics text reports.
double GenerationTokens(const std::string& text) {
  return Sample(text, "linfer_generation_tokens_total");
}

// Two scrapes at once: the one whose engine snapshot is older must not be the last added up, or
// the next scrape counts the difference again (counters came out one engine step high).
TEST(ServerTest, ConcurrentScrapesCountEachTokenOnce) {
  Metrics metrics("m", {});
  EngineStats older, newer;
  older.generation_tokens_total = 100;
  newer.generation_tokens_total = 160;
  absl::Notification second_done;
  std::thread first([&] {
    metrics.Render([&] {
      // Waits (boundedly) for the second scrape to finish, as a slow first snapshot would.
      second_done.WaitForNotificationWithTimeout(absl::Milliseconds(300));
      return older;
    });
  });
  absl::SleepFor(absl::Milliseconds(50));
  metrics.Render([&] { return newer; });
  second_done.Notify();
  first.join();
  EXPECT_EQ(GenerationTokens(metrics.Render([&] { return newer; })), 160);
}

// A finished request's phases (vLLM's per-request histograms): prefill = ttft − queue, decode =
// total − ttft, inference = total − queue, time per output token = decode over the tokens after
// the first; tokens in 1-2-5 buckets up to max_model_len. A request without a token has no phases.
TEST(ServerTest, FinishedRequestsFillThePerRequestHistograms) {
  Metrics metrics("m", {}, /*max_model_len=*/300);
  Usage u;
  u.prompt_tokens = 40;
  u.completion_tokens = 11;
  u.queue_seconds = 0.25;
  u.ttft_seconds = 1.0;
  u.total_seconds = 3.5;
  metrics.ObserveFinished(u);
  Usage cancelled;  // cut short in the queue
  cancelled.prompt_tokens = 7;
  cancelled.queue_seconds = cancelled.total_seconds = 2;
  metrics.ObserveFinished(cancelled);
  const std::string text = metrics.Render([] { return EngineStats(); });
  const std::string m = "{model_name=\"m\"}";
  EXPECT_EQ(Sample(text, "linfer_request_prompt_tokens_sum" + m), 47);
  EXPECT_EQ(Sample(text, "linfer_request_prompt_tokens_count" + m), 2);
  EXPECT_EQ(Sample(text, "linfer_request_prompt_tokens_bucket{model_name=\"m\",le=\"50\""), 2);
  EXPECT_EQ(Sample(text, "linfer_request_prompt_tokens_bucket{model_name=\"m\",le=\"20\""), 1);
  EXPECT_EQ(Sample(text, "linfer_request_prompt_tokens_bucket{model_name=\"m\",le=\"200\""), 2);
  EXPECT_EQ(Sample(text, "linfer_request_prompt_tokens_bucket{model_name=\"m\",le=\"500\""),
            -1);  // > 300
  EXPECT_EQ(Sample(text, "linfer_request_generation_tokens_sum" + m), 11);
  EXPECT_EQ(Sample(text, "linfer_request_prefill_time_seconds_sum" + m), 0.75);
  EXPECT_EQ(Sample(text, "linfer_request_prefill_time_seconds_count" + m), 1);
  EXPECT_EQ(Sample(text, "linfer_request_decode_time_seconds_sum" + m), 2.5);
  EXPECT_EQ(Sample(text, "linfer_request_inference_time_seconds_sum" + m), 3.25);
  EXPECT_EQ(Sample(text, "linfer_request_time_per_output_token_seconds_sum" + m), 0.25);
  EXPECT_EQ(Sample(text, "linfer_e2e_request_latency_seconds_sum" + m), 5.5);
  EXPECT_EQ(Sample(text, "linfer_e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"7680\""),
            2);
}

TEST(ServerTest, GenerateStreamsAndMatchesTheEngine) {
  auto server = StartServer();
  auto stub = v1::Generation::NewStub(Connect(*server));
  Streamed s = Generate(*stub, Ids({1, 2, 3, 4}, 12));
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(s.tokens.size(), 12u);
  EXPECT_EQ(s.last.finish_reason(), "length");
  EXPECT_EQ(s.last.usage().prompt_tokens(), 4);
  EXPECT_EQ(s.last.usage().completion_tokens(), 12);
  Streamed again = Generate(*stub, Ids({1, 2, 3, 4}, 12));
  EXPECT_EQ(again.tokens, s.tokens);  // greedy is deterministic
}

TEST(ServerTest, ErrorCodesNameTheProblem) {
  EngineOptions eo;
  eo.max_waiting_tokens = 100;
  auto server = StartServer(eo);
  auto stub = v1::Generation::NewStub(Connect(*server));
  v1::GenerateRequest bad = Ids({1}, 3);
  bad.mutable_sampling()->set_top_p(2.0f);
  Streamed s = Generate(*stub, bad);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.status.error_message().find("top_p"), std::string::npos);
  s = Generate(*stub, Ids({1, 5000}, 3));
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest text;
  text.set_text("hello");
  s = Generate(*stub, text);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // no tokenizer
  EXPECT_EQ(Generate(*stub, v1::GenerateRequest()).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest nosession = Ids({1}, 3);
  nosession.set_session_id("nope");
  EXPECT_EQ(Generate(*stub, nosession).status.error_code(), grpc::StatusCode::NOT_FOUND);
  v1::GenerateRequest model = Ids({1}, 3);
  model.set_model("gpt-9");
  EXPECT_EQ(Generate(*stub, model).status.error_code(), grpc::StatusCode::NOT_FOUND);
  // Longer than the queue could ever hold: refused for good (INVALID_ARGUMENT, not "retry").
  std::vector<int32_t> big(101, 1);
  Streamed never = Generate(*stub, Ids(big, 3));
  EXPECT_EQ(never.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(never.status.error_message().find("max_waiting_tokens"), std::string::npos);
  // Beyond the server's max_tokens limit.
  EXPECT_EQ(Generate(*stub, Ids({1}, 1 << 30)).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Client text in error messages is cut short.
  v1::GenerateRequest huge_model = Ids({1}, 3);
  huge_model.set_model(std::string(100000, 'm'));
  Streamed cut = Generate(*stub, huge_model);
  EXPECT_EQ(cut.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(cut.status.error_message().size(), 400u);
}

TEST(ServerTest, SessionBusyDeadlineAndCancelFreeTheSlot) {
  auto server = StartServer();
  auto channel = Connect(*server);
  auto gen = v1::Generation::NewStub(channel);
  auto sessions = v1::Sessions::NewStub(channel);
  grpc::ClientContext c1;
  v1::CreateSessionRequest create;
  create.set_session_id("chat");
  v1::Session created;
  ASSERT_TRUE(sessions->Create(&c1, create, &created).ok());
  // A long generation on the session; a second request on it is refused while it runs.
  v1::GenerateRequest long_req = Ids({1, 2}, 60000);
  long_req.set_session_id("chat");
  grpc::ClientContext stream_ctx;
  auto reader = gen->Generate(&stream_ctx, long_req);
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  EXPECT_EQ(Generate(*gen, long_req).status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  stream_ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The session is free again and kept its state; one-off slots are all back.
  for (int i = 0; i < 100 && server->engine().Stats().running > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EngineStats st = server->engine().Stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.slots_used, 1);  // only the session's state
  grpc::ClientContext dl;
  dl.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  Streamed late = Generate(*gen, Ids({1, 2, 3}, 60000), &dl);
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST(ServerTest, SessionsAndModelsRpcs) {
  auto server = StartServer();
  auto channel = Connect(*server);
  auto sessions = v1::Sessions::NewStub(channel);
  auto gen = v1::Generation::NewStub(channel);
  {
    grpc::ClientContext c;
    v1::Session s;
    ASSERT_TRUE(sessions->Create(&c, v1::CreateSessionRequest(), &s).ok());
    EXPECT_FALSE(s.session_id().empty());
    v1::GenerateRequest r = Ids({5, 6, 7}, 4);
    r.set_session_id(s.session_id());
    Streamed out = Generate(*gen, r);
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.last.session_id(), s.session_id());
    EXPECT_EQ(out.last.session_tokens(), 7);  // the prompt, the reply (its last token pending)
    grpc::ClientContext g;
    v1::GetSessionRequest get;
    get.set_session_id(s.session_id());
    v1::Session info;
    ASSERT_TRUE(sessions->Get(&g, get, &info).ok());
    EXPECT_EQ(info.tokens(), 7);
    EXPECT_EQ(info.turns(), 1);
    // Export in chunks, import under a new name, fork, list, delete.
    grpc::ClientContext e;
    v1::ExportSessionRequest ex;
    ex.set_session_id(s.session_id());
    auto chunks = sessions->Export(&e, ex);
    std::string blob;
    v1::StateChunk chunk;
    while (chunks->Read(&chunk)) blob += chunk.data();
    ASSERT_TRUE(chunks->Finish().ok());
    grpc::ClientContext i;
    v1::Session imported;
    auto writer = sessions->Import(&i, &imported);
    v1::StateChunk first;
    first.set_session_id("restored");
    first.set_data(blob.substr(0, 100));
    ASSERT_TRUE(writer->Write(first));
    v1::StateChunk rest;
    rest.set_data(blob.substr(100));
    ASSERT_TRUE(writer->Write(rest));
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
    EXPECT_EQ(imported.session_id(), "restored");
    EXPECT_EQ(imported.tokens(), 7);
    // A corrupted blob is refused.
    grpc::ClientContext i2;
    v1::Session bad;
    auto w2 = sessions->Import(&i2, &bad);
    v1::StateChunk corrupt;
    corrupt.set_session_id("bad");
    corrupt.set_data(blob.substr(0, blob.size() - 1) + "x");
    w2->Write(corrupt);
    w2->WritesDone();
    grpc::Status st = w2->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("checksum"), std::string::npos);
    grpc::ClientContext f;
    v1::ForkSessionRequest fork;
    fork.set_session_id("restored");
    fork.set_new_session_id("branch");
    v1::Session forked;
    ASSERT_TRUE(sessions->Fork(&f, fork, &forked).ok());
    grpc::ClientContext l;
    v1::ListSessionsResponse list;
    ASSERT_TRUE(sessions->List(&l, v1::ListSessionsRequest(), &list).ok());
    EXPECT_EQ(list.sessions_size(), 3);
    grpc::ClientContext d;
    v1::DeleteSessionRequest del;
    del.set_session_id("branch");
    v1::DeleteSessionResponse none;
    ASSERT_TRUE(sessions->Delete(&d, del, &none).ok());
    grpc::ClientContext d2;
    EXPECT_EQ(sessions->Delete(&d2, del, &none).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  auto models = v1::Models::NewStub(channel);
  grpc::ClientContext m;
  v1::ModelInfo info;
  ASSERT_TRUE(models->Info(&m, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.architecture(), "gated_deltanet");
  EXPECT_EQ(info.state_bytes_per_session(), server->engine().model().state_bytes());
  EXPECT_EQ(info.weight_dtype(), "f32");
  EXPECT_EQ(info.weight_bytes(), server->engine().model().weight_bytes());
  EXPECT_EQ(info.quantization(), "");
  EXPECT_EQ(info.fp8_weights(), "");
  grpc::ClientContext m2;
  v1::ListModelsResponse all;
  ASSERT_TRUE(models->List(&m2, v1::ListModelsRequest(), &all).ok());
  EXPECT_EQ(all.models_size(), 1);
  EXPECT_EQ(HealthCheck(channel), kServing);
}

TEST(ServerTest, ApiKeysIsolateSessions) {
  const fs::path keys = fs::path(::testing::TempDir()) / "linfer_keys.txt";
  std::ofstream(keys) << "# test keys\nalice-secret-key alice\nbob-secret-key-1 bob\n";
  ServerOptions so;
  so.api_keys_file = keys.string();
  so.http_port = 0;
  auto server = StartServer({}, so);
  auto sessions = v1::Sessions::NewStub(Connect(*server));
  auto call = [&](const std::string& key, const std::string& id, v1::Session* out, bool create) {
    grpc::ClientContext c;
    if (!key.empty()) c.AddMetadata("authorization", "Bearer " + key);
    if (create) {
      v1::CreateSessionRequest r;
      r.set_session_id(id);
      return sessions->Create(&c, r, out);
    }
    v1::GetSessionRequest r;
    r.set_session_id(id);
    return sessions->Get(&c, r, out);
  };
  v1::Session s;
  EXPECT_EQ(call("", "x", &s, true).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("wrong-key-123", "x", &s, true).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status created = call("alice-secret-key", "mine", &s, true);
  ASSERT_TRUE(created.ok()) << created.error_code() << " " << created.error_message();
  EXPECT_TRUE(call("alice-secret-key", "mine", &s, false).ok());
  EXPECT_EQ(call("bob-secret-key-1", "mine", &s, false).error_code(), grpc::StatusCode::NOT_FOUND);
  // A call without a valid key is no request error (as on HTTP), a Generate's neither.
  auto gen = v1::Generation::NewStub(Connect(*server));
  EXPECT_EQ(Generate(*gen, Ids({1, 2}, 2)).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const std::string metrics = HttpGet(server->http_port(), "/metrics");
  ASSERT_TRUE(absl::StrContains(metrics, "linfer_requests_running")) << metrics.substr(0, 300);
  EXPECT_LE(Sample(metrics, "linfer_request_errors_total{code=\"unauthenticated\""), 0) << metrics;
  EXPECT_EQ(Sample(metrics, "linfer_request_errors_total{code=\"not_found\""), 1) << metrics;
}

// The authorization's scheme in any case, spaces or a tab before the key (RFC 9110 §11.1); a
// missing key and another scheme are told apart, and neither error echoes what was sent.
TEST(ApiKeysTest, TheBearerSchemeIsCaseInsensitive) {
  const fs::path keys = fs::path(::testing::TempDir()) / "linfer_keys_scheme.txt";
  std::ofstream(keys) << "alice-secret-key alice\n";
  absl::StatusOr<ApiKeys> k = ApiKeys::FromFile(keys.string());
  ASSERT_TRUE(k.ok()) << k.status();
  for (const char* ok :
       {"Bearer alice-secret-key", "bearer alice-secret-key", "BEARER  alice-secret-key",
        "Bearer\talice-secret-key ", " Bearer alice-secret-key"}) {
    absl::StatusOr<std::string> owner = k->OwnerFor(ok);
    EXPECT_TRUE(owner.ok()) << ok << ": " << owner.status();
    if (owner.ok()) {
      EXPECT_EQ(*owner, "alice");
    }
  }
  const absl::Status none = k->OwnerFor("").status();
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(none.message(), "no API key")) << none;
  for (const char* bad : {"Basic alice-secret-key", "Bearer", "Bearer ", "alice-secret-key",
                          "Bearerx alice-secret-key"}) {
    const absl::Status st = k->OwnerFor(bad).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_TRUE(absl::StrContains(st.message(), "is not 'Bearer <API key>'")) << bad << ": " << st;
    EXPECT_FALSE(absl::StrContains(st.message(), "alice-secret")) << st;
  }
  EXPECT_EQ(k->OwnerFor("Bearer alice-secret-kex").status().message(), "invalid API key");
}

// Tokenize / Detokenize answers that would pass the message cap are refused by name (OUT_OF_RANGE)
// rather than with gRPC's "Sent message larger than max"; under it they are served.
TEST(ServerTest, TokenizeAnswersPastTheMessageCapAreRefusedByName) {
  ServerOptions so;
  so.max_message_bytes = 64 << 10;
  auto server = StartServer({}, so, LINFER_TINY_MODEL, /*with_tokenizer=*/true);
  ASSERT_NE(server, nullptr);
  auto gen = v1::Generation::NewStub(Connect(*server));
  auto tokenize = [&](const std::string& text, v1::TokenizeResponse* out) {
    grpc::ClientContext c;
    v1::TokenizeRequest r;
    r.set_text(text);
    return gen->Tokenize(&c, r, out);
  };
  v1::TokenizeResponse small;
  ASSERT_TRUE(tokenize("In the beginning", &small).ok());
  // 60 KB of one character a token (a 64 KiB request): ids of two bytes each, past 64 KiB.
  std::string text;
  while (text.size() < (60 << 10)) text += "\xe4\xbd\xa0 ";
  v1::TokenizeResponse big;
  const grpc::Status st = tokenize(text, &big);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << st.error_message();
  EXPECT_NE(st.error_message().find("more than a message may hold (65536)"), std::string::npos)
      << st.error_message();
  // Detokenize: ids whose text passes the cap.
  grpc::ClientContext c;
  v1::DetokenizeRequest d;
  for (int i = 0; i < 20000; ++i) d.add_token_ids(small.token_ids(i % small.token_ids_size()));
  v1::DetokenizeResponse text_out;
  const grpc::Status dst = gen->Detokenize(&c, d, &text_out);
  EXPECT_EQ(dst.error_code(), grpc::StatusCode::OUT_OF_RANGE) << dst.error_message();
  EXPECT_NE(dst.error_message().find("the response (the text)"), std::string::npos)
      << dst.error_message();
}

TEST(ServerTest, Tls) {
  const fs::path dir = fs::path(::testing::TempDir()) / "linfer_tls";
  fs::create_directories(dir);
  const std::string cmd = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ",
      (dir / "key.pem").string(), " -out ", (dir / "cert.pem").string(), " 2>/dev/null");
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl is not available to make a cert";
  ServerOptions so;
  so.tls_cert = (dir / "cert.pem").string();
  so.tls_key = (dir / "key.pem").string();
  auto server = StartServer({}, so);
  std::ifstream in(dir / "cert.pem");
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  auto stub = v1::Generation::NewStub(Connect(*server, grpc::SslCredentials(ssl)));
  Streamed s = Generate(*stub, Ids({1, 2}, 3));
  EXPECT_TRUE(s.status.ok()) << s.status.error_message();
  auto plain = v1::Generation::NewStub(Connect(*server));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_FALSE(Generate(*plain, Ids({1, 2}, 3), &c).status.ok());
}

TEST(ServerTest, DrainFinishesThenRefuses) {
  auto server = StartServer();
  auto stub = v1::Generation::NewStub(Connect(*server));
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, Ids({1, 2}, 60000));
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  const absl::Time t0 = absl::Now();
  std::thread drain([&] { server->Drain(absl::Milliseconds(300)); });
  while (reader->Read(&msg)) {
  }
  grpc::Status st = reader->Finish();
  drain.join();
  // Ended when the grace period ran out, saying so (before gRPC cut the call).
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_NE(st.error_message().find("its drain (--drain_timeout_s 300ms) ran out"),
            std::string::npos)
      << st.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_FALSE(Generate(*stub, Ids({1}, 2)).status.ok());
}

// A lost device (EngineOptions::forward_fault stands in for one): the stream in flight ends
// UNAVAILABLE naming the device's error, health turns NOT_SERVING (gRPC) and 503 naming it
// (/health), new requests are refused with it, and ServerOptions::on_device_lost hears of it once.
TEST(ServerTest, ALostDeviceTurnsHealthOffAndSaysWhy) {
  auto armed = std::make_shared<std::atomic<bool>>(false);
  EngineOptions eo;
  eo.forward_fault = [armed](uint64_t) {
    return armed->exchange(false)
               ? DeviceLostError("cudaStreamSynchronize failed at kernels/x.cu:12: injected",
                                 "injected: an uncorrectable ECC error")
               : absl::OkStatus();
  };
  auto told = std::make_shared<std::atomic<int>>(0);
  ServerOptions so;
  so.http_port = 0;
  so.on_device_lost = [told](const absl::Status&) { ++*told; };
  auto server = StartServer(eo, so);
  ASSERT_NE(server, nullptr);
  auto channel = Connect(*server);
  auto stub = v1::Generation::NewStub(channel);
  EXPECT_EQ(HealthCheck(channel), kServing);
  EXPECT_TRUE(absl::StartsWith(HttpGet(server->http_port(), "/health"), "HTTP/1.1 200"));
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, Ids({1, 2}, 60000));
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  armed->store(true);
  while (reader->Read(&msg)) {
  }
  const grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_TRUE(absl::StrContains(st.error_message(), "device failed and cannot be used again"))
      << st.error_message();
  EXPECT_EQ(HealthCheck(channel), kNotServing);
  const std::string health = HttpGet(server->http_port(), "/health");
  EXPECT_TRUE(absl::StartsWith(health, "HTTP/1.1 503")) << health;
  EXPECT_TRUE(absl::StrContains(health, "failed: the server's cpu device failed")) << health;
  EXPECT_TRUE(absl::StrContains(health, "(injected: an uncorrectable ECC error)")) << health;
  EXPECT_FALSE(absl::StrContains(health, "kernels/x.cu")) << health;  // the log's, not a client's
  const Streamed refused = Generate(*stub, Ids({1}, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(refused.status.error_message(), "injected"))
      << refused.status.error_message();
  EXPECT_EQ(told->load(), 1);
}

// An fp8 checkpoint served on the CPU: Models.Info names its quantization and says its fp8
// weights are kept as stored, with the bytes the weights take.
TEST(ServerTest, ModelsInfoReportsFp8Weights) {
  auto server =
      StartServer({}, {}, std::string(LINFER_HYBRID_FIXTURES) + "/qwen35moe_vlm_fp8_fused");
  ASSERT_NE(server, nullptr);
  auto models = v1::Models::NewStub(Connect(*server));
  grpc::ClientContext c;
  v1::ModelInfo info;
  ASSERT_TRUE(models->Info(&c, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.quantization(), "fp8");
  EXPECT_EQ(info.fp8_weights(), "kept");
  EXPECT_EQ(info.weight_dtype(), "f32");
  EXPECT_EQ(info.weight_bytes(), server->engine().model().weight_bytes());
  EXPECT_LT(info.weight_bytes(), 4 * info.parameters());
}

}  // namespace
}  // namespace linfer
