// File: bfc/account.h
// -----------------------------------------------------------------------------
//
// Accounts: named budgets in a tree over one Allocator (Arrow's allocator
// tree, the "accounts" seed). A root on an allocator, children per session,
// request or model ("root/session/step"), each with
//
//   * a limit on its subtree: what its own allocations and all of its
//     children's charges may add up to;
//   * a reservation taken from its parent (when it is created, or later by
//     Reserve): quota only
//     (never rounded up, no memory set aside), inside which its charges stay
//     local and never touch the parent;
//   * stats: bytes in use (charged), peak, allocations, frees, failures,
//     limit, reservation, headroom.
//
// Every allocation charges RoundedBytes(n) (independent of where it lands)
// to its account and, above the account's reservation, to each ancestor in
// turn. Charges and credits run under the allocator's mutex (which every
// allocation takes anyway), each level updated by a compare-and-swap: there
// is no spurious failure near a limit and no overshoot, exactly as if the
// charges ran one at a time; stats read lock-free. A charge that passes a
// limit fails with ResourceExhausted naming the account path, its limit, its
// use and its largest children -- distinct from the allocator running out
// of memory. The allocator's chunk records its account (a column of the
// chunk table, indexed by handle: no map), so any free -- through the
// account, a Buffer or Allocator::DeallocateRaw -- credits it in O(1).
//
// Close() refuses while children are open, never frees anything, and lists
// what leaked (pointer, size, requested size, id, age in allocations, and
// the allocation site when the allocator records sites). Frees that arrive
// after Close() still credit the parent chain: account state lives as long as
// something is charged to it.
//
// Buffer is a move-only owner of one allocation (freed on destruction);
// Buffer::Share makes it reference counted, and TransferOwnership moves its
// charge to another account, as Arrow's ledgers do.
//
// Thread safety: every member function may be called from any thread. The
// allocator must outlive its accounts and buffers.
#ifndef BFC_ACCOUNT_H_
#define BFC_ACCOUNT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/allocator.h"
#include "bfc/internal/constants.h"
#include "bfc/memory_dump.h"

namespace bfc {

namespace internal {
struct AccountState;
}  // namespace internal

class Account;

inline constexpr int64_t kNoAccountLimit = std::numeric_limits<int64_t>::max();

struct AccountOptions {
  // One path component: non-empty, no '/'. Unique among its siblings.
  std::string name;
  // Cap on the subtree's charges (own allocations, children's charges and
  // reservations). kNoAccountLimit: none (the parent's still applies).
  int64_t limit_bytes = kNoAccountLimit;
  // Quota taken from the parent at creation (charged to it like an
  // allocation; creation fails if the parent cannot give it). Charges up to
  // it stay in this account. Never rounded. A root's reservation must be 0.
  int64_t reservation_bytes = 0;
  // Called, with no lock held, when an allocation made through this
  // account (Account::Allocate, Buffer) would pass a limit: the account
  // whose charge failed and the bytes asked. It may free memory; returning
  // true retries the allocation once. If it throws, the exception is logged
  // and the allocation refused, as when it returns false. Not called for an
  // allocation the allocator makes with AllocationAttributes::account: that
  // call returns the refusal at once (the callback may take locks its caller
  // holds).
  std::function<bool(const Account& account, size_t bytes)> on_limit_exceeded;
};

struct AccountStats {
  int64_t bytes_in_use = 0;  // charged to the subtree (see above)
  int64_t own_bytes = 0;     // charged by this account's own allocations
  int64_t peak_bytes_in_use = 0;
  int64_t allocations = 0;  // own, since creation
  int64_t frees = 0;        // own, since creation (late ones included)
  // Own allocations refused by a limit, once per call (a retry after
  // on_limit_exceeded, or a limit refusing while the call waited for memory,
  // is the same allocation).
  int64_t failures = 0;
  int64_t live_allocations = 0;
  int64_t limit_bytes = kNoAccountLimit;
  int64_t reservation_bytes = 0;
  // What one more allocation could charge right now without passing this
  // account's limit or any ancestor's.
  int64_t headroom_bytes = 0;
};

// An allocation Close() found still charged to the account.
struct LeakedAllocation {
  OutstandingAllocation allocation;  // address, size, requested, id, site
  // Allocations made (by anyone, on this allocator) since this one.
  int64_t age_in_allocations = 0;
};

class Account : public std::enable_shared_from_this<Account> {
 public:
  // A root over `allocator` (not owned; it must outlive the account).
  static absl::StatusOr<std::shared_ptr<Account>> CreateRoot(
      Allocator* allocator, AccountOptions options);
  // A child: its path is this account's path + "/" + options.name. Fails
  // (nothing created) when this account is closed, the name is empty, has a
  // '/', or is taken by an open sibling, or the reservation cannot be
  // charged here (ResourceExhausted) or is negative or above the child's own
  // limit (InvalidArgument).
  absl::StatusOr<std::shared_ptr<Account>> CreateChild(AccountOptions options);

  // Not copyable; closes itself on destruction (logging what leaked).
  Account(const Account&) = delete;
  Account& operator=(const Account&) = delete;
  ~Account();

  // The allocator's Allocate, charged to this account. ResourceExhausted
  // naming the account when a limit refuses it (after the callback's one
  // retry), the allocator's own error otherwise; FailedPrecondition once
  // closed.
  absl::StatusOr<void*> Allocate(
      size_t num_bytes, size_t alignment = kMinAllocationSize,
      const AllocationAttributes& attr = AllocationAttributes());
  // Frees `ptr` (any allocation of this allocator; its own account is
  // credited, whichever it is). InvalidArgument for a pointer not in use.
  absl::Status Deallocate(void* ptr);
  // Moves the charge of `ptr` from its account to `to` (on the same
  // allocator), as one change: ResourceExhausted, changing nothing, if some
  // limit on `to`'s path would be passed with the charge moved. An ancestor
  // of both counts the bytes once, so its use changes only where a
  // reservation on the way absorbs them on one side and not the other (a
  // move out of a reservation into an account without one raises it); only
  // then can it refuse a move inside its subtree.
  absl::Status TransferOwnership(void* ptr, Account& to);

  // Sets this account's reservation (AccountOptions::reservation_bytes) to
  // `bytes`, as one change: what the parent holds for it goes from
  // max(use, old reservation) to max(use, bytes), the rise charged to the
  // parent's path (ResourceExhausted naming the account and the limit,
  // nothing changed, when a limit on the way refuses it), the fall given
  // back. InvalidArgument when `bytes` is negative or above this account's
  // limit; FailedPrecondition once closed, and for a root (no parent to take
  // a reservation from; Reserve(0) is then OK).
  absl::Status Reserve(int64_t bytes);

  AccountStats GetStats() const;
  // peak_bytes_in_use = bytes_in_use.
  void ResetPeak();
  // FailedPrecondition while children are open or an allocation charged here
  // is in progress (another thread's, waiting for memory); otherwise closes
  // (idempotent) and returns FailedPrecondition listing the leaks if any
  // allocation is still charged here, else OK. Leaks are never freed.
  absl::Status Close();
  bool closed() const;
  // Allocations still charged to this account.
  std::vector<LeakedAllocation> Leaks() const;

  const std::string& path() const;
  const std::string& name() const;
  Allocator* allocator() const { return allocator_; }
  // "root/session: 12.0MiB in use (peak 20.0MiB) of limit 1.0GiB, ..." and,
  // with `children`, one line per open descendant, indented.
  std::string DebugString(bool children = true) const;

 private:
  friend class Allocator;
  struct PrivateTag {};

 public:
  // Use CreateRoot / CreateChild.
  Account(PrivateTag, Allocator* allocator,
          std::shared_ptr<internal::AccountState> state,
          std::shared_ptr<Account> parent, AccountOptions options);

 private:
  absl::Status CloseImpl(bool from_destructor);
  // CreateRoot and CreateChild inside the library's noexcept boundary: they
  // may throw std::bad_alloc, having changed nothing.
  static absl::StatusOr<std::shared_ptr<Account>> CreateRootImpl(
      Allocator* allocator, AccountOptions options);
  absl::StatusOr<std::shared_ptr<Account>> CreateChildImpl(
      AccountOptions options);

  Allocator* const allocator_;
  const std::shared_ptr<internal::AccountState> state_;
  // Keeps the parent open-able and alive while a child exists.
  const std::shared_ptr<Account> parent_;
  const AccountOptions options_;
};

// One allocation owned by one holder: freed when the Buffer goes (or on
// Reset). Move-only; Share() makes a reference-counted one.
class Buffer {
 public:
  Buffer() = default;
  // Allocates `num_bytes` charged to `account`.
  static absl::StatusOr<Buffer> Allocate(
      const std::shared_ptr<Account>& account, size_t num_bytes,
      size_t alignment = kMinAllocationSize);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return ptr_; }
  size_t size() const { return size_; }
  // The account charged now (TransferOwnership changes it).
  const std::shared_ptr<Account>& account() const { return account_; }
  explicit operator bool() const { return ptr_ != nullptr; }

  // Frees now (a no-op when empty).
  void Reset();
  // Gives the allocation up without freeing it: the caller now owns it (and
  // frees it through the allocator).
  void* Release();
  // Reference-counted sharing: the allocation is freed when the last copy
  // goes.
  static std::shared_ptr<const Buffer> Share(Buffer&& buffer);

 private:
  friend absl::Status TransferOwnership(Buffer& buffer,
                                        const std::shared_ptr<Account>& to);
  Buffer(void* ptr, size_t size, std::shared_ptr<Account> account)
      : ptr_(ptr), size_(size), account_(std::move(account)) {}

  void* ptr_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<Account> account_;
};

// Moves `buffer`'s charge to `to` (Account::TransferOwnership); on success
// the buffer's account() is `to`.
absl::Status TransferOwnership(Buffer& buffer,
                               const std::shared_ptr<Account>& to);

}  // namespace bfc

#endif  // BFC_ACCOUNT_H_
