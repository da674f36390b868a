// The HTTP listener (civetweb): GET /metrics (Prometheus text format) and GET /health (200 while
// serving, 503 while draining). Further routes can be added with Handle().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

class CivetServer;
class CivetHandler;

namespace linfer {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Route = std::function<HttpResponse()>;
  // Binds address:port (port 0: any free port) with a few worker threads.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address, int port);
  ~HttpServer();

  void Get(const std::string& path, Route route);  // before or after Start
  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<CivetServer> server_;
  std::vector<std::unique_ptr<CivetHandler>> handlers_;
  int port_ = 0;
};

}  // namespace linfer
