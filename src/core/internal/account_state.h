// File: src/core/internal/account_state.h
// -----------------------------------------------------------------------------
//
// The state behind a bfc::Account (bfc/account.h), shared by the Account
// handle, its children and the Allocator, which credits it on every free of
// an allocation charged to it -- after the handle is gone too. Internal: not
// part of the API.
//
// Thread safety: the counters are atomics, written only under the owning
// allocator's mutex (so charges are serial) and read from anywhere; the rest
// is guarded by that mutex.
#ifndef BFC_CORE_INTERNAL_ACCOUNT_STATE_H_
#define BFC_CORE_INTERNAL_ACCOUNT_STATE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace bfc {

class Account;
class Allocator;

namespace internal {

struct AccountState {
  const Allocator* allocator = nullptr;
  std::string path;
  std::string name;
  std::shared_ptr<AccountState> parent;  // nullptr for a root
  uint32_t id = 0;                       // the allocator's tag; 0 = none
  int64_t limit = 0;
  // The quota this account holds of its parent; 0 once closed, so that what
  // is still charged here (leaks) counts in full up the chain.
  std::atomic<int64_t> reservation{0};

  // Charged to the subtree: own allocations + for each child max(its
  // reservation, its bytes_in_use).
  std::atomic<int64_t> used{0};
  std::atomic<int64_t> own{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> frees{0};
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> live{0};

  // Guarded by the allocator's mutex.
  bool closed = false;
  // Charged for allocations still in progress (charged, not yet on a
  // chunk): Validate counts them, as it may run in between (check level 2,
  // or another thread while one waits to retry).
  int64_t pending = 0;
  // Calls charged to this account in progress, waiting for memory between
  // their attempts included (each attempt charges and, failing, credits
  // again, so a wait holds no charge): Close refuses meanwhile, since the
  // call may still succeed; a close refused so because the handle went is
  // finished when the last of them returns.
  int64_t in_flight = 0;
  Account* handle = nullptr;  // nullptr once the handle is gone
  // Registered children (open, or closed with something still charged), in
  // creation order until one is forgotten (its place takes the last).
  std::vector<AccountState*> children;
  // This account's place in its parent's `children`.
  size_t index_in_parent = 0;
  // The names of the open ones: a new child's name is checked in O(1), not
  // against every sibling (a server may hold thousands, one per request).
  // A std::unordered_set, not absl's: short of host memory, Debian's Abseil
  // (20220623) freed a static sentinel in raw_hash_set::reserve (a crash in
  // LogDeferralHostMemoryTest); the standard container's insert keeps its
  // strong guarantee.
  std::unordered_set<std::string> open_child_names;
};

}  // namespace internal
}  // namespace bfc

#endif  // BFC_CORE_INTERNAL_ACCOUNT_STATE_H_
