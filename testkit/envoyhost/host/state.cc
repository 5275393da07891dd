// The golang filter's per-direction state (ProcessorState) and its data
// buffers, following Envoy v1.36's processor_state.{h,cc}. Where Envoy
// ASSERTs, the host records a violation.
#include "host.h"

namespace envoyhost {

// ---- BufferList -------------------------------------------------------------

Buffer& BufferList::push(Buffer& data) {
  bytes_ += data.length();
  auto b = std::make_unique<Buffer>();
  b->move(data);
  queue_.push_back(std::move(b));
  return *queue_.back();
}

void BufferList::moveOut(Buffer& data) {
  for (auto& b : queue_) {
    data.move(*b);
  }
  queue_.clear();
  bytes_ = 0;
}

void BufferList::clearLatest() {
  if (queue_.empty()) {
    violation("BufferList::clearLatest on an empty list");
    return;
  }
  bytes_ -= queue_.back()->length();
  queue_.pop_back();
}

void BufferList::clearAll() {
  bytes_ = 0;
  queue_.clear();
}

bool BufferList::checkExisting(Buffer* data) const {
  for (auto& b : queue_) {
    if (b.get() == data) {
      return true;
    }
  }
  return false;
}

void WatermarkBuffer::moveIn(Buffer& o) {
  move(o);
  if (limit > 0 && !above && length() > limit) {
    above = true;
    if (high) {
      high();
    }
  }
}

void WatermarkBuffer::drainAll() {
  d.clear();
  if (above) {
    above = false;
    if (low) {
      low();
    }
  }
}

// ---- ProcessorState ---------------------------------------------------------

const char* stateName(FilterState s) {
  switch (s) {
  case FilterState::WaitingHeader:
    return "WaitingHeader";
  case FilterState::ProcessingHeader:
    return "ProcessingHeader";
  case FilterState::WaitingData:
    return "WaitingData";
  case FilterState::WaitingAllData:
    return "WaitingAllData";
  case FilterState::ProcessingData:
    return "ProcessingData";
  case FilterState::WaitingTrailer:
    return "WaitingTrailer";
  case FilterState::ProcessingTrailer:
    return "ProcessingTrailer";
  case FilterState::Done:
    return "Done";
  }
  return "unknown";
}

ProcessorState::ProcessorState(Filter& f, httpRequest* r, bool enc) : filter_(f) {
  req = r;
  is_encoding = enc ? 1 : 0;
  setFilterState(FilterState::WaitingHeader);
}

std::string ProcessorState::stateStr() const {
  return std::string(encoding() ? "encoder:" : "decoder:") + stateName(filterState());
}

bool ProcessorState::isProcessingInGo() const {
  auto s = filterState();
  return s == FilterState::ProcessingHeader || s == FilterState::ProcessingData ||
         s == FilterState::ProcessingTrailer || req->is_golang_processing_log.load() != 0;
}

Stream& ProcessorState::stream() const { return filter_.stream(); }
Dispatcher& ProcessorState::dispatcher() const { return filter_.dispatcher(); }
bool ProcessorState::isThreadSafe() const { return dispatcher().isThreadSafe(); }

Buffer& ProcessorState::getBufferData() {
  if (data_buffer_ == nullptr) {
    // Envoy dereferences a null buffer here; the host makes it empty.
    data_buffer_ = std::make_unique<WatermarkBuffer>();
  }
  return *data_buffer_;
}

void ProcessorState::drainBufferData() {
  if (data_buffer_ != nullptr && data_buffer_->length() > 0) {
    data_buffer_->drainAll();
  }
}

void ProcessorState::addBufferData(Buffer& data) {
  if (data_buffer_ == nullptr) {
    data_buffer_ = std::make_unique<WatermarkBuffer>();
    data_buffer_->limit = stream().bufferLimit();
    bool enc = encoding();
    data_buffer_->low = [this, enc] {
      if (watermark_requested_) {
        watermark_requested_ = false;
        stream().belowWatermark(enc);
      }
    };
    data_buffer_->high = [this, enc] {
      if (filterState() == FilterState::WaitingAllData) {
        LocalReply r;
        if (enc) {
          r.code = 500;
          r.body = "Internal Server Error";
          r.details = "response_payload_too_large";
        } else {
          r.code = 413;
          r.body = "Payload Too Large";
          r.details = "request_payload_too_large";
        }
        stream().sendLocalReply(r);
        return;
      }
      if (!watermark_requested_) {
        watermark_requested_ = true;
        stream().aboveWatermark(enc);
      }
    };
  }
  data_buffer_->moveIn(data);
}

void ProcessorState::continueProcessing() {
  if (encoding()) {
    stream().continueEncoding();
  } else {
    stream().continueDecoding();
  }
}

void ProcessorState::injectDataToFilterChain(Buffer& data, bool end_stream) {
  if (encoding()) {
    stream().injectEncodedData(data, end_stream);
  } else {
    stream().injectDecodedData(data, end_stream);
  }
}

void ProcessorState::continueDoData() {
  if (!end_stream_ && doDataList.empty()) {
    return;
  }
  Buffer out;
  doDataList.moveOut(out);
  injectDataToFilterChain(out, do_end_stream_);
}

void ProcessorState::processHeader(bool end_stream) {
  if (filterState() != FilterState::WaitingHeader) {
    violation("processHeader in state " + stateStr());
  }
  setFilterState(FilterState::ProcessingHeader);
  do_end_stream_ = end_stream;
}

void ProcessorState::processData(bool end_stream) {
  if (!(filterState() == FilterState::WaitingData ||
        (filterState() == FilterState::WaitingAllData && (end_stream || trailers != nullptr)))) {
    violation("processData in state " + stateStr());
  }
  setFilterState(FilterState::ProcessingData);
  do_end_stream_ = end_stream;
}

void ProcessorState::processTrailer() {
  auto s = filterState();
  if (!(s == FilterState::WaitingTrailer || s == FilterState::WaitingData ||
        s == FilterState::WaitingAllData)) {
    violation("processTrailer in state " + stateStr());
  }
  setFilterState(FilterState::ProcessingTrailer);
  do_end_stream_ = true;
}

bool ProcessorState::handleHeaderGolangStatus(GolangStatus st) {
  if (filterState() != FilterState::ProcessingHeader) {
    violation("handleHeaderGolangStatus in state " + stateStr());
  }
  switch (st) {
  case GolangStatus::LocalReply:
  case GolangStatus::Running:
    return false;
  case GolangStatus::Continue:
    setFilterState(do_end_stream_ ? FilterState::Done : FilterState::WaitingData);
    return true;
  case GolangStatus::StopAndBuffer:
    setFilterState(FilterState::WaitingAllData);
    return false;
  case GolangStatus::StopAndBufferWatermark:
    setFilterState(FilterState::WaitingData);
    return false;
  default:
    // Envoy logs "unexpected status" and keeps the state: the stream hangs.
    violation("unexpected header status " + std::to_string(int(st)) + " in " + stateStr());
    return false;
  }
}

bool ProcessorState::handleDataGolangStatus(GolangStatus st) {
  if (filterState() != FilterState::ProcessingData) {
    violation("handleDataGolangStatus in state " + stateStr());
  }
  bool done = false;
  switch (st) {
  case GolangStatus::LocalReply:
  case GolangStatus::Running:
    return false;
  case GolangStatus::Continue:
    setFilterState(do_end_stream_ ? FilterState::Done : FilterState::WaitingData);
    done = true;
    break;
  case GolangStatus::StopAndBuffer:
    if (do_end_stream_) {
      violation("StopAndBuffer returned at end of stream (" + stateStr() + ")");
    }
    setFilterState(FilterState::WaitingAllData);
    break;
  case GolangStatus::StopAndBufferWatermark:
    if (do_end_stream_) {
      violation("StopAndBufferWatermark returned at end of stream (" + stateStr() + ")");
    }
    setFilterState(FilterState::WaitingData);
    break;
  case GolangStatus::StopNoBuffer:
    if (do_end_stream_) {
      violation("StopNoBuffer returned at end of stream (" + stateStr() + ")");
    }
    doDataList.clearLatest();
    setFilterState(FilterState::WaitingData);
    break;
  default:
    violation("unexpected data status " + std::to_string(int(st)) + " in " + stateStr());
    break;
  }
  if (trailers != nullptr && isBufferDataEmpty()) {
    setFilterState(FilterState::WaitingTrailer);
  }
  return done;
}

bool ProcessorState::handleTrailerGolangStatus(GolangStatus st) {
  if (filterState() != FilterState::ProcessingTrailer) {
    violation("handleTrailerGolangStatus in state " + stateStr());
  }
  switch (st) {
  case GolangStatus::LocalReply:
  case GolangStatus::Running:
    return false;
  case GolangStatus::Continue:
    setFilterState(FilterState::Done);
    return true;
  default:
    violation("unexpected trailer status " + std::to_string(int(st)) + " in " + stateStr());
    return false;
  }
}

bool ProcessorState::handleGolangStatus(GolangStatus st) {
  if (!isThreadSafe()) {
    violation("handleGolangStatus off the worker thread");
  }
  if (!isProcessingInGo()) {
    violation("handleGolangStatus while not processing in Go (" + stateStr() + ")");
  }
  switch (filterState()) {
  case FilterState::ProcessingHeader:
    return handleHeaderGolangStatus(st);
  case FilterState::ProcessingData:
    return handleDataGolangStatus(st);
  case FilterState::ProcessingTrailer:
    return handleTrailerGolangStatus(st);
  default:
    violation("handleGolangStatus in unexpected state " + stateStr());
    return false;
  }
}

void ProcessorState::sendLocalReply(const LocalReply& r) {
  if (!encoding()) {
    // The decoder's phase moves on to the encoder's headers.
    setFilterState(FilterState::WaitingHeader);
  }
  stream().sendLocalReply(r);
}

void ProcessorState::addData(Buffer& data, bool streaming) {
  if (encoding()) {
    stream().addEncodedData(data, streaming);
  } else {
    stream().addDecodedData(data, streaming);
  }
}

} // namespace envoyhost
