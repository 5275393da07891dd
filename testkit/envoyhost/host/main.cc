// envoyhost runs one scenario file against llmesh-filter.so and prints what
// happened as JSON: every event upstream and downstream with a global
// sequence number, local replies, dynamic metadata, Envoy stats, C API
// statuses, violations and the objects Go finalized.
//
//   envoyhost [-v] [-o out.json] llmesh-filter.so scenario.txt
//   envoyhost -i [-v] llmesh-filter.so
//
// With -i (driven) the steps come one a line on stdin, in the scenario
// language plus `drop NAME` (forget an ended stream) and `sync TOKEN`;
// every event is written to stdout as one JSON line as it happens
// ({"stream", "seq", "side", "kind", …}; {"stream", "kind": "ended"} when
// the stream ended; "violation" and "error" lines), and at the end of
// stdin a {"kind": "report"} line and the JSON report.
//
// Exit status: 0 when the scenario ran without violations or failed waits,
// 1 otherwise, 2 for a usage or scenario error.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "host.h"
#include "structpb.h"

namespace envoyhost {

extern std::atomic<int64_t> requests_created, requests_freed, configs_created, configs_freed;

namespace {

std::mutex rec_mu;
std::vector<std::string> violations;
std::vector<std::string> failures;
std::vector<std::pair<int, std::string>> logs;
std::map<int, int64_t> capi_statuses;
std::atomic<uint64_t> seq{0};
bool verbose = false;
uint32_t log_level = 3; // warn

// Driven mode: events go to stdout as they happen, one JSON line each.
bool driven = false;
std::mutex out_mu;

void emitLine(const std::string& line) {
  std::lock_guard<std::mutex> l(out_mu);
  fwrite(line.data(), 1, line.size(), stdout);
  fputc('\n', stdout);
  fflush(stdout);
}

void emitNote(const std::string& kind, const std::string& details) {
  emitLine("{\"kind\": " + jsonStr(kind) + ", \"details\": " + jsonStr(details) + "}");
}

} // namespace

void violation(const std::string& what) {
  {
    std::lock_guard<std::mutex> l(rec_mu);
    violations.push_back(what);
    if (verbose) {
      fprintf(stderr, "VIOLATION: %s\n", what.c_str());
    }
  }
  if (driven) {
    emitNote("violation", what);
  }
}

void countStatus(CAPIStatus st) {
  std::lock_guard<std::mutex> l(rec_mu);
  capi_statuses[int(st)]++;
}

uint64_t nextSeq() { return ++seq; }

} // namespace envoyhost

extern "C" {

void envoyGoFilterLog(uint32_t level, void* message_data, int message_len) {
  using namespace envoyhost;
  std::string m(static_cast<const char*>(message_data), static_cast<size_t>(message_len));
  std::lock_guard<std::mutex> l(rec_mu);
  logs.emplace_back(int(level), m);
  if (verbose) {
    fprintf(stderr, "log[%u]: %s\n", level, m.c_str());
  }
}

uint32_t envoyGoFilterLogLevel() { return envoyhost::log_level; }

} // extern "C"

namespace envoyhost {
namespace {

// ---- scenario -------------------------------------------------------------

struct Line {
  int no;
  std::vector<std::string> tok;
  std::string block; // the text of a <<END block
};

bool unquote(const std::string& in, size_t& i, std::string& out, std::string* err) {
  i++; // opening quote
  while (i < in.size() && in[i] != '"') {
    char c = in[i++];
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (i >= in.size()) {
      break;
    }
    char e = in[i++];
    switch (e) {
    case 'n':
      out.push_back('\n');
      break;
    case 'r':
      out.push_back('\r');
      break;
    case 't':
      out.push_back('\t');
      break;
    case '0':
      out.push_back('\0');
      break;
    case 'x': {
      if (i + 2 > in.size()) {
        *err = "bad \\x escape";
        return false;
      }
      out.push_back(static_cast<char>(std::stoi(in.substr(i, 2), nullptr, 16)));
      i += 2;
      break;
    }
    default:
      out.push_back(e);
    }
  }
  if (i >= in.size()) {
    *err = "unterminated string";
    return false;
  }
  i++;
  return true;
}

bool tokenize(const std::string& line, std::vector<std::string>& tok, std::string* err) {
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && isspace(static_cast<unsigned char>(line[i]))) {
      i++;
    }
    if (i >= line.size() || line[i] == '#') {
      break;
    }
    std::string t;
    if (line[i] == '"') {
      // a quoted token keeps a leading marker so that "end" stays data
      t = "\x01";
      if (!unquote(line, i, t, err)) {
        return false;
      }
    } else {
      while (i < line.size() && !isspace(static_cast<unsigned char>(line[i]))) {
        t.push_back(line[i++]);
      }
    }
    tok.push_back(t);
  }
  return true;
}

bool parseScenario(const std::string& text, std::vector<Line>& out, std::string* err) {
  std::istringstream in(text);
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    no++;
    Line l{no, {}, ""};
    if (!tokenize(line, l.tok, err)) {
      *err = "line " + std::to_string(no) + ": " + *err;
      return false;
    }
    if (l.tok.empty()) {
      continue;
    }
    const std::string& last = l.tok.back();
    if (last.rfind("<<", 0) == 0) {
      std::string marker = last.substr(2);
      l.tok.pop_back();
      std::string b;
      bool closed = false;
      while (std::getline(in, line)) {
        no++;
        if (line == marker) {
          closed = true;
          break;
        }
        b += line + "\n";
      }
      if (!closed) {
        *err = "line " + std::to_string(l.no) + ": block not closed by " + marker;
        return false;
      }
      l.block = b;
    }
    out.push_back(std::move(l));
  }
  return true;
}

std::string plain(const std::string& t) { return !t.empty() && t[0] == '\x01' ? t.substr(1) : t; }

bool hexBytes(const std::string& h, std::string& out) {
  if (h.size() % 2 != 0) {
    return false;
  }
  for (size_t i = 0; i < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return true;
}

// dataTokens concatenates "quoted", hex:… and grpc:… (a framed message).
bool dataTokens(const std::vector<std::string>& tok, size_t from, std::string& out,
                std::string* err) {
  for (size_t i = from; i < tok.size(); i++) {
    const std::string& t = tok[i];
    if (!t.empty() && t[0] == '\x01') {
      out += t.substr(1);
    } else if (t.rfind("hex:", 0) == 0) {
      if (!hexBytes(t.substr(4), out)) {
        *err = "bad hex " + t;
        return false;
      }
    } else if (t.rfind("grpc:", 0) == 0) {
      std::string m;
      if (!hexBytes(t.substr(5), m)) {
        *err = "bad hex " + t;
        return false;
      }
      out.push_back(0);
      uint32_t n = static_cast<uint32_t>(m.size());
      for (int k = 3; k >= 0; k--) {
        out.push_back(static_cast<char>(n >> (8 * k)));
      }
      out += m;
    } else {
      *err = "data token " + t + " is not \"quoted\", hex: or grpc:";
      return false;
    }
  }
  return true;
}

bool headerTokens(const std::vector<std::string>& tok, size_t from, HeaderMap& h,
                  std::string* err) {
  if ((tok.size() - from) % 2 != 0) {
    *err = "headers want name value pairs";
    return false;
  }
  for (size_t i = from; i < tok.size(); i += 2) {
    h.add(lower(plain(tok[i])), plain(tok[i + 1]));
  }
  return true;
}

std::string nowRFC3339() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(us / 1000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char b[64];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  char o[96];
  snprintf(o, sizeof o, "%s.%06lld+00:00", b, static_cast<long long>(us % 1000000));
  return o;
}

// eventJSON renders one event's fields (no braces).
std::string eventJSON(const Event& e) {
  std::ostringstream so;
  so << "\"seq\": " << e.seq << ", \"side\": " << jsonStr(e.side) << ", \"kind\": " << jsonStr(e.kind)
     << ", \"end\": " << (e.end ? "true" : "false");
  if (!e.headers.e.empty()) {
    so << ", \"headers\": [";
    bool fh = true;
    for (auto& kv : e.headers.e) {
      so << (fh ? "" : ", ") << "[" << jsonStr(kv.first) << ", " << jsonStr(kv.second) << "]";
      fh = false;
    }
    so << "]";
  }
  if (!e.data.empty()) {
    so << ", \"data\": " << jsonStr(e.data);
  }
  if (e.code != 0) {
    so << ", \"code\": " << e.code;
  }
  if (!e.details.empty()) {
    so << ", \"details\": " << jsonStr(e.details);
  }
  return so.str();
}

struct Run {
  std::string so;
  std::string plugin{"llmesh"};
  uint32_t concurrency{1};
  uint64_t buffer_limit{1 << 20};
  std::vector<std::unique_ptr<Dispatcher>> workers;
  std::shared_ptr<FilterConfig> config;
  std::vector<std::string> config_errors;
  std::map<std::string, std::unique_ptr<Stream>> streams;
  std::vector<std::string> order;
  // live are the streams of each worker whose events are written out in
  // driven mode; each list is touched only on its worker.
  std::vector<std::vector<Stream*>> live;

  Stream* stream(const std::string& n, std::string* err) {
    auto it = streams.find(n);
    if (it == streams.end()) {
      *err = "unknown stream " + n;
      return nullptr;
    }
    return it->second.get();
  }

  bool ensureWorkers() {
    if (!workers.empty()) {
      return true;
    }
    live.resize(concurrency);
    for (uint32_t i = 0; i < concurrency; i++) {
      workers.push_back(std::make_unique<Dispatcher>(i));
      if (driven) {
        workers.back()->afterTask = [this, i] { flush(i); };
      }
    }
    return true;
  }

  // flush writes out what the last task on worker w did to its streams.
  void flush(uint32_t w) {
    for (Stream* s : live[w]) {
      for (; s->emitted < s->events.size(); s->emitted++) {
        const Event& e = s->events[s->emitted];
        std::string line = "{\"stream\": " + jsonStr(s->name()) + ", " + eventJSON(e);
        if (e.side == "upstream" && e.kind == "headers") {
          line += ", \"override_host\": " + jsonStr(s->override_host);
        }
        emitLine(line + "}");
      }
      if (s->ended() && !s->end_emitted) {
        s->end_emitted = true;
        emitLine("{\"stream\": " + jsonStr(s->name()) + ", \"kind\": \"ended\", \"details\": " +
                 jsonStr(s->end_reason) + "}");
      }
    }
  }

  // drop forgets an ended stream (driven mode: a table of many requests).
  bool drop(const std::string& name, std::string* err) {
    Stream* s = stream(name, err);
    if (s == nullptr) {
      return false;
    }
    bool ended = false;
    s->dispatcher().run([&] {
      ended = s->ended();
      if (ended) {
        auto& l = live[s->dispatcher().id()];
        l.erase(std::remove(l.begin(), l.end(), s), l.end());
        streams.erase(name);
      }
    });
    if (!ended) {
      *err = "drop " + name + ": the stream has not ended";
      return false;
    }
    order.erase(std::remove(order.begin(), order.end(), name), order.end());
    return true;
  }

  // setConfig parses a filter config on the main thread, as Envoy does.
  bool setConfig(const std::string& json, std::string* err) {
    ensureWorkers();
    std::string any;
    if (!configAny(json, &any, err)) {
      *err = "config: " + *err;
      return false;
    }
    auto c = std::make_shared<FilterConfig>(plugin, any, concurrency);
    if (!c->newGoPluginConfig()) {
      config_errors.push_back("config rejected by the plugin");
      // Envoy refuses the listener update and keeps the old config.
      return true;
    }
    config = c;
    return true;
  }

  bool check(Stream* s, const std::string& cond, bool* ok_out, std::string* err) {
    bool ok = false;
    bool known = true;
    s->dispatcher().run([&] {
      if (cond == "upstream") {
        ok = s->upstreamStarted();
      } else if (cond == "upstream_end") {
        ok = s->upstreamEnded();
      } else if (cond == "downstream") {
        ok = s->downstreamStarted();
      } else if (cond == "ended") {
        ok = s->ended();
      } else if (cond == "held") {
        ok = !s->ended() && !s->goIdle();
      } else if (cond == "idle") {
        ok = s->goIdle();
      } else {
        known = false;
      }
    });
    if (!known) {
      *err = "unknown wait condition " + cond;
      return false;
    }
    *ok_out = ok;
    return true;
  }

  bool wait(Stream* s, const std::string& cond, int timeout_ms, std::string* err) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      bool ok = false;
      if (!check(s, cond, &ok, err)) {
        return false;
      }
      if (ok) {
        return true;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::lock_guard<std::mutex> l(rec_mu);
        failures.push_back("wait " + s->name() + " " + cond + ": timed out after " +
                           std::to_string(timeout_ms) + " ms");
        return true;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // bench N CHUNKS sse|grpc runs N requests one after another on worker 0,
  // each answered with CHUNKS token-bearing chunks, and records the CPU
  // time of the worker thread in the response callbacks (the SDK shim, the
  // cgo calls and the adapter run on it) and of the whole process.
  std::string bench_json;
  bool bench(int n, int chunks, const std::string& kind, std::string* err) {
    if (!config) {
      *err = "bench before a config";
      return false;
    }
    bool grpc = kind == "grpc";
    if (!grpc && kind != "sse") {
      *err = "bench wants sse or grpc";
      return false;
    }
    HeaderMap req;
    req.add(":method", "POST");
    req.add(":path", grpc ? "/llm.v1.Generation/Generate" : "/v1/completions");
    req.add("content-type", grpc ? "application/grpc" : "application/json");
    HeaderMap resp;
    resp.add(":status", "200");
    resp.add("content-type", grpc ? "application/grpc" : "text/event-stream");
    std::string chunk =
        grpc ? std::string("\x00\x00\x00\x00\x06\x0a\x01\x05\x12\x01\x61", 11)
             : "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
               "\"text\":\"a\",\"finish_reason\":null}]}\n\n";
    Dispatcher& d = *workers[0];
    auto tcpu = [] {
      struct timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    };
    auto pcpu = [] {
      struct timespec ts;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    };
    auto wall = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
    int64_t chunk_cpu = 0, chunk_wall = 0, req_cpu = 0;
    int64_t p0 = pcpu(), w0 = wall();
    for (int i = 0; i < n; i++) {
      std::string name = "bench" + std::to_string(i);
      std::unique_ptr<Stream> s;
      int64_t c = 0;
      d.run([&] {
        int64_t t0 = tcpu();
        s = std::make_unique<Stream>(name, d, config, buffer_limit);
        s->quiet = true;
        s->start_time = nowRFC3339();
        s->clientHeaders(req, true);
        c += tcpu() - t0;
      });
      std::string werr;
      wait(s.get(), "upstream_end", 5000, &werr);
      d.run([&] {
        int64_t t0 = tcpu();
        s->upstreamHeaders(resp, false);
        int64_t t1 = tcpu(), wl = wall();
        for (int k = 0; k < chunks; k++) {
          s->upstreamData(chunk, false);
        }
        chunk_cpu += tcpu() - t1;
        chunk_wall += wall() - wl;
        if (grpc) {
          HeaderMap tr;
          tr.add("grpc-status", "0");
          s->upstreamTrailers(tr);
        } else {
          s->upstreamData("data: [DONE]\n\n", true);
        }
        c += tcpu() - t0;
      });
      req_cpu += c;
      d.run([&] { s.reset(); });
    }
    int64_t total = int64_t(n) * chunks;
    std::ostringstream o;
    o << "{\"kind\": " << jsonStr(kind) << ", \"requests\": " << n << ", \"chunks_per_request\": " << chunks
      << ", \"chunk_worker_cpu_ns\": " << (total ? chunk_cpu / total : 0)
      << ", \"chunk_wall_ns\": " << (total ? chunk_wall / total : 0)
      << ", \"request_worker_cpu_ns\": " << req_cpu / n
      << ", \"request_process_cpu_ns\": " << (pcpu() - p0) / n
      << ", \"request_wall_ns\": " << (wall() - w0) / n << "}";
    bench_json += (bench_json.empty() ? "" : ", ") + o.str();
    return true;
  }

  bool exec(const Line& l, std::string* err) {
    const auto& t = l.tok;
    const std::string cmd = plain(t[0]);
    if (cmd == "expect") {
      return true; // read by the Go test
    }
    if (cmd == "plugin" && t.size() == 2) {
      plugin = plain(t[1]);
      return true;
    }
    if (cmd == "concurrency" && t.size() == 2) {
      if (!workers.empty()) {
        *err = "concurrency must come before the first config";
        return false;
      }
      concurrency = static_cast<uint32_t>(std::stoul(t[1]));
      return true;
    }
    if (cmd == "buffer_limit" && t.size() == 2) {
      buffer_limit = std::stoull(t[1]);
      return true;
    }
    if (cmd == "log_level" && t.size() == 2) {
      log_level = static_cast<uint32_t>(std::stoul(t[1]));
      return true;
    }
    if (cmd == "config" || cmd == "reload") {
      std::string json = l.block;
      for (size_t i = 1; i < t.size(); i++) {
        json += (i > 1 ? " " : "") + plain(t[i]);
      }
      return setConfig(json, err);
    }
    if (cmd == "stream" && t.size() >= 2) {
      if (!config) {
        *err = "stream before a config";
        return false;
      }
      std::string name = plain(t[1]);
      if (streams.count(name)) {
        *err = "stream " + name + " exists";
        return false;
      }
      uint32_t w = 0;
      std::string peer;
      for (size_t i = 2; i < t.size(); i++) {
        if (t[i].rfind("worker=", 0) == 0) {
          w = static_cast<uint32_t>(std::stoul(t[i].substr(7)));
        } else if (t[i].rfind("peer=", 0) == 0) {
          peer = t[i].substr(5);
        } else {
          *err = "stream: unknown option " + t[i];
          return false;
        }
      }
      if (w >= workers.size()) {
        *err = "stream: worker " + std::to_string(w) + " >= concurrency";
        return false;
      }
      Dispatcher& d = *workers[w];
      std::unique_ptr<Stream> s;
      d.run([&] {
        s = std::make_unique<Stream>(name, d, config, buffer_limit);
        s->start_time = nowRFC3339();
        if (!peer.empty()) {
          s->peer = peer;
        }
        live[w].push_back(s.get());
      });
      streams[name] = std::move(s);
      order.push_back(name);
      return true;
    }
    if (cmd == "bench" && t.size() == 4) {
      return bench(std::stoi(t[1]), std::stoi(t[2]), plain(t[3]), err);
    }
    if (cmd == "wait_stat" && t.size() >= 3) {
      // wait_stat NAME VALUE [ms]: poll an Envoy counter or gauge.
      std::string name = plain(t[1]);
      int64_t want = std::stoll(t[2]);
      int ms = t.size() > 3 ? std::stoi(t[3]) : 5000;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      for (;;) {
        {
          std::lock_guard<std::mutex> sl(stats.mu);
          auto c = stats.counters.find(name);
          auto g = stats.gauges.find(name);
          if ((c != stats.counters.end() && c->second == want) ||
              (g != stats.gauges.end() && g->second == want)) {
            return true;
          }
        }
        if (std::chrono::steady_clock::now() > deadline) {
          std::lock_guard<std::mutex> lk(rec_mu);
          failures.push_back("wait_stat " + name + " " + t[2] + ": timed out after " +
                             std::to_string(ms) + " ms");
          return true;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (cmd == "wait" && t.size() >= 3 && plain(t[1]).find('|') != std::string::npos) {
      // wait A|B… COND [ms]: until one of the streams meets COND (streams
      // racing for one outcome, such as which queued request is refused).
      std::vector<Stream*> ss;
      std::string names = plain(t[1]);
      for (size_t i = 0; i <= names.size();) {
        size_t j = names.find('|', i);
        if (j == std::string::npos) {
          j = names.size();
        }
        Stream* s = stream(names.substr(i, j - i), err);
        if (s == nullptr) {
          return false;
        }
        ss.push_back(s);
        i = j + 1;
      }
      int ms = t.size() > 3 ? std::stoi(t[3]) : 5000;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      for (;;) {
        for (Stream* s : ss) {
          bool ok = false;
          if (!check(s, plain(t[2]), &ok, err)) {
            return false;
          }
          if (ok) {
            return true;
          }
        }
        if (std::chrono::steady_clock::now() > deadline) {
          std::lock_guard<std::mutex> lk(rec_mu);
          failures.push_back("wait " + names + " " + plain(t[2]) + ": timed out after " +
                             std::to_string(ms) + " ms");
          return true;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (cmd == "wait" && t.size() >= 3) {
      Stream* s = stream(plain(t[1]), err);
      if (s == nullptr) {
        return false;
      }
      int ms = t.size() > 3 ? std::stoi(t[3]) : 5000;
      return wait(s, plain(t[2]), ms, err);
    }
    if (cmd == "until" && t.size() >= 4) {
      // until S COND CMD…: repeat CMD (1 ms apart) until S meets COND.
      Stream* s = stream(plain(t[1]), err);
      if (s == nullptr) {
        return false;
      }
      Line inner{l.no, std::vector<std::string>(t.begin() + 3, t.end()), ""};
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (;;) {
        bool ok = false;
        if (!check(s, plain(t[2]), &ok, err)) {
          return false;
        }
        if (ok) {
          return true;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          std::lock_guard<std::mutex> lk(rec_mu);
          failures.push_back("until " + s->name() + " " + plain(t[2]) + ": timed out after 10 s");
          return true;
        }
        if (!exec(inner, err)) {
          return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    bool up = cmd == "up";
    size_t base = up ? 1 : 0;
    if (t.size() < base + 2) {
      *err = "unknown command " + cmd;
      return false;
    }
    Stream* s = stream(plain(t[base]), err);
    if (s == nullptr) {
      return false;
    }
    std::string what = plain(t[base + 1]);
    size_t arg = base + 2;
    bool end = false;
    if (arg < t.size() && t[arg] == "end") {
      end = true;
      arg++;
    }
    if (what == "headers" || what == "trailers") {
      HeaderMap h;
      if (!headerTokens(t, arg, h, err)) {
        return false;
      }
      s->dispatcher().run([&] {
        if (what == "headers") {
          up ? s->upstreamHeaders(h, end) : s->clientHeaders(h, end);
        } else {
          up ? s->upstreamTrailers(h) : s->clientTrailers(h);
        }
      });
      return true;
    }
    if (what == "data") {
      std::string d;
      if (!dataTokens(t, arg, d, err)) {
        return false;
      }
      s->dispatcher().run([&] { up ? s->upstreamData(d, end) : s->clientData(d, end); });
      return true;
    }
    if (what == "reset") {
      s->dispatcher().run([&] { up ? s->upstreamReset() : s->clientReset(); });
      return true;
    }
    *err = "unknown stream action " + what;
    return false;
  }

  void finish() {
    // End every stream still open, as Envoy does on shutdown, then drop the
    // config and let Go finalize what it holds.
    for (auto& n : order) {
      Stream* s = streams[n].get();
      s->dispatcher().run([&] {
        if (!s->ended()) {
          s->end_reason = "open at the end of the scenario";
        }
      });
    }
    config.reset();
    for (auto& w : workers) {
      w->run([] {});
    }
    // envoyGoFilterCleanUp runs a GC and waits for its finalizers; an
    // object reachable only from another finalized one needs another.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    do {
      dso.cleanUp();
      for (auto& w : workers) {
        w->run([] {});
      }
    } while (std::chrono::steady_clock::now() < deadline &&
             (requests_freed.load() < requests_created.load() ||
              configs_freed.load() < configs_created.load()) &&
             (std::this_thread::sleep_for(std::chrono::milliseconds(20)), true));
  }

  std::string report() {
    std::ostringstream o;
    o << "{\n \"streams\": {";
    bool firstS = true;
    for (auto& n : order) {
      Stream* s = streams[n].get();
      std::string body;
      s->dispatcher().run([&] {
        std::ostringstream so;
        so << (firstS ? "\n  " : ",\n  ") << jsonStr(n) << ": {\"ended\": " << (s->ended() ? "true" : "false")
           << ", \"end_reason\": " << jsonStr(s->end_reason)
           << ", \"completed\": " << (s->completed ? "true" : "false")
           << ", \"destroyed\": " << s->destroy_calls << ", \"destroy_state\": " << jsonStr(s->dec_state)
           << ", \"override_host\": " << jsonStr(s->override_host)
           << ", \"watermarks\": " << (s->dec_watermark_ + s->enc_watermark_) << ", \"metadata\": {";
        bool fm = true;
        for (auto& ns : s->metadata) {
          so << (fm ? "" : ", ") << jsonStr(ns.first) << ": {";
          bool fk = true;
          for (auto& kv : ns.second) {
            so << (fk ? "" : ", ") << jsonStr(kv.first) << ": " << valueJSON(kv.second);
            fk = false;
          }
          so << "}";
          fm = false;
        }
        so << "}, \"events\": [";
        bool fe = true;
        for (auto& e : s->events) {
          so << (fe ? "\n   " : ",\n   ") << "{" << eventJSON(e);
          so << "}";
          fe = false;
        }
        so << "]}";
        body = so.str();
      });
      o << body;
      firstS = false;
    }
    o << "\n },\n \"stats\": {";
    {
      std::lock_guard<std::mutex> l(stats.mu);
      bool f = true;
      for (auto& kv : stats.counters) {
        o << (f ? "" : ", ") << jsonStr(kv.first) << ": " << kv.second;
        f = false;
      }
      o << "},\n \"gauges\": {";
      f = true;
      for (auto& kv : stats.gauges) {
        o << (f ? "" : ", ") << jsonStr(kv.first) << ": " << kv.second;
        f = false;
      }
    }
    std::lock_guard<std::mutex> l(rec_mu);
    auto list = [&o](const std::vector<std::string>& v) {
      o << "[";
      for (size_t i = 0; i < v.size(); i++) {
        o << (i ? ", " : "") << jsonStr(v[i]);
      }
      o << "]";
    };
    o << "},\n \"violations\": ";
    list(violations);
    o << ",\n \"failures\": ";
    list(failures);
    o << ",\n \"config_errors\": ";
    list(config_errors);
    o << ",\n \"capi\": {";
    const char* names[] = {"OK",         "FilterIsGone",         "FilterIsDestroy",
                           "NotInGo",    "InvalidPhase",         "ValueNotFound",
                           "Yield",      "InternalFailure",      "SerializationFailure",
                           "InvalidScene", "InvalidIPAddress"};
    bool f = true;
    for (auto& kv : capi_statuses) {
      int idx = -kv.first;
      o << (f ? "" : ", ") << jsonStr(idx >= 0 && idx <= 10 ? names[idx] : "unknown") << ": "
        << kv.second;
      f = false;
    }
    o << "},\n \"bench\": [" << bench_json << "]";
    o << ",\n \"logs\": [";
    for (size_t i = 0; i < logs.size(); i++) {
      o << (i ? ",\n  " : "\n  ") << "{\"level\": " << logs[i].first << ", \"msg\": " << jsonStr(logs[i].second)
        << "}";
    }
    o << "],\n \"objects\": {\"requests_created\": " << requests_created.load()
      << ", \"requests_freed\": " << requests_freed.load()
      << ", \"configs_created\": " << configs_created.load()
      << ", \"configs_freed\": " << configs_freed.load() << "}\n}\n";
    return o.str();
  }
};

} // namespace
} // namespace envoyhost

namespace envoyhost {
namespace {

// drive runs steps read from stdin until it ends (driven mode).
int drive(Run& run) {
  std::string text;
  int no = 0;
  std::string err;
  while (std::getline(std::cin, text)) {
    no++;
    Line l{no, {}, ""};
    err.clear();
    if (!tokenize(text, l.tok, &err)) {
      emitNote("error", "line " + std::to_string(no) + ": " + err);
      continue;
    }
    if (l.tok.empty()) {
      continue;
    }
    const std::string last = l.tok.back();
    if (last.rfind("<<", 0) == 0) {
      std::string marker = last.substr(2);
      l.tok.pop_back();
      while (std::getline(std::cin, text) && text != marker) {
        no++;
        l.block += text + "\n";
      }
      no++;
    }
    const std::string cmd = plain(l.tok[0]);
    bool ok = true;
    if (cmd == "drop" && l.tok.size() == 2) {
      ok = run.drop(plain(l.tok[1]), &err);
    } else if (cmd == "sync" && l.tok.size() == 2) {
      // Every step before it has run: its events are out.
      for (auto& w : run.workers) {
        w->run([] {});
      }
      emitNote("sync", plain(l.tok[1]));
    } else {
      ok = run.exec(l, &err);
    }
    if (!ok) {
      emitNote("error", "line " + std::to_string(l.no) + ": " + err);
    }
  }
  run.finish();
  std::string rep = run.report();
  {
    std::lock_guard<std::mutex> l(out_mu);
    fputs("{\"kind\": \"report\"}\n", stdout);
    fwrite(rep.data(), 1, rep.size(), stdout);
    fflush(stdout);
  }
  std::lock_guard<std::mutex> l(rec_mu);
  return violations.empty() && failures.empty() ? 0 : 1;
}

} // namespace
} // namespace envoyhost

int main(int argc, char** argv) {
  using namespace envoyhost;
  std::string out_path;
  std::vector<std::string> args;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-v") {
      verbose = true;
    } else if (a == "-i") {
      driven = true;
    } else if (a == "-o" && i + 1 < argc) {
      out_path = argv[++i];
    } else {
      args.push_back(a);
    }
  }
  if (driven && args.size() == 1) {
    std::string err;
    if (!dso.load(args[0], &err)) {
      fprintf(stderr, "envoyhost: load %s: %s\n", args[0].c_str(), err.c_str());
      return 2;
    }
    Run run;
    run.so = args[0];
    int rc = drive(run);
    // Go's threads are still running: leave without static destructors.
    _exit(rc);
  }
  if (args.size() != 2) {
    fprintf(stderr, "usage: envoyhost [-v] [-o out.json] llmesh-filter.so scenario.txt\n"
                    "       envoyhost -i [-v] llmesh-filter.so   (steps on stdin, events on stdout)\n");
    return 2;
  }
  std::ifstream in(args[1]);
  if (!in) {
    fprintf(stderr, "envoyhost: cannot read %s\n", args[1].c_str());
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<Line> lines;
  std::string err;
  if (!parseScenario(ss.str(), lines, &err)) {
    fprintf(stderr, "envoyhost: %s: %s\n", args[1].c_str(), err.c_str());
    return 2;
  }
  if (!dso.load(args[0], &err)) {
    fprintf(stderr, "envoyhost: load %s: %s\n", args[0].c_str(), err.c_str());
    return 2;
  }
  Run run;
  run.so = args[0];
  for (auto& l : lines) {
    if (!run.exec(l, &err)) {
      fprintf(stderr, "envoyhost: %s:%d: %s\n", args[1].c_str(), l.no, err.c_str());
      fflush(stderr);
      _exit(2);
    }
  }
  run.finish();
  std::string rep = run.report();
  if (out_path.empty()) {
    fwrite(rep.data(), 1, rep.size(), stdout);
  } else {
    std::ofstream o(out_path);
    o << rep;
  }
  fflush(stdout);
  bool bad;
  {
    std::lock_guard<std::mutex> l(rec_mu);
    bad = !violations.empty() || !failures.empty();
  }
  // Go's threads are still running: leave without static destructors.
  _exit(bad ? 1 : 0);
}
