// File: src/core/cuda_stream_ops.cc
// -----------------------------------------------------------------------------
//
// bfc::CudaStreamOps (bfc/cuda_stream_ops.h) over the run-time driver table.
#include "bfc/cuda_stream_ops.h"

#include <string>
#include <utility>

#include "bfc/internal/str_format.h"
#include "core/internal/cuda_driver.h"

namespace bfc {

using internal::CudaDriver;
using internal::MutexLock;
using internal::ScopedPrimaryContext;

absl::StatusOr<std::unique_ptr<CudaStreamOps>> CudaStreamOps::Create(
    int device) {
  absl::StatusOr<int> count = internal::CudaDriverDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count) {
    return absl::UnavailableError(internal::Format(
        "CudaStreamOps: device %d does not exist (%d CUDA device(s))", device,
        *count));
  }
  return std::unique_ptr<CudaStreamOps>(new CudaStreamOps(device));
}

CudaStreamOps::~CudaStreamOps() {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return;
  MutexLock lock(&mu_);
  if (free_events_.empty()) return;
  ScopedPrimaryContext scoped(**driver, device_);
  if (!scoped.status().ok()) return;  // the driver is going away: leave them
  for (Event e : free_events_) {
    (void)(*driver)->EventDestroy(static_cast<CUevent>(e));
  }
}

absl::StatusOr<StreamOps::Event> CudaStreamOps::RecordEvent(StreamId stream) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  ScopedPrimaryContext scoped(**driver, device_);
  if (!scoped.status().ok()) return scoped.status();
  CUevent event = nullptr;
  {
    MutexLock lock(&mu_);
    if (!free_events_.empty()) {
      event = static_cast<CUevent>(free_events_.back());
      free_events_.pop_back();
    }
  }
  if (event == nullptr) {
    const CUresult r = (*driver)->EventCreate(&event, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      return (*driver)->CallError(
          internal::Format("cuEventCreate(device %d)", device_), r);
    }
    MutexLock lock(&mu_);
    ++events_created_;
  }
  const CUresult r =
      (*driver)->EventRecord(event, static_cast<CUstream>(stream));
  if (r != CUDA_SUCCESS) {
    ReleaseEvent(event);  // unrecorded, still good for the pool
    return (*driver)->CallError(
        internal::Format("cuEventRecord(stream %p)", stream), r);
  }
  MutexLock lock(&mu_);
  ++events_recorded_;
  return static_cast<Event>(event);
}

absl::StatusOr<bool> CudaStreamOps::QueryEvent(Event event) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  ScopedPrimaryContext scoped(**driver, device_);
  if (!scoped.status().ok()) return scoped.status();
  const CUresult r = (*driver)->EventQuery(static_cast<CUevent>(event));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return (*driver)->CallError(internal::Format("cuEventQuery(event %p)", event),
                              r);
}

absl::Status CudaStreamOps::StreamWaitEvent(StreamId stream, Event event) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  ScopedPrimaryContext scoped(**driver, device_);
  if (!scoped.status().ok()) return scoped.status();
  const CUresult r = (*driver)->StreamWaitEvent(static_cast<CUstream>(stream),
                                                static_cast<CUevent>(event), 0);
  if (r != CUDA_SUCCESS) {
    return (*driver)->CallError(
        internal::Format("cuStreamWaitEvent(stream %p, event %p)", stream,
                         event),
        r);
  }
  return absl::OkStatus();
}

absl::Status CudaStreamOps::SynchronizeEvent(Event event) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  ScopedPrimaryContext scoped(**driver, device_);
  if (!scoped.status().ok()) return scoped.status();
  const CUresult r = (*driver)->EventSynchronize(static_cast<CUevent>(event));
  if (r != CUDA_SUCCESS) {
    return (*driver)->CallError(
        internal::Format("cuEventSynchronize(event %p)", event), r);
  }
  return absl::OkStatus();
}

void CudaStreamOps::ReleaseEvent(Event event) {
  if (event == nullptr) return;
  MutexLock lock(&mu_);
  free_events_.push_back(event);
}

int64_t CudaStreamOps::events_created() const {
  MutexLock lock(&mu_);
  return events_created_;
}

int64_t CudaStreamOps::events_recorded() const {
  MutexLock lock(&mu_);
  return events_recorded_;
}

}  // namespace bfc
