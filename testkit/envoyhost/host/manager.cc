// The filter manager of one stream with one golang filter and a router,
// after Envoy v1.36's source/common/http/filter_manager.cc: iteration stops
// and continues (commonContinue), injected data continuing stopped headers,
// added data, local replies through the encoder chain, a direct reply once
// the upstream answered, a reset once the response started. Also the
// dispatcher, the library loader and FilterConfig's metrics.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>

#include "host.h"

namespace envoyhost {

Dso dso;
Stats stats;

// ---- headers ----------------------------------------------------------------

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

size_t HeaderMap::byteSize() const {
  size_t n = 0;
  for (auto& kv : e) {
    n += kv.first.size() + kv.second.size();
  }
  return n;
}

const std::string* HeaderMap::get(const std::string& key) const {
  for (auto& kv : e) {
    if (kv.first == key) {
      return &kv.second;
    }
  }
  return nullptr;
}

void HeaderMap::set(const std::string& key, const std::string& value) {
  remove(key);
  e.emplace_back(key, value);
}

void HeaderMap::add(const std::string& key, const std::string& value) { e.emplace_back(key, value); }

void HeaderMap::remove(const std::string& key) {
  e.erase(std::remove_if(e.begin(), e.end(), [&](auto& kv) { return kv.first == key; }), e.end());
}

// ---- dispatcher -------------------------------------------------------------

Dispatcher::Dispatcher(uint32_t id) : id_(id) {
  std::mutex m;
  std::condition_variable started;
  bool ready = false;
  t_ = std::thread([&] {
    {
      std::lock_guard<std::mutex> l(m);
      tid_ = std::this_thread::get_id();
      ready = true;
    }
    started.notify_one();
    loop();
  });
  std::unique_lock<std::mutex> l(m);
  started.wait(l, [&] { return ready; });
}

Dispatcher::~Dispatcher() { stop(); }

void Dispatcher::post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(std::move(f));
  }
  cv_.notify_one();
}

void Dispatcher::deferredDelete(std::shared_ptr<void> o) { deferred_.push_back(std::move(o)); }

void Dispatcher::run(const std::function<void()>& f) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  post([&] {
    f();
    std::lock_guard<std::mutex> l(m);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> l(m);
  cv.wait(l, [&] { return done; });
}

void Dispatcher::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) {
      return;
    }
    stop_ = true;
  }
  cv_.notify_one();
  if (t_.joinable()) {
    t_.join();
  }
}

void Dispatcher::loop() {
  for (;;) {
    std::function<void()> f;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) {
        return;
      }
      f = std::move(q_.front());
      q_.pop_front();
    }
    f();
    deferred_.clear();
    if (afterTask) {
      afterTask();
    }
  }
}

// ---- the library ------------------------------------------------------------

template <typename T> static bool sym(void* h, T& fn, const char* name, std::string* err) {
  fn = reinterpret_cast<T>(dlsym(h, name));
  if (fn == nullptr) {
    *err += std::string("missing symbol ") + name + "; ";
    return false;
  }
  return true;
}

bool Dso::load(const std::string& path, std::string* err) {
  // dlopen searches the library path for a bare name; a file is meant.
  std::string p = path.find('/') == std::string::npos ? "./" + path : path;
  void* h = dlopen(p.c_str(), RTLD_LAZY);
  if (h == nullptr) {
    *err = dlerror();
    return false;
  }
  bool ok = true;
  ok &= sym(h, newConfig, "envoyGoFilterNewHttpPluginConfig", err);
  ok &= sym(h, mergeConfig, "envoyGoFilterMergeHttpPluginConfig", err);
  ok &= sym(h, destroyConfig, "envoyGoFilterDestroyHttpPluginConfig", err);
  ok &= sym(h, onHeader, "envoyGoFilterOnHttpHeader", err);
  ok &= sym(h, onData, "envoyGoFilterOnHttpData", err);
  ok &= sym(h, onLog, "envoyGoFilterOnHttpLog", err);
  ok &= sym(h, onStreamComplete, "envoyGoFilterOnHttpStreamComplete", err);
  ok &= sym(h, onDestroy, "envoyGoFilterOnHttpDestroy", err);
  ok &= sym(h, semaDec, "envoyGoRequestSemaDec", err);
  ok &= sym(h, cleanUp, "envoyGoFilterCleanUp", err);
  return ok;
}

// ---- FilterConfig -------------------------------------------------------------

std::atomic<int64_t> configs_created{0}, configs_freed{0};

HttpConfigInternal::HttpConfigInternal(std::weak_ptr<FilterConfig> c) : config(std::move(c)) {
  configs_created++;
}
HttpConfigInternal::~HttpConfigInternal() { configs_freed++; }

FilterConfig::FilterConfig(std::string plugin, std::string any_bytes, uint32_t concurrency)
    : plugin_name_(std::move(plugin)), any_(std::move(any_bytes)), concurrency_(concurrency) {}

bool FilterConfig::newGoPluginConfig() {
  auto* c = new HttpConfigInternal(weak_from_this());
  c->plugin_name_ptr = reinterpret_cast<uint64_t>(plugin_name_.data());
  c->plugin_name_len = plugin_name_.size();
  c->config_ptr = reinterpret_cast<uint64_t>(any_.data());
  c->config_len = any_.size();
  c->is_route_config = 0;
  c->concurrency = concurrency_;
  config_id_ = dso.newConfig(c);
  return config_id_ != 0;
}

FilterConfig::~FilterConfig() {
  if (config_id_ > 0) {
    dso.destroyConfig(config_id_, 0);
  }
}

CAPIStatus FilterConfig::defineMetric(uint32_t type, const std::string& name, uint32_t* id) {
  std::lock_guard<std::mutex> l(mu_);
  if (type > 2) {
    return CAPIValueNotFound;
  }
  uint32_t* next = type == 0 ? &next_counter_ : type == 1 ? &next_gauge_ : &next_histogram_;
  *next += 4; // the low two bits carry the type
  *id = *next;
  metric_names_[*id] = name;
  std::lock_guard<std::mutex> s(stats.mu);
  if (type == 0) {
    stats.counters.emplace(name, 0);
  } else if (type == 1) {
    stats.gauges.emplace(name, 0);
  } else {
    stats.histograms.emplace(name, std::vector<uint64_t>{});
  }
  return CAPIOK;
}

CAPIStatus FilterConfig::incrementMetric(uint32_t id, int64_t offset) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = metric_names_.find(id);
  if (it == metric_names_.end()) {
    return CAPIOK;
  }
  std::lock_guard<std::mutex> s(stats.mu);
  switch (id & 3) {
  case 0:
    if (offset > 0) {
      stats.counters[it->second] += offset;
    }
    break;
  case 1:
    stats.gauges[it->second] += offset;
    break;
  }
  return CAPIOK;
}

CAPIStatus FilterConfig::getMetric(uint32_t id, uint64_t* value) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = metric_names_.find(id);
  if (it == metric_names_.end()) {
    return CAPIOK;
  }
  std::lock_guard<std::mutex> s(stats.mu);
  if ((id & 3) == 0) {
    *value = static_cast<uint64_t>(stats.counters[it->second]);
  } else if ((id & 3) == 1) {
    *value = static_cast<uint64_t>(stats.gauges[it->second]);
  }
  return CAPIOK;
}

CAPIStatus FilterConfig::recordMetric(uint32_t id, uint64_t value) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = metric_names_.find(id);
  if (it == metric_names_.end()) {
    return CAPIOK;
  }
  std::lock_guard<std::mutex> s(stats.mu);
  switch (id & 3) {
  case 0:
    stats.counters[it->second] += static_cast<int64_t>(value);
    break;
  case 1:
    stats.gauges[it->second] = static_cast<int64_t>(value);
    break;
  default:
    stats.histograms[it->second].push_back(value);
  }
  return CAPIOK;
}

// ---- Stream -------------------------------------------------------------------

Stream::Stream(std::string name, Dispatcher& d, std::shared_ptr<FilterConfig> cfg, uint64_t limit)
    : name_(std::move(name)), d_(d), limit_(limit) {
  filter_ = std::make_shared<Filter>(std::move(cfg), *this, d.id());
}

Stream::~Stream() = default;

bool Stream::isGrpc() const {
  const std::string* ct = req_headers_.get("content-type");
  return ct != nullptr && ct->rfind("application/grpc", 0) == 0;
}

bool Stream::goIdle() const {
  if (filter_ == nullptr) {
    return true;
  }
  return !filter_->isProcessingInGo();
}

Event& Stream::record(const std::string& side, const std::string& kind, bool end) {
  if (quiet) {
    events.clear(); // keep only the latest, for the caller to fill in
  }
  Event e;
  e.seq = nextSeq();
  e.side = side;
  e.kind = kind;
  e.end = end;
  events.push_back(std::move(e));
  return events.back();
}

enum CallState { kDecoding = 1, kEncoding = 2 };

// percentEncode is Http::Utility::PercentEncoding::encode with its
// default reserved "%": what Envoy does to a grpc-message.
static std::string percentEncode(const std::string& v) {
  std::string o;
  for (unsigned char c : v) {
    if (c < ' ' || c >= '~' || c == '%') {
      char b[4];
      snprintf(b, sizeof b, "%%%02X", c);
      o += b;
    } else {
      o.push_back(static_cast<char>(c));
    }
  }
  return o;
}

void Stream::clientHeaders(HeaderMap h, bool end_stream) {
  if (ended_ || filter_ == nullptr) {
    return;
  }
  req_headers_ = std::move(h);
  dec_.observed_end = end_stream;
  call_state_ |= kDecoding;
  auto st = filter_->decodeHeaders(req_headers_, end_stream);
  call_state_ &= ~kDecoding;
  if (afterCallback(dec_)) {
    return;
  }
  if (st == HeadersStatus::Continue) {
    dec_.headers_continued = true;
    toUpstreamHeaders(end_stream);
  } else {
    dec_.stopped = true;
  }
}

void Stream::clientData(const std::string& data, bool end_stream) {
  if (ended_ || filter_ == nullptr || dec_.aborted) {
    return;
  }
  dec_.observed_end = dec_.observed_end || end_stream;
  Buffer b;
  b.d = data;
  call_state_ |= kDecoding;
  auto st = filter_->decodeData(b, end_stream);
  call_state_ &= ~kDecoding;
  if (afterCallback(dec_)) {
    return;
  }
  if (st == DataStatus::Continue) {
    if (dec_.stopped) {
      // A stopped filter continuing from its data callback continues the
      // whole chain, headers first.
      if (!dec_.buffered) {
        dec_.buffered = std::make_unique<Buffer>();
      }
      dec_.buffered->move(b);
      commonContinue(false);
    } else {
      if (!dec_.headers_continued) {
        violation("data continued before the headers");
      }
      toUpstreamData(b, end_stream);
    }
  } else {
    dec_.stopped = true;
    if (dec_.observed_end && !dec_.has_trailers && !dec_.buffered) {
      dec_.buffered = std::make_unique<Buffer>();
    }
  }
}

void Stream::clientTrailers(HeaderMap t) {
  if (ended_ || filter_ == nullptr || dec_.aborted) {
    return;
  }
  req_trailers_ = std::move(t);
  dec_.has_trailers = true;
  dec_.observed_end = true;
  call_state_ |= kDecoding;
  auto st = filter_->decodeTrailers(req_trailers_);
  call_state_ &= ~kDecoding;
  if (afterCallback(dec_)) {
    return;
  }
  if (st == HeadersStatus::Continue) {
    if (dec_.stopped) {
      commonContinue(false);
    } else {
      toUpstreamTrailers();
    }
  } else {
    dec_.stopped = true;
  }
}

void Stream::clientReset() {
  if (ended_) {
    return;
  }
  record("downstream", "client_reset", true);
  // A client that goes away: an HTTP/1.1 client closes its connection, and
  // the connection manager flags the stream DownstreamConnectionTermination
  // (DC); a gRPC client is on HTTP/2 and resets its stream, which the codec
  // details as remote_reset, flagged DownstreamRemoteReset (DR;
  // conn_manager_impl.cc onResetStream).
  response_flags |= isGrpc() ? uint64_t(1) << 28 : uint64_t(1) << 14;
  endStream("client reset");
}

void Stream::upstreamHeaders(HeaderMap h, bool end_stream) {
  if (ended_ || filter_ == nullptr) {
    return;
  }
  if (!up_started_) {
    violation("upstream answered before the request reached it");
  }
  resp_headers_ = std::move(h);
  resp_headers_set_ = true;
  if (const std::string* s = resp_headers_.get(":status")) {
    response_code = std::atoi(s->c_str());
  }
  filterEncodeHeaders(end_stream);
}

void Stream::filterEncodeHeaders(bool end_stream) {
  if (enc_.aborted) {
    return;
  }
  enc_.observed_end = end_stream;
  call_state_ |= kEncoding;
  auto st = filter_->encodeHeaders(resp_headers_, end_stream);
  call_state_ &= ~kEncoding;
  if (afterCallback(enc_)) {
    return;
  }
  if (st == HeadersStatus::Continue) {
    enc_.headers_continued = true;
    toDownstreamHeaders(resp_headers_, end_stream);
  } else {
    enc_.stopped = true;
  }
}

void Stream::upstreamData(const std::string& data, bool end_stream) {
  if (ended_ || filter_ == nullptr) {
    return;
  }
  Buffer b;
  b.d = data;
  filterEncodeData(b, end_stream);
}

void Stream::filterEncodeData(Buffer& b, bool end_stream) {
  if (enc_.aborted) {
    return;
  }
  enc_.observed_end = enc_.observed_end || end_stream;
  call_state_ |= kEncoding;
  auto st = filter_->encodeData(b, end_stream);
  call_state_ &= ~kEncoding;
  if (afterCallback(enc_)) {
    return;
  }
  if (st == DataStatus::Continue) {
    if (enc_.stopped) {
      if (!enc_.buffered) {
        enc_.buffered = std::make_unique<Buffer>();
      }
      enc_.buffered->move(b);
      commonContinue(true);
    } else {
      toDownstreamData(b, end_stream);
    }
  } else {
    enc_.stopped = true;
    if (enc_.observed_end && !enc_.has_trailers && !enc_.buffered) {
      enc_.buffered = std::make_unique<Buffer>();
    }
  }
}

void Stream::upstreamTrailers(HeaderMap t) {
  if (ended_ || filter_ == nullptr || enc_.aborted) {
    return;
  }
  resp_trailers_ = std::move(t);
  enc_.has_trailers = true;
  enc_.observed_end = true;
  call_state_ |= kEncoding;
  auto st = filter_->encodeTrailers(resp_trailers_);
  call_state_ &= ~kEncoding;
  if (afterCallback(enc_)) {
    return;
  }
  if (st == HeadersStatus::Continue) {
    if (enc_.stopped) {
      commonContinue(true);
    } else {
      toDownstreamTrailers();
    }
  } else {
    enc_.stopped = true;
  }
}

void Stream::upstreamReset() {
  if (ended_) {
    return;
  }
  record("upstream", "upstream_reset", true);
  // The router flags UpstreamRemoteReset (UR).
  response_flags |= 1u << 4;
  if (!resp_headers_set_) {
    // The router answers for the engine.
    LocalReply r;
    r.code = 503;
    r.body = "upstream connect error or disconnect/reset before headers. reset reason: remote reset";
    r.details = "upstream_reset_before_response_started{remote_reset}";
    sendLocalReply(r);
    return;
  }
  resetStream("upstream reset after response headers");
}

bool Stream::afterCallback(Side& side) {
  if (call_state_ != 0) {
    return ended_ || side.aborted; // a callback further up the stack finishes
  }
  if (prepared_) {
    // A local reply sent during a decoder callback runs once it returned
    // (prepareLocalReplyViaFilterChain / executeLocalReplyIfPrepared).
    auto r = std::move(prepared_);
    sendLocalReply(*r);
  }
  if (!pending_end_.empty()) {
    auto why = pending_end_;
    pending_end_.clear();
    endStream(why);
  }
  return ended_ || side.aborted;
}

void Stream::commonContinue(bool encoding) {
  Side& s = encoding ? enc_ : dec_;
  if (ended_ || s.aborted) {
    return;
  }
  if (!s.stopped) {
    violation(std::string("continue") + (encoding ? "Encoding" : "Decoding") +
              " while iteration is already Continue");
  }
  s.stopped = false;
  if (!s.headers_continued) {
    s.headers_continued = true;
    bool end = s.observed_end && !s.buffered && !s.has_trailers;
    if (encoding) {
      toDownstreamHeaders(resp_headers_, end);
    } else {
      toUpstreamHeaders(end);
    }
  }
  if (ended_ || s.aborted) {
    return;
  }
  bool had_trailers = s.has_trailers;
  if (s.buffered) {
    auto b = std::move(s.buffered);
    bool end = s.observed_end && !had_trailers;
    if (encoding) {
      toDownstreamData(*b, end);
    } else {
      toUpstreamData(*b, end);
    }
  }
  if (ended_ || s.aborted) {
    return;
  }
  if (had_trailers) {
    if (encoding) {
      toDownstreamTrailers();
    } else {
      toUpstreamTrailers();
    }
  }
}

void Stream::continueDecoding() { commonContinue(false); }
void Stream::continueEncoding() { commonContinue(true); }

void Stream::injectDecodedData(Buffer& data, bool end_stream) {
  if (ended_ || dec_.aborted) {
    return;
  }
  if (!dec_.headers_continued) {
    dec_.headers_continued = true;
    toUpstreamHeaders(false);
  }
  toUpstreamData(data, end_stream);
}

void Stream::injectEncodedData(Buffer& data, bool end_stream) {
  if (ended_ || enc_.aborted) {
    return;
  }
  if (!enc_.headers_continued) {
    enc_.headers_continued = true;
    toDownstreamHeaders(resp_headers_, false);
  }
  toDownstreamData(data, end_stream);
}

void Stream::addDecodedData(Buffer& data, bool) {
  if (call_state_ == 0 || (call_state_ & kDecoding)) {
    if (!dec_.buffered) {
      dec_.buffered = std::make_unique<Buffer>();
    }
    dec_.buffered->move(data);
    return;
  }
  violation("addDecodedData while encoding");
}

void Stream::addEncodedData(Buffer& data, bool) {
  if (call_state_ == 0 || (call_state_ & kEncoding)) {
    if (!enc_.buffered) {
      enc_.buffered = std::make_unique<Buffer>();
    }
    enc_.buffered->move(data);
    return;
  }
  violation("addEncodedData while decoding");
}

void Stream::setUpstreamOverrideHost(const std::string& host, bool) {
  if (up_started_) {
    violation("upstream override host set after the request went upstream");
  }
  override_host = host;
}

void Stream::sendLocalReply(const LocalReply& r) {
  if (ended_) {
    return;
  }
  if ((call_state_ & kDecoding) && !resp_headers_set_) {
    if (!prepared_) {
      prepared_ = std::make_unique<LocalReply>(r);
    }
    dec_.aborted = true;
    return;
  }
  Event& ev = record("filter", "local_reply", false);
  ev.code = r.code;
  ev.details = r.details;
  ev.data = r.body;
  response_code_details = r.details;
  // The request side is done: Envoy ends the stream once the reply is sent.
  dec_.aborted = true;
  // The reply's headers as Utility::prepareLocalReply builds them: the
  // status, then the filter's headers (modify_headers, addCopy), then the
  // gRPC trailers-only form or the body's length and a default type.
  HeaderMap h;
  h.add(":status", std::to_string(r.code));
  for (auto& kv : r.headers) {
    h.add(kv.first, kv.second);
  }
  bool grpc = isGrpc();
  bool body = false;
  if (grpc) {
    h.set(":status", "200");
    h.set("content-type", "application/grpc");
    if (h.get("grpc-status") == nullptr || h.get("grpc-status")->empty()) {
      int64_t gs = r.grpc_status;
      if (gs < 0) {
        // Grpc::Utility::httpToGrpcStatus
        switch (r.code) {
        case 400:
          gs = 13;
          break;
        case 401:
          gs = 16;
          break;
        case 403:
          gs = 7;
          break;
        case 404:
          gs = 12;
          break;
        case 429:
        case 502:
        case 503:
        case 504:
          gs = 14;
          break;
        default:
          gs = 2;
        }
      }
      h.set("grpc-status", std::to_string(gs));
    }
    if (!r.body.empty()) {
      h.set("grpc-message", percentEncode(r.body));
    }
    h.remove("content-length");
  } else if (!r.body.empty()) {
    h.set("content-length", std::to_string(r.body.size()));
    if (h.get("content-type") == nullptr) {
      h.add("content-type", "text/plain");
    }
    body = true;
  } else {
    h.remove("content-length");
    h.remove("content-type");
  }
  if (!resp_headers_set_) {
    // Through the encoder chain: the same filter's encode callbacks run.
    resp_headers_ = h;
    resp_headers_set_ = true;
    response_code = std::atoi(h.get(":status")->c_str());
    filterEncodeHeaders(!body);
    if (body && !ended_ && !enc_.aborted) {
      Buffer b;
      b.d = r.body;
      filterEncodeData(b, true);
    }
    return;
  }
  if (!down_started_) {
    // The upstream answered but nothing went downstream: straight to the
    // client, past the filters.
    enc_.aborted = true;
    resp_headers_ = h;
    response_code = std::atoi(h.get(":status")->c_str());
    toDownstreamHeaders(resp_headers_, !body);
    if (body && !ended_) {
      Buffer b;
      b.d = r.body;
      toDownstreamData(b, true);
    }
    return;
  }
  resetStream("local reply after the response started");
}

void Stream::toUpstreamHeaders(bool end) {
  if (up_started_) {
    violation("request headers sent upstream twice");
  }
  up_started_ = true;
  up_end_ = end;
  Event& e = record("upstream", "headers", end);
  e.headers = req_headers_;
}

void Stream::toUpstreamData(Buffer& b, bool end) {
  if (!up_started_) {
    violation("request data sent upstream before its headers");
  }
  if (up_end_) {
    violation("request data sent upstream after end of stream");
  }
  up_end_ = end;
  Event& e = record("upstream", "data", end);
  if (!quiet) {
    e.data = b.d;
  }
  b.d.clear();
}

void Stream::toUpstreamTrailers() {
  if (!up_started_) {
    violation("request trailers sent upstream before its headers");
  }
  if (up_end_) {
    violation("request trailers sent upstream after end of stream");
  }
  up_end_ = true;
  Event& e = record("upstream", "trailers", true);
  e.headers = req_trailers_;
}

void Stream::toDownstreamHeaders(HeaderMap& h, bool end) {
  if (down_started_) {
    violation("response headers sent downstream twice");
  }
  down_started_ = true;
  Event& e = record("downstream", "headers", end);
  e.headers = h;
  if (end) {
    down_end_ = true;
    endStream("response complete");
  }
}

void Stream::toDownstreamData(Buffer& b, bool end) {
  if (!down_started_) {
    violation("response data sent downstream before its headers");
  }
  if (down_end_) {
    violation("response data sent downstream after end of stream");
  }
  Event& e = record("downstream", "data", end);
  if (!quiet) {
    e.data = b.d;
  }
  b.d.clear();
  if (end) {
    down_end_ = true;
    endStream("response complete");
  }
}

void Stream::toDownstreamTrailers() {
  if (!down_started_) {
    violation("response trailers sent downstream before its headers");
  }
  if (down_end_) {
    violation("response trailers sent downstream after end of stream");
  }
  Event& e = record("downstream", "trailers", true);
  e.headers = resp_trailers_;
  down_end_ = true;
  endStream("response complete");
}

void Stream::resetStream(const std::string& why) {
  if (ended_) {
    return;
  }
  Event& e = record("downstream", "reset", true);
  e.details = why;
  endStream(why);
}

void Stream::endStream(const std::string& why) {
  if (ended_) {
    return;
  }
  if (call_state_ != 0) {
    // The connection manager destroys a stream after the filter callback
    // on the stack returned, never under it.
    if (pending_end_.empty()) {
      pending_end_ = why;
    }
    return;
  }
  ended_ = true;
  end_reason = why;
  dec_state = filter_->states();
  auto f = filter_;
  // As the connection manager does at the end of a stream: stream complete,
  // access log, then destroy; the filter object goes at the end of this
  // dispatcher iteration.
  f->onStreamComplete();
  completed = true;
  f->log();
  destroy_calls++;
  f->onDestroy();
  filter_.reset();
  d_.deferredDelete(f);
}

} // namespace envoyhost
