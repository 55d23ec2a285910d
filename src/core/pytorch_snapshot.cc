// File: src/core/pytorch_snapshot.cc
// PyTorchSnapshotPickle: a small pickle writer for plain data (the opcodes
// PyTorch's memory viewer's JavaScript unpickler reads) and the bfc ->
// PyTorch mapping of bfc/pytorch_snapshot.h.
#include "bfc/pytorch_snapshot.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace bfc {
namespace {

// Writes pickle opcodes into a string. Containers are built the way Python's
// own pickler builds them: an empty dict/list, a MARK, the items, then
// SETITEMS/APPENDS (batched, as the reader's stack would otherwise grow with
// the container).
class PickleWriter {
 public:
  PickleWriter() {
    out_.push_back('\x80');  // PROTO
    out_.push_back('\x04');
  }

  std::string Finish() && {
    out_.push_back('.');  // STOP
    return std::move(out_);
  }

  void Int(int64_t v) {
    if (v >= 0 && v < 0x100) {
      out_.push_back('K');  // BININT1
      out_.push_back(static_cast<char>(v));
    } else if (v >= 0 && v < 0x10000) {
      out_.push_back('M');  // BININT2
      Le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_.push_back('J');  // BININT, signed 32-bit
      Le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))),
         4);
    } else {
      out_.push_back('\x8a');  // LONG1: n bytes, little-endian two's complement
      out_.push_back('\x08');
      Le(static_cast<uint64_t>(v), 8);
    }
  }
  // Addresses and sizes: the largest a uint64 can hold does not fit an
  // int64, and numbers past 2^53 would be rounded by the JavaScript reader;
  // they are clamped there (no real device address or size comes near it).
  void Uint(uint64_t v) {
    constexpr uint64_t kMaxExact = uint64_t{1} << 53;
    Int(static_cast<int64_t>(v < kMaxExact ? v : kMaxExact));
  }
  void Float(double v) {
    out_.push_back('G');  // BINFLOAT, big-endian IEEE double
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 7; i >= 0; --i)
      out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  void Bool(bool v) { out_.push_back(v ? '\x88' : '\x89'); }
  void None() { out_.push_back('N'); }
  // Strings must be UTF-8 for Python to decode them: bytes that are not are
  // replaced (symbol names and file names are ASCII in practice).
  void Str(std::string_view s) {
    const std::string utf8 = ValidUtf8(s);
    if (utf8.size() < 0x100) {
      out_.push_back('\x8c');  // SHORT_BINUNICODE
      out_.push_back(static_cast<char>(utf8.size()));
    } else {
      out_.push_back('X');  // BINUNICODE
      Le(utf8.size(), 4);
    }
    out_ += utf8;
  }

  // A dict: BeginDict(), then Key(...) + a value, repeatedly, then End().
  void BeginDict() { Begin('}'); }
  void BeginList() { Begin(']'); }
  void Key(std::string_view k) { Str(k); }
  // Called after each scalar dict value or list element; End() counts a
  // finished container as its parent's item itself.
  void ItemDone() {
    Frame& f = stack_.back();
    if (++f.items == kBatch) {
      out_.push_back(f.dict ? 'u' : 'e');  // SETITEMS / APPENDS
      out_.push_back('(');                 // MARK for the next batch
      f.items = 0;
    }
  }
  void End() {
    const Frame f = stack_.back();
    stack_.pop_back();
    // Close the open batch; an empty batch (MARK then SETITEMS) is valid.
    out_.push_back(f.dict ? 'u' : 'e');
    if (!stack_.empty()) ItemDone();
  }

 private:
  static constexpr int kBatch = 1000;  // Python's pickler uses the same
  struct Frame {
    bool dict;
    int items;
  };

  void Begin(char opcode) {
    out_.push_back(opcode);
    out_.push_back('(');  // MARK
    stack_.push_back({opcode == '}', 0});
  }
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  static std::string ValidUtf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      int n = c < 0x80         ? 1
              : (c >> 5) == 6  ? 2
              : (c >> 4) == 14 ? 3
              : (c >> 3) == 30 ? 4
                               : 0;
      bool ok = n > 0 && i + n <= s.size();
      for (int k = 1; ok && k < n; ++k)
        ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
      // Overlong forms and surrogates are not valid either.
      if (ok && n == 2) ok = c >= 0xc2;
      if (ok && n == 3) {
        const unsigned char d = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xe0 && d < 0xa0) && !(c == 0xed && d >= 0xa0);
      }
      if (ok && n == 4) {
        const unsigned char d = static_cast<unsigned char>(s[i + 1]);
        ok = c <= 0xf4 && !(c == 0xf0 && d < 0x90) && !(c == 0xf4 && d >= 0x90);
      }
      if (ok) {
        out.append(s.substr(i, n));
        i += n;
      } else {
        out += "\xef\xbf\xbd";  // U+FFFD
        ++i;
      }
    }
    return out;
  }

  std::string out_;
  std::vector<Frame> stack_;
};

void WriteFrames(PickleWriter& w, const std::vector<PyTorchFrame>& frames) {
  w.BeginList();
  for (const PyTorchFrame& f : frames) {
    w.BeginDict();
    w.Key("filename");
    w.Str(f.filename);
    w.ItemDone();
    w.Key("line");
    w.Int(f.line);
    w.ItemDone();
    w.Key("name");
    w.Str(f.name);
    w.ItemDone();
    w.End();
  }
  w.End();
}

std::vector<PyTorchFrame> SiteFrames(const std::vector<std::string>& site) {
  std::vector<PyTorchFrame> frames;
  frames.reserve(site.size());
  for (const std::string& s : site) frames.push_back({"", 0, s});
  return frames;
}

template <typename T>
void Field(PickleWriter& w, std::string_view key, T value) {
  w.Key(key);
  if constexpr (std::is_same_v<T, bool>) {
    w.Bool(value);
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    w.Uint(value);
  } else if constexpr (std::is_integral_v<T>) {
    w.Int(static_cast<int64_t>(value));
  } else {
    w.Str(value);
  }
  w.ItemDone();
}

// One block: a chunk, or a gap the chunks leave in a region (never in a
// valid dump; written as inactive so the blocks still tile the segment).
void WriteBlock(PickleWriter& w, uint64_t address, uint64_t size,
                uint64_t requested, bool in_use,
                const std::vector<std::string>* site) {
  w.BeginDict();
  Field(w, "address", address);
  Field(w, "size", size);
  Field(w, "requested_size", requested);
  Field(w, "state", in_use ? "active_allocated" : "inactive");
  w.Key("frames");
  WriteFrames(
      w, site != nullptr ? SiteFrames(*site) : std::vector<PyTorchFrame>());
  w.End();
}

// The bytes of a region that lie in the address space: a hand-built dump
// may hold one that runs past 2^64. Every block is placed by its offset in
// these, so no address or end computed below can wrap.
uint64_t SizeInAddressSpace(const RegionDump& region) {
  if (region.base == 0) return region.size;
  const uint64_t room = ~uint64_t{0} - region.base + 1;  // up to 2^64
  return std::min(region.size, room);
}

// PyTorch's device index is an int8_t (c10::DeviceIndex): one in [0, 127].
int ClampedDevice(int device) { return std::clamp(device, 0, 127); }

void WriteSegments(PickleWriter& w, const MemoryDump& state,
                   const PyTorchSnapshotOptions& options, bool expandable) {
  w.BeginList();
  size_t next_chunk = 0;
  for (size_t r = 0; r < state.regions.size(); ++r) {
    const RegionDump& region = state.regions[r];
    const uint64_t size = SizeInAddressSpace(region);
    uint64_t allocated = 0, requested = 0;
    // The chunks of this region: dumps list them region by region.
    size_t first = next_chunk;
    while (first < state.chunks.size() &&
           state.chunks[first].address < region.base)
      ++first;
    size_t last = first;
    while (last < state.chunks.size() &&
           state.chunks[last].address - region.base < size) {
      if (state.chunks[last].in_use) {
        allocated += state.chunks[last].size;
        requested += state.chunks[last].requested_size;
      }
      ++last;
    }
    next_chunk = last;
    w.BeginDict();
    Field(w, "device", ClampedDevice(options.device));
    Field(w, "address", region.base);
    Field(w, "total_size", size);
    Field(w, "stream", options.stream);
    Field(w, "segment_type", "large");
    Field(w, "allocated_size", allocated);
    Field(w, "active_size", allocated);
    Field(w, "requested_size", requested);
    Field(w, "is_expandable", expandable);
    w.Key("frames");
    WriteFrames(w, {});
    w.Key("blocks");
    w.BeginList();
    // `used`: the offset up to which blocks tile the segment. Chunks of a
    // valid dump tile it exactly; gaps are written as inactive blocks, and a
    // chunk that runs past the segment's end (a hand-built dump) is cut to
    // it (one that overlaps the chunk before it is written as it is).
    uint64_t used = 0;
    for (size_t i = first; i < last; ++i) {
      const ChunkDump& c = state.chunks[i];
      const uint64_t offset = c.address - region.base;  // < size
      if (offset > used) {
        WriteBlock(w, region.base + used, offset - used, 0, false, nullptr);
      }
      const uint64_t block = std::min(c.size, size - offset);
      WriteBlock(w, c.address, block, c.in_use ? c.requested_size : 0, c.in_use,
                 c.in_use ? &c.site : nullptr);
      used = std::max(used, offset + block);  // <= size: cannot wrap
    }
    if (used < size) {
      WriteBlock(w, region.base + used, size - used, 0, false, nullptr);
    }
    w.End();
    w.End();
  }
  w.End();
}

void WriteEntry(PickleWriter& w, std::string_view action, uint64_t address,
                uint64_t size, const MemoryEvent& e,
                const PyTorchSnapshotOptions& options,
                const std::vector<PyTorchFrame>& frames) {
  w.BeginDict();
  Field(w, "action", action);
  Field(w, "addr", address);
  Field(w, "size", size);
  Field(w, "stream", options.stream);
  Field(w, "time_us", e.time_us);
  if (e.action == MemoryEvent::Action::kOutOfMemory)
    Field(w, "device_free", e.free_bytes);
  w.Key("frames");
  WriteFrames(w, frames);
  w.End();
}

// True when memory was joined to a region during the history: the
// allocator's sub-allocator coalesces, and its regions are written as
// PyTorch writes expandable segments.
// Whether regions change shape in `events`: they grow, or lose part of
// themselves (a partial release is a kRegionFree inside a region taken in
// the window; written as a "segment_free" of an address no segment starts
// at, the trace did not replay: a review).
bool RegionsGrow(const std::vector<MemoryEvent>& events) {
  std::map<uint64_t, uint64_t> regions;  // address -> size, seen taken
  for (const MemoryEvent& e : events) {
    switch (e.action) {
      case MemoryEvent::Action::kRegionExtend:
        return true;
      case MemoryEvent::Action::kRegionAlloc:
        regions[e.address] = e.size;
        break;
      case MemoryEvent::Action::kRegionFree: {
        auto it = regions.upper_bound(e.address);
        if (it == regions.begin()) break;  // taken before the window
        --it;
        if (e.address - it->first >= it->second) break;  // likewise
        if (it->first != e.address || it->second != e.size) return true;
        regions.erase(it);
        break;
      }
      default:
        break;
    }
  }
  return false;
}

void WriteTrace(PickleWriter& w, const std::vector<MemoryEvent>& events,
                const PyTorchSnapshotOptions& options) {
  // Regions that grow are PyTorch's expandable segments: every range taken
  // is a "segment_map" (the first one too) and a region given back a
  // "segment_unmap", which the viewer's state history joins and splits by
  // address. A segment_free + segment_alloc pair per growth would leave the
  // region's live blocks outside any segment between the two entries, which
  // the state history cannot draw.
  const bool expandable = RegionsGrow(events);
  w.BeginList();
  for (size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    const std::vector<PyTorchFrame> frames = options.event_frames
                                                 ? options.event_frames(i)
                                                 : std::vector<PyTorchFrame>();
    // PyTorch records the bytes asked on alloc and on free; a chunk's
    // rounding shows in the segments' blocks.
    const uint64_t asked = e.requested_size != 0 ? e.requested_size : e.size;
    switch (e.action) {
      case MemoryEvent::Action::kAllocate:
        WriteEntry(w, "alloc", e.address, asked, e, options, frames);
        break;
      case MemoryEvent::Action::kFree:
        WriteEntry(w, "free_requested", e.address, asked, e, options, frames);
        WriteEntry(w, "free_completed", e.address, asked, e, options, frames);
        break;
      case MemoryEvent::Action::kRegionAlloc:
      case MemoryEvent::Action::kRegionExtend:
        WriteEntry(w, expandable ? "segment_map" : "segment_alloc", e.address,
                   e.size, e, options, frames);
        break;
      case MemoryEvent::Action::kRegionFree:
        WriteEntry(w, expandable ? "segment_unmap" : "segment_free", e.address,
                   e.size, e, options, frames);
        break;
      case MemoryEvent::Action::kOutOfMemory:
        WriteEntry(w, "oom", e.address, e.size, e, options, frames);
        break;
    }
  }
  w.End();
}

}  // namespace

std::string PyTorchSnapshotPickle(const MemoryDump& state,
                                  const std::vector<MemoryEvent>& events,
                                  const PyTorchSnapshotOptions& options) {
  const int device = ClampedDevice(options.device);
  PickleWriter w;
  w.BeginDict();
  w.Key("segments");
  WriteSegments(w, state, options, RegionsGrow(events));
  w.Key("device_traces");
  w.BeginList();
  // Devices before ours had no events.
  for (int d = 0; d < device; ++d) {
    w.BeginList();
    w.End();
  }
  WriteTrace(w, events, options);
  w.End();
  w.Key("allocator_settings");
  w.BeginDict();
  Field(w, "allocator", "bfc");
  Field(w, "name", state.allocator_name);
  Field(w, "limit", state.limit);
  w.End();
  w.End();
  return std::move(w).Finish();
}

}  // namespace bfc
