#pragma once
// Headless Chromium (Debian's `chromium`) driven over the Chrome DevTools Protocol, for tests
// of the dashboard: load a page, run JavaScript in it, wait for the DOM, take a screenshot.
// One page per Browser; every call is blocking and bounded by a timeout.

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "client_sdk/http_client.h"
#include "tests/support/temp_dir.h"

namespace fedcase::testing {

inline constexpr const char* kChromium = "/usr/bin/chromium";

class Browser {
 public:
  // Starts Chromium with a fresh profile in `dir` (its output goes to dir/chromium.log) and
  // attaches to its page. Throws std::runtime_error when it does not come up within 30 s.
  explicit Browser(const TempDir& dir) : profile_(dir.file("chromium-profile")) {
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      FILE* log = std::fopen(dir.file("chromium.log").c_str(), "a");
      if (log) {
        dup2(fileno(log), STDOUT_FILENO);
        dup2(fileno(log), STDERR_FILENO);
      }
      const std::string user_dir = "--user-data-dir=" + profile_;
      // Root needs --no-sandbox; the rest keeps Chromium off every network but loopback.
      execl(kChromium, kChromium, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--remote-debugging-port=0", user_dir.c_str(), "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-extensions",
            "--disable-default-apps", "--window-size=1400,1000", "about:blank",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    try {
      connect_to_page();
    } catch (...) {
      stop();  // the destructor will not run
      throw;
    }
  }

  ~Browser() { stop(); }

  // Calls a DevTools method and returns its result; throws with the protocol's error.
  nlohmann::json call(const std::string& method, const nlohmann::json& params = {},
                      double timeout_s = 30) {
    const int id = ++last_id_;
    nlohmann::json message = {{"id", id}, {"method", method}};
    if (!params.is_null()) message["params"] = params;
    socket_->write(boost::asio::buffer(message.dump()));
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      boost::beast::flat_buffer buffer;
      socket_->read(buffer);  // events arrive too: skipped
      auto reply =
          nlohmann::json::parse(boost::beast::buffers_to_string(buffer.data()), nullptr, false);
      if (!reply.is_object() || reply.value("id", 0) != id) continue;
      if (reply.contains("error")) throw std::runtime_error(method + ": " + reply["error"].dump());
      return reply["result"];
    }
    throw std::runtime_error(method + ": no answer within the timeout");
  }

  // The value of a JavaScript expression in the page (promises awaited).
  nlohmann::json evaluate(const std::string& expression) {
    auto result =
        call("Runtime.evaluate",
             {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
    if (result.contains("exceptionDetails")) {
      throw std::runtime_error("script failed: " + result["exceptionDetails"].dump());
    }
    return result["result"].value("value", nlohmann::json());
  }

  // Evaluates `expression` every 100 ms until it is true or `timeout_s` passes.
  bool wait_for(const std::string& expression, double timeout_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    do {
      if (evaluate("Boolean(" + expression + ")") == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < until);
    return false;
  }

  void navigate(const std::string& url) { call("Page.navigate", {{"url", url}}); }

  // Writes a PNG of the page as it is rendered now.
  void screenshot(const std::string& path) {
    auto shot =
        call("Page.captureScreenshot", {{"format", "png"}, {"captureBeyondViewport", true}});
    std::ofstream(path, std::ios::binary) << decode_base64(shot["data"].get<std::string>());
  }

 private:
  void connect_to_page() {
    // Chromium writes its DevTools port into the profile once it listens.
    uint16_t port = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (port == 0 && std::chrono::steady_clock::now() < until) {
      std::ifstream in(profile_ + "/DevToolsActivePort");
      int value = 0;
      if (in >> value && value > 0) port = static_cast<uint16_t>(value);
      if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (port == 0) throw std::runtime_error("Chromium did not start (see chromium.log)");
    client::HttpClient http(client::plain_connection("127.0.0.1", port));
    std::string target;
    while (target.empty() && std::chrono::steady_clock::now() < until) {
      auto list = http.request("GET", "/json/list", "", {}, 5);
      if (list.ok() && list->status == 200) {
        for (const auto& t : nlohmann::json::parse(list->body, nullptr, false)) {
          if (t.is_object() && t.value("type", "") == "page") {
            const std::string url = t.value("webSocketDebuggerUrl", "");
            target = url.substr(url.find("/devtools/"));
            break;
          }
        }
      }
      if (target.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (target.empty()) throw std::runtime_error("Chromium has no page to attach to");
    socket_ = std::make_unique<boost::beast::websocket::stream<boost::asio::ip::tcp::socket>>(io_);
    boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), port);
    socket_->next_layer().connect(endpoint);
    // A blocking read gives up after 30 s (and throws) instead of hanging on a stuck browser.
    const timeval read_timeout{30, 0};
    setsockopt(socket_->next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &read_timeout,
               sizeof(read_timeout));
    socket_->read_message_max(64 << 20);
    socket_->handshake("127.0.0.1:" + std::to_string(port), target);
    call("Page.enable");
    call("Runtime.enable");
  }

  void stop() {
    boost::beast::error_code ignored;
    if (socket_) socket_->close(boost::beast::websocket::close_code::normal, ignored);
    socket_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  static std::string decode_base64(const std::string& in) {
    static const std::string kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    uint32_t bits = 0;
    int count = 0;
    for (char c : in) {
      const size_t v = kAlphabet.find(c);
      if (v == std::string::npos) continue;  // padding
      bits = (bits << 6) | uint32_t(v);
      count += 6;
      if (count >= 8) {
        count -= 8;
        out += char((bits >> count) & 0xff);
      }
    }
    return out;
  }

  std::string profile_;
  pid_t pid_ = -1;
  boost::asio::io_context io_;
  std::unique_ptr<boost::beast::websocket::stream<boost::asio::ip::tcp::socket>> socket_;
  int last_id_ = 0;
};

}  // namespace fedcase::testing
