// The golang filter of one stream: Filter, following Envoy v1.36's
// golang_filter.cc (the decode/encode entry points, doHeaders/doData/
// doTrailer, the continue and local reply paths, and the C API's checks).
// Where Envoy ASSERTs, the host records a violation.
#include <cstring>

#include "host.h"

namespace envoyhost {

// ---- HttpRequestInternal ----------------------------------------------------

std::atomic<int64_t> requests_created{0}, requests_freed{0};

HttpRequestInternal::HttpRequestInternal(Filter& f)
    : decoding_(f, this, false), encoding_(f, this, true) {
  configId = 0;
  worker_id = 0;
  is_golang_processing_log = 0;
  requests_created++;
}

HttpRequestInternal::~HttpRequestInternal() { requests_freed++; }

// ---- Filter -----------------------------------------------------------------

Filter::Filter(std::shared_ptr<FilterConfig> config, Stream& stream, uint32_t worker_id)
    : config_(std::move(config)), stream_(stream), req_(new HttpRequestInternal(*this)),
      decoding_(req_->decodingState()), encoding_(req_->encodingState()) {
  req_->plugin_name.data = config_->pluginName().data();
  req_->plugin_name.len = config_->pluginName().size();
  req_->worker_id = worker_id;
}

Filter::~Filter() = default;

Dispatcher& Filter::dispatcher() { return stream_.dispatcher(); }

bool Filter::hasDestroyed() {
  std::lock_guard<std::mutex> l(mu_);
  return has_destroyed_;
}

std::string Filter::states() const { return decoding_.stateStr() + " " + encoding_.stateStr(); }

bool Filter::isProcessingInGo() const {
  return decoding_.isProcessingInGo() || encoding_.isProcessingInGo();
}

void Filter::initRequest() {
  if (req_->configId == 0) {
    req_->setWeakFilter(weak_from_this());
    req_->configId = config_->configId(); // no per-route configs in the host
  }
}

HeadersStatus Filter::decodeHeaders(HeaderMap& h, bool end_stream) {
  request_headers_ = &h;
  decoding_.setEndStream(end_stream);
  return doHeaders(decoding_, h, end_stream) ? HeadersStatus::Continue
                                             : HeadersStatus::StopIteration;
}

DataStatus Filter::decodeData(Buffer& data, bool end_stream) {
  decoding_.setEndStream(end_stream);
  if (doData(decoding_, data, end_stream)) {
    decoding_.doDataList.moveOut(data);
    return DataStatus::Continue;
  }
  return DataStatus::StopIterationNoBuffer;
}

HeadersStatus Filter::decodeTrailers(HeaderMap& t) {
  request_trailers_ = &t;
  return doTrailer(decoding_, t) ? HeadersStatus::Continue : HeadersStatus::StopIteration;
}

HeadersStatus Filter::encodeHeaders(HeaderMap& h, bool end_stream) {
  encoding_.setEndStream(end_stream);
  return doHeaders(encoding_, h, end_stream) ? HeadersStatus::Continue
                                             : HeadersStatus::StopIteration;
}

DataStatus Filter::encodeData(Buffer& data, bool end_stream) {
  encoding_.setEndStream(end_stream);
  if (doData(encoding_, data, end_stream)) {
    encoding_.doDataList.moveOut(data);
    return DataStatus::Continue;
  }
  return DataStatus::StopIterationNoBuffer;
}

HeadersStatus Filter::encodeTrailers(HeaderMap& t) {
  return doTrailer(encoding_, t) ? HeadersStatus::Continue : HeadersStatus::StopIteration;
}

void Filter::onStreamComplete() {
  req_->is_golang_processing_log = 1;
  dso.onStreamComplete(req_);
  req_->is_golang_processing_log = 0;
}

void Filter::log() {
  // The DownstreamEnd access log, as Envoy calls it for the filter's own
  // access log handler.
  initRequest();
  uint64_t rh = 0, rhb = 0, rt = 0, rtb = 0, ph = 0, phb = 0, pt = 0, ptb = 0;
  if (request_headers_ != nullptr) {
    rh = request_headers_->size();
    rhb = request_headers_->byteSize();
    decoding_.headers = request_headers_;
  }
  if (request_trailers_ != nullptr) {
    rt = request_trailers_->size();
    rtb = request_trailers_->byteSize();
    decoding_.trailers = request_trailers_;
  }
  if (stream_.resp_headers_set_) {
    ph = stream_.resp_headers_.size();
    phb = stream_.resp_headers_.byteSize();
    encoding_.headers = &stream_.resp_headers_;
  }
  if (stream_.enc_.has_trailers) {
    pt = stream_.resp_trailers_.size();
    ptb = stream_.resp_trailers_.byteSize();
    encoding_.trailers = &stream_.resp_trailers_;
  }
  req_->is_golang_processing_log = 1;
  dso.onLog(req_, 6 /* AccessLogDownstreamEnd */, &decoding_, &encoding_, rh, rhb, rt, rtb, ph, phb, pt,
            ptb);
  req_->is_golang_processing_log = 0;
}

void Filter::onDestroy() {
  if (req_->configId == 0) {
    // Go never saw the request: nothing will finalize it.
    delete req_;
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (has_destroyed_) {
      return;
    }
    has_destroyed_ = true;
  }
  int reason = (decoding_.isProcessingInGo() || encoding_.isProcessingInGo()) ? 1 : 0;
  dso.onDestroy(req_, reason);
}

bool Filter::doHeaders(ProcessorState& st, HeaderMap& h, bool end_stream) {
  if (!st.isBufferDataEmpty()) {
    violation("doHeaders with buffered data (" + st.stateStr() + ")");
  }
  st.headers = &h;
  st.processHeader(end_stream);
  initRequest();
  auto status = static_cast<GolangStatus>(
      dso.onHeader(&st, end_stream ? 1 : 0, h.size(), h.byteSize()));
  bool done = st.handleHeaderGolangStatus(status);
  if (done) {
    st.headers = nullptr;
  }
  return done;
}

bool Filter::doDataGo(ProcessorState& st, Buffer& data, bool end_stream) {
  st.processData(end_stream);
  Buffer& b = st.doDataList.push(data);
  auto status = static_cast<GolangStatus>(
      dso.onData(&st, end_stream ? 1 : 0, reinterpret_cast<uint64_t>(&b), b.length()));
  return st.handleDataGolangStatus(status);
}

bool Filter::doData(ProcessorState& st, Buffer& data, bool end_stream) {
  bool done = false;
  switch (st.filterState()) {
  case FilterState::WaitingData:
    done = doDataGo(st, data, end_stream);
    break;
  case FilterState::WaitingAllData:
    if (end_stream) {
      if (!st.isBufferDataEmpty()) {
        st.addBufferData(data);
        data.move(st.getBufferData());
      }
      if (st.filterState() == FilterState::WaitingAllData) {
        done = doDataGo(st, data, end_stream);
      }
      break;
    }
    [[fallthrough]];
  case FilterState::ProcessingHeader:
  case FilterState::ProcessingData:
    st.addBufferData(data);
    break;
  default:
    break;
  }
  return done;
}

bool Filter::doTrailerGo(ProcessorState& st, HeaderMap& t) {
  st.processTrailer();
  auto status = static_cast<GolangStatus>(dso.onHeader(&st, 1, t.size(), t.byteSize()));
  return st.handleTrailerGolangStatus(status);
}

bool Filter::doTrailer(ProcessorState& st, HeaderMap& t) {
  if (st.getEndStream() || st.isProcessingEndStream()) {
    violation("trailers after end of stream (" + st.stateStr() + ")");
  }
  st.trailers = &t;
  bool done = false;
  switch (st.filterState()) {
  case FilterState::WaitingTrailer:
  case FilterState::WaitingData:
    done = doTrailerGo(st, t);
    break;
  case FilterState::WaitingAllData:
    if (!st.isBufferDataEmpty()) {
      // Envoy hands the buffered body to Go first, then injects it.
      done = doDataGo(st, st.getBufferData(), false);
      if (st.filterState() == FilterState::WaitingTrailer) {
        st.continueDoData();
        done = doTrailerGo(st, t);
      }
    } else {
      st.continueDoData();
      done = doTrailerGo(st, t);
    }
    break;
  default:
    break;
  }
  return done;
}

void Filter::continueStatusInternal(ProcessorState& st, GolangStatus status) {
  auto saved = st.filterState();
  bool done = st.handleGolangStatus(status);
  if (done) {
    switch (saved) {
    case FilterState::ProcessingHeader:
      if (st.isProcessingEndStream() || !st.isStreamEnd()) {
        st.continueProcessing();
      }
      break;
    case FilterState::ProcessingData:
      st.continueDoData();
      break;
    case FilterState::ProcessingTrailer:
      st.continueDoData();
      st.continueProcessing();
      break;
    default:
      violation("continue from unexpected state " + std::string(stateName(saved)));
    }
  }
  auto cur = st.filterState();
  if ((cur == FilterState::WaitingData && (!st.isBufferDataEmpty() || st.getEndStream())) ||
      (cur == FilterState::WaitingAllData && st.isStreamEnd())) {
    if (doDataGo(st, st.getBufferData(), st.getEndStream())) {
      st.continueDoData();
    } else {
      return;
    }
  }
  if (st.filterState() == FilterState::WaitingTrailer && st.trailers != nullptr) {
    if (doTrailerGo(st, *st.trailers)) {
      st.continueProcessing();
    }
  }
}

void Filter::sendLocalReplyInternal(ProcessorState& st, const LocalReply& r) {
  st.doDataList.clearAll();
  st.drainBufferData();
  st.sendLocalReply(r);
}

CAPIStatus Filter::sendLocalReply(ProcessorState& st, LocalReply r) {
  std::lock_guard<std::mutex> l(mu_);
  if (has_destroyed_) {
    return CAPIFilterIsDestroy;
  }
  if (!st.isProcessingInGo()) {
    return CAPINotInGo;
  }
  std::weak_ptr<Filter> weak = weak_from_this();
  ProcessorState* sp = &st;
  st.dispatcher().post([this, weak, sp, r] {
    if (!weak.expired() && !hasDestroyed()) {
      sendLocalReplyInternal(*sp, r);
    }
  });
  return CAPIOK;
}

CAPIStatus Filter::sendPanicReply(ProcessorState& st, const std::string& details) {
  {
    std::lock_guard<std::mutex> l(stats.mu);
    stats.counters["golang.panic_error"]++;
  }
  LocalReply r;
  r.code = 500;
  r.body = "error happened in filter\r\n";
  r.grpc_status = 0;
  r.details = "";
  (void)details;
  return sendLocalReply(st, r);
}

CAPIStatus Filter::continueStatus(ProcessorState& st, GolangStatus status) {
  std::lock_guard<std::mutex> l(mu_);
  if (has_destroyed_) {
    return CAPIFilterIsDestroy;
  }
  if (!st.isProcessingInGo()) {
    return CAPINotInGo;
  }
  std::weak_ptr<Filter> weak = weak_from_this();
  ProcessorState* sp = &st;
  st.dispatcher().post([this, weak, sp, status] {
    if (!weak.expired() && !hasDestroyed()) {
      continueStatusInternal(*sp, status);
    }
  });
  return CAPIOK;
}

CAPIStatus Filter::addData(ProcessorState& st, const std::string& data, bool streaming) {
  if (st.filterState() == FilterState::ProcessingData) {
    return CAPIInvalidPhase;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (has_destroyed_) {
    return CAPIFilterIsDestroy;
  }
  if (!st.isProcessingInGo()) {
    return CAPINotInGo;
  }
  if (st.isThreadSafe()) {
    Buffer b;
    b.d = data;
    st.addData(b, streaming);
    return CAPIOK;
  }
  std::weak_ptr<Filter> weak = weak_from_this();
  ProcessorState* sp = &st;
  st.dispatcher().post([this, weak, sp, data, streaming] {
    if (!weak.expired() && !hasDestroyed()) {
      Buffer b;
      b.d = data;
      sp->addData(b, streaming);
    }
  });
  return CAPIYield;
}

CAPIStatus Filter::injectData(ProcessorState& st, const std::string& data) {
  std::lock_guard<std::mutex> l(mu_);
  if (has_destroyed_) {
    return CAPIFilterIsDestroy;
  }
  if (!st.isProcessingInGo()) {
    return CAPINotInGo;
  }
  if (st.filterState() != FilterState::ProcessingData) {
    return CAPIInvalidPhase;
  }
  if (st.isThreadSafe()) {
    return CAPIInvalidScene;
  }
  std::weak_ptr<Filter> weak = weak_from_this();
  ProcessorState* sp = &st;
  st.dispatcher().post([this, weak, sp, data] {
    if (!weak.expired() && !hasDestroyed()) {
      Buffer b;
      b.d = data;
      sp->injectDataToFilterChain(b, false);
    }
  });
  return CAPIOK;
}

#define GUARD_IN_GO(st)                                                                            \
  std::lock_guard<std::mutex> l(mu_);                                                              \
  if (has_destroyed_) {                                                                            \
    return CAPIFilterIsDestroy;                                                                    \
  }                                                                                                \
  if (!(st).isProcessingInGo()) {                                                                  \
    return CAPINotInGo;                                                                            \
  }

CAPIStatus Filter::getHeader(ProcessorState& st, const std::string& key, uint64_t* value_data,
                             int* value_len) {
  GUARD_IN_GO(st);
  if (st.headers == nullptr) {
    return CAPIInvalidPhase;
  }
  const std::string* v = st.headers->get(lower(key));
  if (v != nullptr) {
    *value_data = reinterpret_cast<uint64_t>(v->data());
    *value_len = static_cast<int>(v->size());
  }
  return CAPIOK;
}

static void copyHeaderMapToGo(HeaderMap& m, GoString* strs, char* buf) {
  size_t i = 0;
  for (auto& kv : m.e) {
    strs[i].n = static_cast<ptrdiff_t>(kv.first.size());
    strs[i].p = buf;
    memcpy(buf, kv.first.data(), kv.first.size());
    buf += kv.first.size();
    i++;
    strs[i].n = static_cast<ptrdiff_t>(kv.second.size());
    if (!kv.second.empty()) {
      strs[i].p = buf;
      memcpy(buf, kv.second.data(), kv.second.size());
      buf += kv.second.size();
    }
    i++;
  }
}

CAPIStatus Filter::copyHeaders(ProcessorState& st, GoString* strs, char* buf) {
  GUARD_IN_GO(st);
  if (st.headers == nullptr) {
    return CAPIInvalidPhase;
  }
  copyHeaderMapToGo(*st.headers, strs, buf);
  return CAPIOK;
}

static void applyHeader(HeaderMap& m, const std::string& k, const std::string& v,
                        headerAction act) {
  switch (act) {
  case HeaderAdd:
    m.add(lower(k), v);
    break;
  case HeaderSet:
    m.set(lower(k), v);
    break;
  default:
    violation("unknown header action " + std::to_string(int(act)));
  }
}

CAPIStatus Filter::setHeader(ProcessorState& st, const std::string& key, const std::string& value,
                             headerAction act) {
  GUARD_IN_GO(st);
  HeaderMap* m = st.headers;
  if (m == nullptr) {
    return CAPIInvalidPhase;
  }
  if (st.isThreadSafe()) {
    applyHeader(*m, key, value, act);
  } else {
    std::weak_ptr<Filter> weak = weak_from_this();
    st.dispatcher().post([this, weak, m, key, value, act] {
      if (!weak.expired() && !hasDestroyed()) {
        applyHeader(*m, key, value, act);
      }
    });
  }
  return CAPIOK;
}

CAPIStatus Filter::removeHeader(ProcessorState& st, const std::string& key) {
  GUARD_IN_GO(st);
  HeaderMap* m = st.headers;
  if (m == nullptr) {
    return CAPIInvalidPhase;
  }
  if (st.isThreadSafe()) {
    m->remove(lower(key));
  } else {
    std::weak_ptr<Filter> weak = weak_from_this();
    st.dispatcher().post([this, weak, m, key] {
      if (!weak.expired() && !hasDestroyed()) {
        m->remove(lower(key));
      }
    });
  }
  return CAPIOK;
}

CAPIStatus Filter::copyBuffer(ProcessorState& st, Buffer* b, char* data) {
  GUARD_IN_GO(st);
  if (!st.doDataList.checkExisting(b)) {
    return CAPIInvalidPhase;
  }
  memcpy(data, b->d.data(), b->d.size());
  return CAPIOK;
}

CAPIStatus Filter::drainBuffer(ProcessorState& st, Buffer* b, uint64_t length) {
  GUARD_IN_GO(st);
  if (!st.doDataList.checkExisting(b)) {
    return CAPIInvalidPhase;
  }
  b->drain(length);
  return CAPIOK;
}

CAPIStatus Filter::setBufferHelper(ProcessorState& st, Buffer* b, const std::string& value,
                                   bufferAction act) {
  GUARD_IN_GO(st);
  if (!st.doDataList.checkExisting(b)) {
    return CAPIInvalidPhase;
  }
  if (act == Set) {
    b->d = value;
  } else if (act == Prepend) {
    b->d.insert(0, value);
  } else {
    b->d += value;
  }
  return CAPIOK;
}

CAPIStatus Filter::copyTrailers(ProcessorState& st, GoString* strs, char* buf) {
  GUARD_IN_GO(st);
  if (st.trailers == nullptr) {
    return CAPIInvalidPhase;
  }
  copyHeaderMapToGo(*st.trailers, strs, buf);
  return CAPIOK;
}

CAPIStatus Filter::setTrailer(ProcessorState& st, const std::string& key, const std::string& value,
                              headerAction act) {
  GUARD_IN_GO(st);
  HeaderMap* m = st.trailers;
  if (m == nullptr) {
    return CAPIInvalidPhase;
  }
  if (st.isThreadSafe()) {
    applyHeader(*m, key, value, act);
  } else {
    std::weak_ptr<Filter> weak = weak_from_this();
    st.dispatcher().post([this, weak, m, key, value, act] {
      if (!weak.expired() && !hasDestroyed()) {
        applyHeader(*m, key, value, act);
      }
    });
  }
  return CAPIOK;
}

CAPIStatus Filter::removeTrailer(ProcessorState& st, const std::string& key) {
  GUARD_IN_GO(st);
  HeaderMap* m = st.trailers;
  if (m == nullptr) {
    return CAPIInvalidPhase;
  }
  if (st.isThreadSafe()) {
    m->remove(lower(key));
  } else {
    std::weak_ptr<Filter> weak = weak_from_this();
    st.dispatcher().post([this, weak, m, key] {
      if (!weak.expired() && !hasDestroyed()) {
        m->remove(lower(key));
      }
    });
  }
  return CAPIOK;
}

static bool isIPAuthority(const std::string& host) {
  // host:port with an IPv4 address, or [v6]:port, or a bare address.
  std::string h = host;
  if (!h.empty() && h[0] == '[') {
    auto e = h.find(']');
    return e != std::string::npos && e > 1;
  }
  auto c = h.rfind(':');
  if (c != std::string::npos && h.find(':') == c) {
    h = h.substr(0, c);
  } else if (c != std::string::npos) {
    return true; // bare v6
  }
  int dots = 0;
  for (char ch : h) {
    if (ch == '.') {
      dots++;
    } else if (ch < '0' || ch > '9') {
      return false;
    }
  }
  return dots == 3;
}

CAPIStatus Filter::setUpstreamOverrideHost(ProcessorState& st, const std::string& host,
                                           bool strict) {
  GUARD_IN_GO(st);
  if (st.encoding()) {
    return CAPIInvalidPhase;
  }
  if (!isIPAuthority(host)) {
    return CAPIInvalidIPAddress;
  }
  if (st.isThreadSafe()) {
    stream_.setUpstreamOverrideHost(host, strict);
  } else {
    std::weak_ptr<Filter> weak = weak_from_this();
    st.dispatcher().post([this, weak, host] {
      if (!weak.expired() && !hasDestroyed()) {
        stream_.setUpstreamOverrideHost(host, false);
      }
    });
  }
  return CAPIOK;
}

#define GUARD_ALIVE()                                                                              \
  std::lock_guard<std::mutex> l(mu_);                                                              \
  if (has_destroyed_) {                                                                            \
    return CAPIFilterIsDestroy;                                                                    \
  }

CAPIStatus Filter::clearRouteCache(bool) {
  GUARD_ALIVE();
  return CAPIOK;
}

CAPIStatus Filter::getIntegerValue(int id, uint64_t* value) {
  GUARD_ALIVE();
  switch (id) {
  case 3: // Protocol: HTTP/2
    *value = 2;
    return CAPIOK;
  case 4: // ResponseCode
    if (stream_.response_code == 0) {
      return CAPIValueNotFound;
    }
    *value = static_cast<uint64_t>(stream_.response_code);
    return CAPIOK;
  case 6: // AttemptCount
    *value = 1;
    return CAPIOK;
  default:
    violation("invalid integer value id " + std::to_string(id));
    return CAPIValueNotFound;
  }
}

CAPIStatus Filter::getStringValue(int id, uint64_t* value_data, int* value_len) {
  GUARD_ALIVE();
  switch (id) {
  case 1: // RouteName
    req_->strValue = stream_.route_name;
    break;
  case 2: // FilterChainName
    req_->strValue = "";
    break;
  case 5: // ResponseCodeDetails
    if (stream_.response_code_details.empty()) {
      return CAPIValueNotFound;
    }
    req_->strValue = stream_.response_code_details;
    break;
  case 7: // DownstreamLocalAddress
    req_->strValue = stream_.local;
    break;
  case 8: // DownstreamRemoteAddress
    req_->strValue = stream_.peer;
    break;
  case 9:  // UpstreamLocalAddress
  case 10: // UpstreamRemoteAddress
    if (!stream_.upstreamStarted()) {
      return CAPIValueNotFound;
    }
    req_->strValue = id == 9 ? "127.0.0.1:50000" : "127.0.0.1:8000";
    break;
  case 11: // UpstreamClusterName
    if (!stream_.upstreamStarted()) {
      return CAPIValueNotFound;
    }
    req_->strValue = "engine";
    break;
  case 12: // VirtualClusterName
    return CAPIValueNotFound;
  default:
    violation("invalid string value id " + std::to_string(id));
    return CAPIValueNotFound;
  }
  *value_data = reinterpret_cast<uint64_t>(req_->strValue.data());
  *value_len = static_cast<int>(req_->strValue.size());
  return CAPIOK;
}

// structBytes encodes a google.protobuf.Struct from its fields' Value bytes.
static std::string structBytes(const std::map<std::string, std::string>& fields) {
  auto varint = [](std::string& out, uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  std::string out;
  for (auto& kv : fields) {
    std::string entry;
    entry.push_back(0x0a);
    varint(entry, kv.first.size());
    entry += kv.first;
    entry.push_back(0x12);
    varint(entry, kv.second.size());
    entry += kv.second;
    out.push_back(0x0a);
    varint(out, entry.size());
    out += entry;
  }
  return out;
}

CAPIStatus Filter::getDynamicMetadata(const std::string& ns, uint64_t* data, int* len) {
  GUARD_ALIVE();
  auto fill = [this, ns, data, len] {
    auto it = stream_.metadata.find(ns);
    if (it != stream_.metadata.end()) {
      req_->strValue = structBytes(it->second);
      *data = reinterpret_cast<uint64_t>(req_->strValue.data());
      *len = static_cast<int>(req_->strValue.size());
    }
  };
  if (!dispatcher().isThreadSafe()) {
    std::weak_ptr<Filter> weak = weak_from_this();
    dispatcher().post([this, weak, fill] {
      if (!weak.expired() && !hasDestroyed()) {
        fill();
        dso.semaDec(req_);
      }
    });
    return CAPIYield;
  }
  fill();
  return CAPIOK;
}

CAPIStatus Filter::setDynamicMetadata(const std::string& ns, const std::string& key,
                                      const std::string& value) {
  GUARD_ALIVE();
  if (!dispatcher().isThreadSafe()) {
    std::weak_ptr<Filter> weak = weak_from_this();
    dispatcher().post([this, weak, ns, key, value] {
      if (!weak.expired() && !hasDestroyed()) {
        stream_.metadata[ns][key] = value;
      }
    });
    return CAPIOK;
  }
  stream_.metadata[ns][key] = value;
  return CAPIOK;
}

CAPIStatus Filter::setStringFilterState(const std::string& key, const std::string& value) {
  GUARD_ALIVE();
  if (dispatcher().isThreadSafe()) {
    stream_.filter_state[key] = value;
  } else {
    std::weak_ptr<Filter> weak = weak_from_this();
    dispatcher().post([this, weak, key, value] {
      if (!weak.expired() && !hasDestroyed()) {
        stream_.filter_state[key] = value;
      }
    });
  }
  return CAPIOK;
}

CAPIStatus Filter::getStringFilterState(const std::string& key, uint64_t* data, int* len) {
  GUARD_ALIVE();
  auto fill = [this, key, data, len] {
    auto it = stream_.filter_state.find(key);
    if (it != stream_.filter_state.end()) {
      req_->strValue = it->second;
      *data = reinterpret_cast<uint64_t>(req_->strValue.data());
      *len = static_cast<int>(req_->strValue.size());
    }
  };
  if (dispatcher().isThreadSafe()) {
    fill();
    return CAPIOK;
  }
  std::weak_ptr<Filter> weak = weak_from_this();
  dispatcher().post([this, weak, fill] {
    if (!weak.expired() && !hasDestroyed()) {
      fill();
      dso.semaDec(req_);
    }
  });
  return CAPIYield;
}

CAPIStatus Filter::getStringPropertyCommon(const std::string& path, uint64_t* data, int* len) {
  // The few CEL attributes the host knows; Envoy has many more.
  if (path == "request.time") {
    req_->strValue = stream_.start_time;
  } else if (path == "request.path" && request_headers_ != nullptr &&
             request_headers_->get(":path") != nullptr) {
    req_->strValue = *request_headers_->get(":path");
  } else if (path == "xds.route_name") {
    req_->strValue = stream_.route_name;
  } else if (path == "source.address") {
    req_->strValue = stream_.peer;
  } else if (path == "response.code" && stream_.response_code != 0) {
    req_->strValue = std::to_string(stream_.response_code);
  } else if (path == "response.flags") {
    req_->strValue = std::to_string(stream_.response_flags);
  } else {
    return CAPIValueNotFound;
  }
  *data = reinterpret_cast<uint64_t>(req_->strValue.data());
  *len = static_cast<int>(req_->strValue.size());
  return CAPIOK;
}

CAPIStatus Filter::getStringProperty(const std::string& path, uint64_t* data, int* len, int* rc) {
  GUARD_ALIVE();
  if (dispatcher().isThreadSafe()) {
    return getStringPropertyCommon(path, data, len);
  }
  std::weak_ptr<Filter> weak = weak_from_this();
  dispatcher().post([this, weak, path, data, len, rc] {
    if (!weak.expired() && !hasDestroyed()) {
      *rc = getStringPropertyCommon(path, data, len);
      dso.semaDec(req_);
    }
  });
  return CAPIYield;
}

CAPIStatus Filter::getSecret(const std::string&, uint64_t*, int* len) {
  GUARD_ALIVE();
  *len = -1; // the host has no secrets
  return CAPIOK;
}

void Filter::deferredDeleteRequest(HttpRequestInternal* req) {
  if (req != req_) {
    violation("envoyGoFilterHttpFinalize with a foreign request pointer");
  }
  Dispatcher& d = dispatcher();
  auto del = [req] { delete req; };
  if (d.isThreadSafe()) {
    d.deferredDelete(std::shared_ptr<void>(nullptr, [del](void*) { del(); }));
  } else {
    Dispatcher* dp = &d;
    d.post([dp, del] { dp->deferredDelete(std::shared_ptr<void>(nullptr, [del](void*) { del(); })); });
  }
}

} // namespace envoyhost
