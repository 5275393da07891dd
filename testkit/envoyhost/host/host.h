// envoyhost: a test host that loads llmesh-filter.so and plays Envoy's side
// of the golang HTTP filter ABI (contrib/golang/common/go/api/api.h, Envoy
// v1.36). It ports, in its own words, the per-stream state machine of
// contrib/golang/filters/http/source/{golang_filter,processor_state}.cc, the
// guards of cgo.cc, the library loading of contrib/golang/common/dso/dso.cc
// and the parts of source/common/http/filter_manager.cc the filter relies on
// (with utility.cc prepareLocalReply, and the response flags that
// conn_manager_impl.cc and the router set, envoy/stream_info/stream_info.h).
// Anything Envoy would ASSERT is recorded as a violation, which fails a run.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api.h" // from the Go module, -I at build time

namespace envoyhost {

// cgo's export header types, as the SDK's shim passes them.
struct GoString {
  const char* p;
  ptrdiff_t n;
};
struct GoSlice {
  void* data;
  int64_t len;
  int64_t cap;
};

// ---- host-wide records -----------------------------------------------------

void violation(const std::string& what);
void countStatus(CAPIStatus st);
uint64_t nextSeq();

// ---- buffers and header maps -----------------------------------------------

struct Buffer {
  std::string d;
  size_t length() const { return d.size(); }
  void move(Buffer& o) {
    d += o.d;
    o.d.clear();
  }
  void drain(size_t n) { d.erase(0, n < d.size() ? n : d.size()); }
};

// WatermarkBuffer calls high() when it grows past the limit and low() when
// it drains below half of it, like Envoy's WatermarkBuffer.
struct WatermarkBuffer : Buffer {
  uint64_t limit{0};
  bool above{false};
  std::function<void()> high, low;
  void moveIn(Buffer& o);
  void drainAll();
};

struct HeaderMap {
  std::vector<std::pair<std::string, std::string>> e;
  size_t size() const { return e.size(); }
  size_t byteSize() const;
  const std::string* get(const std::string& key) const;
  void set(const std::string& key, const std::string& value);
  void add(const std::string& key, const std::string& value);
  void remove(const std::string& key);
};

std::string lower(std::string s);

// ---- dispatcher (one per worker) -------------------------------------------

class Dispatcher {
public:
  explicit Dispatcher(uint32_t id);
  ~Dispatcher();
  uint32_t id() const { return id_; }
  bool isThreadSafe() const { return std::this_thread::get_id() == tid_; }
  void post(std::function<void()> f);
  // deferredDelete keeps o alive until the current task returns.
  void deferredDelete(std::shared_ptr<void> o);
  // run runs f on the worker and waits for it.
  void run(const std::function<void()>& f);
  // afterTask, when set before the first post, runs on the worker after
  // every task (the interactive mode reports what the task did).
  std::function<void()> afterTask;
  void stop();

private:
  void loop();
  uint32_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::vector<std::shared_ptr<void>> deferred_;
  bool stop_{false};
  std::thread t_;
  std::thread::id tid_;
};

// ---- the loaded library (dso.cc) ------------------------------------------

struct Dso {
  bool load(const std::string& path, std::string* err);
  uint64_t (*newConfig)(httpConfig*){nullptr};
  uint64_t (*mergeConfig)(uint64_t, uint64_t, uint64_t, uint64_t){nullptr};
  void (*destroyConfig)(uint64_t, int64_t){nullptr};
  uint64_t (*onHeader)(processState*, uint64_t, uint64_t, uint64_t){nullptr};
  uint64_t (*onData)(processState*, uint64_t, uint64_t, uint64_t){nullptr};
  void (*onLog)(httpRequest*, int, processState*, processState*, uint64_t, uint64_t, uint64_t,
                uint64_t, uint64_t, uint64_t, uint64_t, uint64_t){nullptr};
  void (*onStreamComplete)(httpRequest*){nullptr};
  void (*onDestroy)(httpRequest*, int){nullptr};
  void (*semaDec)(httpRequest*){nullptr};
  void (*cleanUp)(){nullptr};
};
extern Dso dso;

// ---- filter config (FilterConfig in golang_filter.cc) ----------------------

class FilterConfig;

struct HttpConfigInternal : httpConfig {
  std::weak_ptr<FilterConfig> config;
  explicit HttpConfigInternal(std::weak_ptr<FilterConfig> c);
  ~HttpConfigInternal();
};

class FilterConfig : public std::enable_shared_from_this<FilterConfig> {
public:
  FilterConfig(std::string plugin, std::string any_bytes, uint32_t concurrency);
  ~FilterConfig();
  bool newGoPluginConfig();
  uint64_t configId() const { return config_id_; }
  const std::string& pluginName() const { return plugin_name_; }
  CAPIStatus defineMetric(uint32_t type, const std::string& name, uint32_t* id);
  CAPIStatus incrementMetric(uint32_t id, int64_t offset);
  CAPIStatus getMetric(uint32_t id, uint64_t* value);
  CAPIStatus recordMetric(uint32_t id, uint64_t value);

private:
  std::string plugin_name_;
  std::string any_;
  uint32_t concurrency_;
  uint64_t config_id_{0};
  std::mutex mu_;
  uint32_t next_counter_{0}, next_gauge_{1}, next_histogram_{2};
  std::map<uint32_t, std::string> metric_names_;
};

// Stats are process-wide by name, as Envoy's scope returns one counter for
// one name whichever config defined it.
struct Stats {
  std::mutex mu;
  std::map<std::string, int64_t> counters, gauges;
  std::map<std::string, std::vector<uint64_t>> histograms;
};
extern Stats stats;

// ---- processor state (processor_state.{h,cc}) ------------------------------

enum class FilterState {
  WaitingHeader,
  ProcessingHeader,
  WaitingData,
  WaitingAllData,
  ProcessingData,
  WaitingTrailer,
  ProcessingTrailer,
  Done,
};
const char* stateName(FilterState s);

enum class GolangStatus {
  Running,
  LocalReply,
  Continue,
  StopAndBuffer,
  StopAndBufferWatermark,
  StopNoBuffer,
};

class BufferList {
public:
  bool empty() const { return bytes_ == 0; }
  Buffer& push(Buffer& data);
  void moveOut(Buffer& data);
  void clearLatest();
  void clearAll();
  bool checkExisting(Buffer* data) const;

private:
  std::deque<std::unique_ptr<Buffer>> queue_;
  uint64_t bytes_{0};
};

class Filter;
class Stream;
struct LocalReply;

class ProcessorState : public processState {
public:
  ProcessorState(Filter& f, httpRequest* r, bool encoding);
  FilterState filterState() const { return static_cast<FilterState>(state); }
  void setFilterState(FilterState s) { state = static_cast<int>(s); }
  std::string stateStr() const;
  bool encoding() const { return is_encoding == 1; }

  bool isProcessingInGo() const;
  bool isThreadSafe() const;
  Dispatcher& dispatcher() const;
  Stream& stream() const;

  void addBufferData(Buffer& data);
  Buffer& getBufferData();
  bool isBufferDataEmpty() const { return data_buffer_ == nullptr || data_buffer_->length() == 0; }
  void drainBufferData();
  bool isProcessingEndStream() const { return do_end_stream_; }

  void continueProcessing();
  void injectDataToFilterChain(Buffer& data, bool end_stream);
  void continueDoData();
  void processHeader(bool end_stream);
  void processData(bool end_stream);
  void processTrailer();

  bool handleHeaderGolangStatus(GolangStatus st);
  bool handleDataGolangStatus(GolangStatus st);
  bool handleTrailerGolangStatus(GolangStatus st);
  bool handleGolangStatus(GolangStatus st);

  void sendLocalReply(const LocalReply& r);
  void addData(Buffer& data, bool streaming);

  void setEndStream(bool e) { end_stream_ = e; }
  bool getEndStream() const { return end_stream_; }
  bool isStreamEnd() const { return end_stream_ || trailers != nullptr; }

  HeaderMap* headers{nullptr};
  HeaderMap* trailers{nullptr};
  BufferList doDataList;

private:
  Filter& filter_;
  bool watermark_requested_{false};
  std::unique_ptr<WatermarkBuffer> data_buffer_;
  bool end_stream_{false};
  bool do_end_stream_{false};
};

class HttpRequestInternal : public httpRequest {
public:
  explicit HttpRequestInternal(Filter& f);
  ~HttpRequestInternal();
  void setWeakFilter(std::weak_ptr<Filter> f) { filter_ = std::move(f); }
  std::weak_ptr<Filter> weakFilter() { return filter_; }
  ProcessorState& decodingState() { return decoding_; }
  ProcessorState& encodingState() { return encoding_; }
  std::string strValue;

private:
  std::weak_ptr<Filter> filter_;
  ProcessorState decoding_;
  ProcessorState encoding_;
};

enum class HeadersStatus { Continue, StopIteration };
enum class DataStatus { Continue, StopIterationNoBuffer };

struct LocalReply {
  int code{0};
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  int64_t grpc_status{-1}; // -1: none given
  std::string details;
};

// ---- the golang filter (golang_filter.{h,cc}) ------------------------------

class Filter : public std::enable_shared_from_this<Filter> {
public:
  Filter(std::shared_ptr<FilterConfig> config, Stream& stream, uint32_t worker_id);
  ~Filter();

  HeadersStatus decodeHeaders(HeaderMap& h, bool end_stream);
  DataStatus decodeData(Buffer& data, bool end_stream);
  HeadersStatus decodeTrailers(HeaderMap& t);
  HeadersStatus encodeHeaders(HeaderMap& h, bool end_stream);
  DataStatus encodeData(Buffer& data, bool end_stream);
  HeadersStatus encodeTrailers(HeaderMap& t);
  void onStreamComplete();
  void onDestroy();
  void log();

  CAPIStatus continueStatus(ProcessorState& state, GolangStatus status);
  CAPIStatus sendLocalReply(ProcessorState& state, LocalReply r);
  CAPIStatus sendPanicReply(ProcessorState& state, const std::string& details);
  CAPIStatus addData(ProcessorState& state, const std::string& data, bool streaming);
  CAPIStatus injectData(ProcessorState& state, const std::string& data);
  CAPIStatus getHeader(ProcessorState& state, const std::string& key, uint64_t* value_data,
                       int* value_len);
  CAPIStatus copyHeaders(ProcessorState& state, GoString* strs, char* buf);
  CAPIStatus setHeader(ProcessorState& state, const std::string& key, const std::string& value,
                       headerAction act);
  CAPIStatus removeHeader(ProcessorState& state, const std::string& key);
  CAPIStatus copyBuffer(ProcessorState& state, Buffer* b, char* data);
  CAPIStatus drainBuffer(ProcessorState& state, Buffer* b, uint64_t length);
  CAPIStatus setBufferHelper(ProcessorState& state, Buffer* b, const std::string& value,
                             bufferAction act);
  CAPIStatus copyTrailers(ProcessorState& state, GoString* strs, char* buf);
  CAPIStatus setTrailer(ProcessorState& state, const std::string& key, const std::string& value,
                        headerAction act);
  CAPIStatus removeTrailer(ProcessorState& state, const std::string& key);
  CAPIStatus setUpstreamOverrideHost(ProcessorState& state, const std::string& host, bool strict);
  CAPIStatus clearRouteCache(bool refresh);
  CAPIStatus getStringValue(int id, uint64_t* value_data, int* value_len);
  CAPIStatus getIntegerValue(int id, uint64_t* value);
  CAPIStatus getDynamicMetadata(const std::string& ns, uint64_t* data, int* len);
  CAPIStatus setDynamicMetadata(const std::string& ns, const std::string& key,
                                const std::string& value);
  CAPIStatus setStringFilterState(const std::string& key, const std::string& value);
  CAPIStatus getStringFilterState(const std::string& key, uint64_t* data, int* len);
  CAPIStatus getStringProperty(const std::string& path, uint64_t* data, int* len, int* rc);
  CAPIStatus getSecret(const std::string& key, uint64_t* data, int* len);

  bool isProcessingInGo() const;
  std::string states() const;
  void deferredDeleteRequest(HttpRequestInternal* req);
  Stream& stream() { return stream_; }
  Dispatcher& dispatcher();

private:
  bool hasDestroyed();
  bool doHeaders(ProcessorState& st, HeaderMap& h, bool end_stream);
  bool doData(ProcessorState& st, Buffer& data, bool end_stream);
  bool doDataGo(ProcessorState& st, Buffer& data, bool end_stream);
  bool doTrailer(ProcessorState& st, HeaderMap& t);
  bool doTrailerGo(ProcessorState& st, HeaderMap& t);
  void initRequest();
  void continueStatusInternal(ProcessorState& st, GolangStatus status);
  void sendLocalReplyInternal(ProcessorState& st, const LocalReply& r);
  CAPIStatus getStringPropertyCommon(const std::string& path, uint64_t* data, int* len);

  std::shared_ptr<FilterConfig> config_;
  Stream& stream_;
  HttpRequestInternal* req_;
  ProcessorState& decoding_;
  ProcessorState& encoding_;
  HeaderMap* request_headers_{nullptr};
  HeaderMap* request_trailers_{nullptr};
  std::mutex mu_;
  bool has_destroyed_{false};
};

// ---- the stream and its filter manager ------------------------------------

struct Event {
  uint64_t seq;
  std::string side; // upstream | downstream
  std::string kind; // headers | data | trailers | reset | local_reply
  bool end{false};
  HeaderMap headers;
  std::string data;
  int code{0};
  std::string details;
};

class Stream {
public:
  Stream(std::string name, Dispatcher& d, std::shared_ptr<FilterConfig> cfg, uint64_t limit);
  ~Stream();

  // downstream (client) and upstream (engine) actions, on the worker
  void clientHeaders(HeaderMap h, bool end_stream);
  void clientData(const std::string& data, bool end_stream);
  void clientTrailers(HeaderMap t);
  void clientReset();
  void upstreamHeaders(HeaderMap h, bool end_stream);
  void upstreamData(const std::string& data, bool end_stream);
  void upstreamTrailers(HeaderMap t);
  void upstreamReset();

  // the callbacks the filter calls (StreamDecoderFilterCallbacks and
  // StreamEncoderFilterCallbacks)
  void continueDecoding();
  void continueEncoding();
  void injectDecodedData(Buffer& data, bool end_stream);
  void injectEncodedData(Buffer& data, bool end_stream);
  void addDecodedData(Buffer& data, bool streaming);
  void addEncodedData(Buffer& data, bool streaming);
  void sendLocalReply(const LocalReply& r);
  void setUpstreamOverrideHost(const std::string& host, bool strict);
  void aboveWatermark(bool encoding) { (encoding ? enc_watermark_ : dec_watermark_)++; }
  void belowWatermark(bool) {}
  uint64_t bufferLimit() const { return limit_; }

  Dispatcher& dispatcher() { return d_; }
  const std::string& name() const { return name_; }
  bool isGrpc() const;

  // stream info
  std::string peer{"127.0.0.1:40000"};
  std::string local{"127.0.0.1:10000"};
  std::string route_name{"llm"};
  std::string start_time; // RFC 3339, set at creation
  int response_code{0};
  std::string response_code_details;
  // response_flags is StreamInfo's legacyResponseFlags() bit vector
  // (envoy/stream_info/stream_info.h CoreResponseFlag), response.flags.
  uint64_t response_flags{0};
  std::map<std::string, std::map<std::string, std::string>> metadata; // ns -> key -> Value bytes
  std::map<std::string, std::string> filter_state;
  std::string override_host;

  // for waits and the report
  std::vector<Event> events;
  bool upstreamStarted() const { return up_started_; }
  bool upstreamEnded() const { return up_end_; }
  bool downstreamStarted() const { return down_started_; }
  bool ended() const { return ended_; }
  bool goIdle() const;
  int destroy_calls{0};
  std::string dec_state, enc_state; // the golang filter's states when it was destroyed
  bool completed{false};
  std::string end_reason;
  int dec_watermark_{0}, enc_watermark_{0};
  bool quiet{false}; // bench: record no events
  size_t emitted{0};  // interactive: events already written out
  bool end_emitted{false};

private:
  friend class Filter;
  struct Side {
    bool headers_continued{false};
    bool stopped{false};
    std::unique_ptr<Buffer> buffered;
    bool observed_end{false};
    bool has_trailers{false};
    bool aborted{false};
  };
  bool afterCallback(Side& side);
  void commonContinue(bool encoding);
  void toUpstreamHeaders(bool end);
  void toUpstreamData(Buffer& b, bool end);
  void toUpstreamTrailers();
  void toDownstreamHeaders(HeaderMap& h, bool end);
  void toDownstreamData(Buffer& b, bool end);
  void toDownstreamTrailers();
  void filterEncodeHeaders(bool end);
  void filterEncodeData(Buffer& b, bool end);
  void resetStream(const std::string& why);
  void endStream(const std::string& why);
  Event& record(const std::string& side, const std::string& kind, bool end);

  std::string name_;
  Dispatcher& d_;
  uint64_t limit_;
  std::shared_ptr<Filter> filter_;
  HeaderMap req_headers_, req_trailers_, resp_headers_, resp_trailers_;
  bool resp_headers_set_{false};
  Side dec_, enc_;
  int call_state_{0}; // nonzero while a filter callback runs
  std::unique_ptr<LocalReply> prepared_;
  std::string pending_end_;
  bool up_started_{false}, up_end_{false};
  bool down_started_{false}, down_end_{false};
  bool ended_{false};
};

} // namespace envoyhost
