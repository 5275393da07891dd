// The C functions the .so imports (api.h), exported from the host binary
// with -rdynamic, with cgo.cc's guards: a destroyed filter object (weak_ptr
// gone) answers CAPIFilterIsGone, a state not held in Go CAPINotInGo, a
// filter after OnDestroy CAPIFilterIsDestroy. Every status is counted.
#include <cstdio>
#include <cstring>

#include "host.h"

using namespace envoyhost;

namespace {

std::string str(void* p, int len) {
  return std::string(static_cast<const char*>(p), static_cast<size_t>(len < 0 ? 0 : len));
}

CAPIStatus counted(CAPIStatus st) {
  countStatus(st);
  return st;
}

template <typename F> CAPIStatus withState(void* s, F f) {
  auto* state = static_cast<ProcessorState*>(reinterpret_cast<processState*>(s));
  if (!state->isProcessingInGo()) {
    return counted(CAPINotInGo);
  }
  auto* req = static_cast<HttpRequestInternal*>(state->req);
  if (auto filter = req->weakFilter().lock()) {
    return counted(f(*filter, *state));
  }
  return counted(CAPIFilterIsGone);
}

template <typename F> CAPIStatus withRequest(void* r, F f) {
  auto* req = reinterpret_cast<HttpRequestInternal*>(r);
  if (auto filter = req->weakFilter().lock()) {
    if (!filter->isProcessingInGo()) {
      return counted(CAPINotInGo);
    }
    return counted(f(*filter));
  }
  return counted(CAPIFilterIsGone);
}

template <typename F> CAPIStatus withConfig(void* c, F f) {
  auto* config = reinterpret_cast<HttpConfigInternal*>(c);
  if (auto fc = config->config.lock()) {
    return counted(f(*fc));
  }
  return counted(CAPIFilterIsGone);
}

} // namespace

extern "C" {

CAPIStatus envoyGoFilterHttpContinue(void* s, int status) {
  return withState(s, [status](Filter& f, ProcessorState& st) {
    return f.continueStatus(st, static_cast<GolangStatus>(status));
  });
}

CAPIStatus envoyGoFilterHttpSendLocalReply(void* s, int response_code, void* body_text_data,
                                           int body_text_len, void* headers, int headers_num,
                                           long long int grpc_status, void* details_data,
                                           int details_len) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    LocalReply r;
    r.code = response_code;
    r.body = str(body_text_data, body_text_len);
    auto* strs = reinterpret_cast<GoString*>(headers);
    for (int i = 0; i + 1 < headers_num; i += 2) {
      std::string k(strs[i].p, static_cast<size_t>(strs[i].n));
      std::string v(strs[i + 1].p, static_cast<size_t>(strs[i + 1].n));
      if (!v.empty()) {
        r.headers.emplace_back(lower(k), v);
      }
    }
    r.grpc_status = grpc_status;
    r.details = str(details_data, details_len);
    return f.sendLocalReply(st, r);
  });
}

CAPIStatus envoyGoFilterHttpSendPanicReply(void* s, void* details_data, int details_len) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.sendPanicReply(st, str(details_data, details_len));
  });
}

CAPIStatus envoyGoFilterHttpAddData(void* s, void* data, int data_len, bool is_streaming) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.addData(st, str(data, data_len), is_streaming);
  });
}

CAPIStatus envoyGoFilterHttpInjectData(void* s, void* data, int data_len) {
  return withState(
      s, [&](Filter& f, ProcessorState& st) { return f.injectData(st, str(data, data_len)); });
}

CAPIStatus envoyGoFilterHttpGetHeader(void* s, void* key_data, int key_len, uint64_t* value_data,
                                      int* value_len) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.getHeader(st, str(key_data, key_len), value_data, value_len);
  });
}

CAPIStatus envoyGoFilterHttpCopyHeaders(void* s, void* strs, void* buf) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.copyHeaders(st, reinterpret_cast<GoString*>(strs), reinterpret_cast<char*>(buf));
  });
}

CAPIStatus envoyGoFilterHttpSetHeaderHelper(void* s, void* key_data, int key_len, void* value_data,
                                            int value_len, headerAction act) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.setHeader(st, str(key_data, key_len), str(value_data, value_len), act);
  });
}

CAPIStatus envoyGoFilterHttpRemoveHeader(void* s, void* key_data, int key_len) {
  return withState(
      s, [&](Filter& f, ProcessorState& st) { return f.removeHeader(st, str(key_data, key_len)); });
}

CAPIStatus envoyGoFilterHttpGetBuffer(void* s, uint64_t buffer, void* value) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.copyBuffer(st, reinterpret_cast<Buffer*>(buffer), reinterpret_cast<char*>(value));
  });
}

CAPIStatus envoyGoFilterHttpDrainBuffer(void* s, uint64_t buffer, uint64_t length) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.drainBuffer(st, reinterpret_cast<Buffer*>(buffer), length);
  });
}

CAPIStatus envoyGoFilterHttpSetBufferHelper(void* s, uint64_t buffer, void* data, int length,
                                            bufferAction action) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.setBufferHelper(st, reinterpret_cast<Buffer*>(buffer), str(data, length), action);
  });
}

CAPIStatus envoyGoFilterHttpCopyTrailers(void* s, void* strs, void* buf) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.copyTrailers(st, reinterpret_cast<GoString*>(strs), reinterpret_cast<char*>(buf));
  });
}

CAPIStatus envoyGoFilterHttpSetTrailer(void* s, void* key_data, int key_len, void* value,
                                       int value_len, headerAction act) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.setTrailer(st, str(key_data, key_len), str(value, value_len), act);
  });
}

CAPIStatus envoyGoFilterHttpRemoveTrailer(void* s, void* key_data, int key_len) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.removeTrailer(st, str(key_data, key_len));
  });
}

CAPIStatus envoyGoFilterHttpSetUpstreamOverrideHost(void* s, void* host_data, int host_len,
                                                    bool strict) {
  return withState(s, [&](Filter& f, ProcessorState& st) {
    return f.setUpstreamOverrideHost(st, str(host_data, host_len), strict);
  });
}

CAPIStatus envoyGoFilterHttpClearRouteCache(void* r, bool refresh) {
  return withRequest(r, [&](Filter& f) { return f.clearRouteCache(refresh); });
}

CAPIStatus envoyGoFilterHttpGetStringValue(void* r, int id, uint64_t* value_data,
                                           int* value_len) {
  return withRequest(r, [&](Filter& f) { return f.getStringValue(id, value_data, value_len); });
}

CAPIStatus envoyGoFilterHttpGetIntegerValue(void* r, int id, uint64_t* value) {
  return withRequest(r, [&](Filter& f) { return f.getIntegerValue(id, value); });
}

CAPIStatus envoyGoFilterHttpGetDynamicMetadata(void* r, void* name_data, int name_len,
                                               uint64_t* value_data, int* value_len) {
  return withRequest(r, [&](Filter& f) {
    return f.getDynamicMetadata(str(name_data, name_len), value_data, value_len);
  });
}

CAPIStatus envoyGoFilterHttpSetDynamicMetadata(void* r, void* name_data, int name_len,
                                               void* key_data, int key_len, void* buf_data,
                                               int buf_len) {
  return withRequest(r, [&](Filter& f) {
    return f.setDynamicMetadata(str(name_data, name_len), str(key_data, key_len),
                                str(buf_data, buf_len));
  });
}

void envoyGoFilterHttpFinalize(void* r, int) {
  auto* req = reinterpret_cast<HttpRequestInternal*>(r);
  if (auto filter = req->weakFilter().lock()) {
    filter->deferredDeleteRequest(req);
  } else {
    delete req;
  }
}

CAPIStatus envoyGoFilterHttpSetStringFilterState(void* r, void* key_data, int key_len,
                                                 void* value_data, int value_len, int, int, int) {
  return withRequest(r, [&](Filter& f) {
    return f.setStringFilterState(str(key_data, key_len), str(value_data, value_len));
  });
}

CAPIStatus envoyGoFilterHttpGetStringFilterState(void* r, void* key_data, int key_len,
                                                 uint64_t* value_data, int* value_len) {
  return withRequest(r, [&](Filter& f) {
    return f.getStringFilterState(str(key_data, key_len), value_data, value_len);
  });
}

CAPIStatus envoyGoFilterHttpGetStringProperty(void* r, void* key_data, int key_len,
                                              uint64_t* value_data, int* value_len, int* rc) {
  return withRequest(r, [&](Filter& f) {
    return f.getStringProperty(str(key_data, key_len), value_data, value_len, rc);
  });
}

CAPIStatus envoyGoFilterHttpGetStringSecret(void* r, void* key_data, int key_len,
                                            uint64_t* value_data, int* value_len) {
  return withRequest(
      r, [&](Filter& f) { return f.getSecret(str(key_data, key_len), value_data, value_len); });
}

void envoyGoConfigHttpFinalize(void* c) { delete reinterpret_cast<HttpConfigInternal*>(c); }

CAPIStatus envoyGoFilterHttpDefineMetric(void* c, uint32_t metric_type, void* name_data,
                                         int name_len, uint32_t* metric_id) {
  return withConfig(c, [&](FilterConfig& fc) {
    return fc.defineMetric(metric_type, str(name_data, name_len), metric_id);
  });
}

CAPIStatus envoyGoFilterHttpIncrementMetric(void* c, uint32_t metric_id, int64_t offset) {
  return withConfig(c, [&](FilterConfig& fc) { return fc.incrementMetric(metric_id, offset); });
}

CAPIStatus envoyGoFilterHttpGetMetric(void* c, uint32_t metric_id, uint64_t* value) {
  return withConfig(c, [&](FilterConfig& fc) { return fc.getMetric(metric_id, value); });
}

CAPIStatus envoyGoFilterHttpRecordMetric(void* c, uint32_t metric_id, uint64_t value) {
  return withConfig(c, [&](FilterConfig& fc) { return fc.recordMetric(metric_id, value); });
}

} // extern "C"
