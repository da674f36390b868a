// HttpServer over civetweb's C++ wrapper.
#include "server/http_server.h"

#include <CivetServer.h>

#include <exception>

#include "absl/strings/str_cat.h"

namespace linfer {
namespace {

class RouteHandler : public CivetHandler {
 public:
  explicit RouteHandler(HttpServer::Route route) : route_(std::move(route)) {}
  bool handleGet(CivetServer*, struct mg_connection* conn) override {
    HttpResponse r = route_();
    mg_printf(conn,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Connection: close\r\n\r\n",
              r.status, mg_get_response_code_text(conn, r.status), r.content_type.c_str(),
              r.body.size());
    mg_write(conn, r.body.data(), r.body.size());
    return true;
  }

 private:
  HttpServer::Route route_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              int port) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  const std::string listen = absl::StrCat(address, ":", port);
  std::vector<std::string> options = {"listening_ports",    listen, "num_threads", "4",
                                      "request_timeout_ms", "10000"};
  try {
    s->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the HTTP listener on ", listen, ": ", e.what()));
  }
  std::vector<int> ports = s->server_->getListeningPorts();
  s->port_ = ports.empty() ? port : ports[0];
  return s;
}

HttpServer::~HttpServer() {
  if (server_) server_->close();
}

void HttpServer::Get(const std::string& path, Route route) {
  handlers_.push_back(std::make_unique<RouteHandler>(std::move(route)));
  server_->addHandler(path, handlers_.back().get());
}

}  // namespace linfer
