// File: bfc/pytorch_snapshot.h
// -----------------------------------------------------------------------------
//
// An allocator's memory as a PyTorch memory snapshot: the pickle that
// torch.cuda.memory._dump_snapshot() writes and PyTorch's memory viewer
// (pytorch.org/memory_viz, torch/cuda/_memory_viz.py) opens. PyTorch's
// `_record_memory_history` does not reach an allocator plugged in with
// CUDAPluggableAllocator; this gives such users the same pictures.
//
// The mapping, bfc -> PyTorch:
//
//   region                  -> segment (device, address, total_size, stream,
//                              allocated/active/requested_size, blocks)
//   chunk in use / free     -> block, state "active_allocated" / "inactive"
//                              (blocks tile their segment in address order,
//                              which is how the viewer lays them out)
//   allocation site         -> the block's frames (record_allocation_sites)
//   MemoryEvent kAllocate   -> trace entry "alloc" (size: bytes asked, as
//                              PyTorch records them)
//   MemoryEvent kFree       -> "free_requested" then "free_completed"
//                              (bfc reuses a chunk as soon as it is freed)
//   kRegionAlloc / kRegionFree -> "segment_alloc" / "segment_free"
//   kRegionExtend           -> when the history holds one, the regions grow
//                              (a coalescing sub-allocator) and are written
//                              as PyTorch writes expandable segments: every
//                              range taken, the first too, is "segment_map",
//                              a region given back "segment_unmap", and the
//                              segments say is_expandable. As in PyTorch, the
//                              viewer's segment timeline then draws those
//                              segments at their final size (it reads only
//                              segment_alloc/segment_free); its state history
//                              shows every growth step
//   kOutOfMemory            -> "oom" (size: bytes asked, device_free: what
//                              the limit still allowed)
//
// The events are the allocator's history (Allocator::RecordMemoryHistory);
// the segments are its state now (a MemoryDump), which the viewer's
// "Allocator State History" replays the trace backwards from.
//
// The file uses only the pickle opcodes of plain dicts, lists, strings,
// ints, floats, booleans and None (protocol 4, no memo, no classes): Python's
// pickle and the viewer's JavaScript unpickler both read it, and loading it
// runs no code. Integers stay below 2^53 (JavaScript numbers are exact
// there; device addresses are far below it).
//
// Example:
//
//   allocator.RecordMemoryHistory(100000);
//   ... run ...
//   std::string pickle = bfc::PyTorchSnapshotPickle(
//       allocator.RecordMemoryMap(), allocator.GetMemoryHistory().events);
//
// Thread-safe (pure functions).
#ifndef BFC_PYTORCH_SNAPSHOT_H_
#define BFC_PYTORCH_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bfc/memory_dump.h"

namespace bfc {

// One frame of a PyTorch stack: what the viewer shows for a block or event.
struct PyTorchFrame {
  std::string filename;
  int64_t line = 0;
  std::string name;
};

struct PyTorchSnapshotOptions {
  // device_traces gets device+1 lists; ours is last. Clamped to [0, 127],
  // PyTorch's device index range (c10::DeviceIndex is an int8_t).
  int device = 0;
  uint64_t stream = 0;  // the stream written on segments and entries
  // Frames for events[i] (for example the trace row a replayed event came
  // from); none when unset.
  std::function<std::vector<PyTorchFrame>(size_t i)> event_frames;
};

// The snapshot's bytes. Regions and chunks come from `state`; device_traces
// from `events` (oldest first).
std::string PyTorchSnapshotPickle(
    const MemoryDump& state, const std::vector<MemoryEvent>& events,
    const PyTorchSnapshotOptions& options = PyTorchSnapshotOptions());

}  // namespace bfc

#endif  // BFC_PYTORCH_SNAPSHOT_H_
