// File: src/core/account.cc
// -----------------------------------------------------------------------------
//
// Accounts and buffers (bfc/account.h). Lifecycle changes (create, close)
// and charges run under the allocator's mutex; stats read the counters
// without it.
#include "bfc/account.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bfc/internal/bin.h"
#include "bfc/internal/str_format.h"
#include "bfc/log.h"
#include "bfc/units.h"
#include "core/internal/account_state.h"
#include "core/internal/allocator_accounts_inl.h"
#include "core/internal/user_code.h"

namespace bfc {

extern const char kAccountLimitPayload[];

namespace {

using internal::AccountState;

std::string Bytes(int64_t n) {
  return HumanReadableBytes(static_cast<uint64_t>(std::max<int64_t>(n, 0)));
}

std::string Limit(int64_t n) {
  return n == kNoAccountLimit ? std::string("none") : Bytes(n);
}

absl::Status CheckOptions(const AccountOptions& o) {
  if (o.name.empty() || o.name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(internal::Format(
        "account name \"%s\" must be non-empty and have no '/'", o.name));
  }
  if (o.limit_bytes < 0) {
    return absl::InvalidArgumentError(internal::Format(
        "account '%s': limit_bytes %d is negative", o.name, o.limit_bytes));
  }
  if (o.reservation_bytes < 0 || o.reservation_bytes > o.limit_bytes) {
    return absl::InvalidArgumentError(internal::Format(
        "account '%s': reservation_bytes %d must be in [0, limit_bytes %d]",
        o.name, o.reservation_bytes, o.limit_bytes));
  }
  return absl::OkStatus();
}

bool IsLimitRefusal(const absl::Status& s) {
  return s.code() == absl::StatusCode::kResourceExhausted &&
         s.GetPayload(kAccountLimitPayload).has_value();
}

}  // namespace

Account::Account(PrivateTag, Allocator* allocator,
                 std::shared_ptr<AccountState> state,
                 std::shared_ptr<Account> parent, AccountOptions options)
    : allocator_(allocator),
      state_(std::move(state)),
      parent_(std::move(parent)),
      options_(std::move(options)) {}

namespace {

// A failure for a host out of memory, built without throwing: the message
// needs memory too.
absl::Status NoHostMemory(const char* what) noexcept {
  try {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": the host has no memory for the account"));
  } catch (...) {
    return absl::Status(absl::StatusCode::kResourceExhausted, "");
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<Account>> Account::CreateRoot(
    Allocator* allocator, AccountOptions options) {
  // The library's noexcept boundary: short of host memory anywhere in it,
  // the call fails whole (CreateRootImpl changes nothing until it cannot
  // fail).
  try {
    return CreateRootImpl(allocator, std::move(options));
  } catch (...) {
    return NoHostMemory("Account::CreateRoot");
  }
}

absl::StatusOr<std::shared_ptr<Account>> Account::CreateChild(
    AccountOptions options) {
  try {
    return CreateChildImpl(std::move(options));
  } catch (...) {
    return NoHostMemory("Account::CreateChild");
  }
}

absl::StatusOr<std::shared_ptr<Account>> Account::CreateRootImpl(
    Allocator* allocator, AccountOptions options) {
  if (allocator == nullptr) {
    return absl::InvalidArgumentError("Account::CreateRoot: no allocator");
  }
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (options.reservation_bytes != 0) {
    return absl::InvalidArgumentError(internal::Format(
        "root account '%s': a root has no parent to reserve from "
        "(reservation_bytes %d)",
        options.name, options.reservation_bytes));
  }
  auto st = std::make_shared<AccountState>();
  st->allocator = allocator;
  st->name = options.name;
  st->path = options.name;
  st->limit = options.limit_bytes;
  // Declared before the lock: an account that exists is destroyed (its
  // destructor takes the lock) only after the lock is released.
  std::shared_ptr<Account> account;
  Allocator::Lock lock(allocator);
  // Everything that needs host memory before anything changes: short of
  // it, the call fails whole (no exception leaves the library).
  try {
    allocator->ReserveAccountLocked(*st);
    account = std::make_shared<Account>(PrivateTag(), allocator, st, nullptr,
                                        std::move(options));
  } catch (...) {
    return NoHostMemory("Account::CreateRoot");
  }
  allocator->RegisterAccountLocked(st);
  st->handle = account.get();
  return account;
}

absl::StatusOr<std::shared_ptr<Account>> Account::CreateChildImpl(
    AccountOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  auto st = std::make_shared<AccountState>();
  st->allocator = allocator_;
  st->name = options.name;
  st->path = absl::StrCat(state_->path, "/", options.name);
  st->limit = options.limit_bytes;
  st->parent = state_;
  // Declared before the lock: an account that exists is destroyed (its
  // destructor takes the lock) only after the lock is released.
  std::shared_ptr<Account> account;
  Allocator::Lock lock(allocator_);
  if (state_->closed) {
    return absl::FailedPreconditionError(internal::Format(
        "account '%s' is closed: no new children", state_->path));
  }
  if (state_->open_child_names.count(options.name) != 0) {
    return absl::AlreadyExistsError(
        internal::Format("account '%s' already exists", st->path));
  }
  if (options.reservation_bytes > 0) {
    absl::Status s = allocator_->ChargeAccountLocked(state_.get(),
                                                     options.reservation_bytes);
    if (!s.ok()) {
      return absl::ResourceExhaustedError(
          internal::Format("account '%s': cannot reserve %s: %s", st->path,
                           Bytes(options.reservation_bytes), s.message()));
    }
    st->reservation.store(options.reservation_bytes);
  }
  // Everything that needs host memory before the account is listed: short
  // of it, the reservation goes back and the call fails whole (no exception
  // leaves the library, and no half-listed account stays).
  try {
    allocator_->ReserveAccountLocked(*st);
    state_->open_child_names.insert(st->name);  // strong guarantee
    try {
      account = std::make_shared<Account>(
          PrivateTag(), allocator_, st, shared_from_this(), std::move(options));
    } catch (...) {
      state_->open_child_names.erase(st->name);
      throw;
    }
  } catch (...) {
    const int64_t reserved = st->reservation.load();
    if (reserved > 0) allocator_->CreditAccountLocked(state_.get(), reserved);
    return NoHostMemory("Account::CreateChild");
  }
  allocator_->RegisterAccountLocked(st);
  st->handle = account.get();
  return account;
}

Account::~Account() {
  (void)CloseImpl(/*from_destructor=*/true);
  Allocator::Lock lock(allocator_);
  state_->handle = nullptr;
  // A call in flight refused the close above; if it returned since, the
  // close is made here, else that call makes it when it returns.
  if (!state_->closed && state_->in_flight == 0) {
    (void)allocator_->CloseAccountLocked(state_.get());
  }
  allocator_->MaybeForgetAccountLocked(state_.get());
}

absl::StatusOr<void*> Account::Allocate(size_t num_bytes, size_t alignment,
                                        const AllocationAttributes& attr) {
  // A plain request the pool can serve: one lock, no Status built.
  if (Allocator::FastPathAttributes(attr)) {
    if (void* p = allocator_->AllocateChargedFast(alignment, num_bytes,
                                                  state_.get())) {
      return p;
    }
  }
  AllocationAttributes charged = attr;
  charged.account = this;
  absl::StatusOr<void*> p = allocator_->Allocate(num_bytes, alignment, charged);
  if (p.ok() || !IsLimitRefusal(p.status()) || !options_.on_limit_exceeded) {
    return p;
  }
  // No lock is held here: the callback may free (or allocate) anything.
  // What it throws stays here (the library's noexcept boundary): the
  // refusal stands, as when it returns false.
  bool retry = false;
  std::string what;
  if (!internal::CallUserCode(
          [&] { retry = options_.on_limit_exceeded(*this, num_bytes); },
          &what)) {
    Log(LogSeverity::kError,
        absl::StrCat("Account '", path(), "': on_limit_exceeded threw (", what,
                     "); the allocation of ", num_bytes, " bytes is refused"));
    return p;
  }
  if (!retry) return p;
  // The retry is the same allocation: it counts its own outcome, and the
  // refusal it follows is not counted twice (a review).
  state_->failures.fetch_sub(1, std::memory_order_relaxed);
  return allocator_->Allocate(num_bytes, alignment, charged);
}

absl::Status Account::Deallocate(void* ptr) {
  return allocator_->Deallocate(ptr);
}

absl::Status Account::TransferOwnership(void* ptr, Account& to) {
  if (to.allocator_ != allocator_) {
    return absl::InvalidArgumentError(internal::Format(
        "TransferOwnership from '%s' to '%s': the accounts are on different "
        "allocators",
        path(), to.path()));
  }
  Allocator::Lock lock(allocator_);
  return allocator_->TransferChunkLocked(ptr, state_.get(), to.state_.get());
}

absl::Status Account::Reserve(int64_t bytes) {
  Allocator::Lock lock(allocator_);
  AccountState& s = *state_;
  if (s.closed) {
    return absl::FailedPreconditionError(internal::Format(
        "account '%s' is closed: its reservation cannot change", s.path));
  }
  if (s.parent == nullptr) {
    if (bytes == 0) return absl::OkStatus();
    return absl::FailedPreconditionError(internal::Format(
        "account '%s' is a root: it has no parent to reserve %d bytes from",
        s.path, bytes));
  }
  if (bytes < 0 || bytes > s.limit) {
    return absl::InvalidArgumentError(internal::Format(
        "account '%s': reservation %d must be in [0, limit_bytes %d]", s.path,
        bytes, s.limit));
  }
  // What the parent's path holds for this account: max(use, reservation).
  const int64_t used = s.used.load();
  const int64_t before = std::max(used, s.reservation.load());
  const int64_t after = std::max(used, bytes);
  if (after > before) {
    absl::Status charged =
        allocator_->ChargeAccountLocked(s.parent.get(), after - before);
    if (!charged.ok()) {
      return absl::ResourceExhaustedError(
          internal::Format("account '%s': cannot reserve %s: %s", s.path,
                           Bytes(bytes), charged.message()));
    }
  } else if (after < before) {
    allocator_->CreditAccountLocked(s.parent.get(), before - after);
  }
  s.reservation.store(bytes);
  allocator_->MaybeValidate("Account::Reserve");
  return absl::OkStatus();
}

AccountStats Account::GetStats() const {
  const AccountState& s = *state_;
  AccountStats out;
  out.bytes_in_use = s.used.load(std::memory_order_relaxed);
  out.own_bytes = s.own.load(std::memory_order_relaxed);
  out.peak_bytes_in_use = s.peak.load(std::memory_order_relaxed);
  out.allocations = s.allocations.load(std::memory_order_relaxed);
  out.frees = s.frees.load(std::memory_order_relaxed);
  out.failures = s.failures.load(std::memory_order_relaxed);
  out.live_allocations = s.live.load(std::memory_order_relaxed);
  out.limit_bytes = s.limit;
  out.reservation_bytes = s.reservation.load(std::memory_order_relaxed);
  // What a charge of n here could add, H(a) = min(limit - used, slack +
  // H(parent)) with slack = what is left of a's reservation: computed from
  // the root down, saturating at kNoAccountLimit.
  std::vector<const AccountState*> chain;
  for (const AccountState* a = &s; a != nullptr; a = a->parent.get()) {
    chain.push_back(a);
  }
  int64_t headroom = kNoAccountLimit;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const AccountState* a = *it;
    const int64_t used = a->used.load(std::memory_order_relaxed);
    const int64_t room = a->limit == kNoAccountLimit
                             ? kNoAccountLimit
                             : std::max<int64_t>(a->limit - used, 0);
    const int64_t slack = std::max<int64_t>(
        a->reservation.load(std::memory_order_relaxed) - used, 0);
    const int64_t via_parent =
        headroom > kNoAccountLimit - slack ? kNoAccountLimit : slack + headroom;
    headroom = std::min(room, via_parent);
  }
  out.headroom_bytes = headroom;
  return out;
}

void Account::ResetPeak() {
  Allocator::Lock lock(allocator_);
  state_->peak.store(state_->used.load());
}

bool Account::closed() const {
  Allocator::Lock lock(allocator_);
  return state_->closed;
}

const std::string& Account::path() const { return state_->path; }
const std::string& Account::name() const { return state_->name; }

std::vector<LeakedAllocation> Account::Leaks() const {
  return allocator_->ChargedAllocations(state_.get());
}

absl::Status Account::Close() { return CloseImpl(/*from_destructor=*/false); }

absl::Status Account::CloseImpl(bool from_destructor) {
  {
    Allocator::Lock lock(allocator_);
    absl::Status closed = allocator_->CloseAccountLocked(state_.get());
    // Refused while the handle is going because a call charged here is in
    // progress: that call finishes the close when it returns (a review: the
    // account stayed open for good, its parent could never close and its
    // name stayed taken). See ~Account and Allocator::AllocateOrFail.
    if (!closed.ok()) return closed;
  }
  // Nothing charged here, nothing to list: a clean close (the common case,
  // one per request in a server) does not walk every chunk.
  if (state_->live.load(std::memory_order_relaxed) == 0) {
    return absl::OkStatus();
  }
  std::vector<LeakedAllocation> leaks = Leaks();
  if (leaks.empty()) return absl::OkStatus();
  int64_t bytes = 0;
  for (const LeakedAllocation& l : leaks) {
    bytes += static_cast<int64_t>(l.allocation.size);
  }
  std::string report = internal::Format(
      "account '%s' closed with %d allocation(s) still charged to it (%s); "
      "they are not freed:",
      path(), leaks.size(), Bytes(bytes));
  // Grouped by site when sites were recorded (the same line of code leaking
  // in a loop is one entry), else one line each; at most 20 lines.
  std::vector<std::pair<std::string, std::vector<const LeakedAllocation*>>>
      groups;
  std::unordered_map<std::string, size_t> group_of;  // site -> index
  for (const LeakedAllocation& l : leaks) {
    // The site is the innermost caller outside the library (frames beyond
    // it depend on how the caller's callers were compiled).
    const std::string key =
        l.allocation.site.empty() ? std::string() : l.allocation.site.front();
    if (key.empty()) {
      groups.push_back({key, {&l}});
      continue;
    }
    auto [it, added] = group_of.try_emplace(key, groups.size());
    if (added) {
      groups.push_back({key, {&l}});
    } else {
      groups[it->second].second.push_back(&l);
    }
  }
  for (size_t i = 0; i < groups.size() && i < 20; ++i) {
    const LeakedAllocation& l = *groups[i].second.front();
    internal::AppendFormat(
        &report, "\n  %#x: %d bytes (asked %d), id %d, %d allocations ago",
        l.allocation.address, l.allocation.size, l.allocation.requested_size,
        l.allocation.allocation_id, l.age_in_allocations);
    if (groups[i].second.size() > 1) {
      internal::AppendFormat(&report, " (and %d more from this site)",
                             groups[i].second.size() - 1);
    }
    if (!groups[i].first.empty()) {
      absl::StrAppend(&report, "\n    at ", groups[i].first);
    }
  }
  if (groups.size() > 20) {
    internal::AppendFormat(&report, "\n  ... %d more", groups.size() - 20);
  }
  if (from_destructor) Log(LogSeverity::kWarning, report);
  return absl::FailedPreconditionError(report);
}

std::string Account::DebugString(bool children) const {
  const AccountStats st = GetStats();
  std::string out = internal::Format(
      "%s: %s in use (peak %s, own %s in %d allocations) of limit %s, "
      "reservation %s, headroom %s%s",
      path(), Bytes(st.bytes_in_use), Bytes(st.peak_bytes_in_use),
      Bytes(st.own_bytes), st.live_allocations, Limit(st.limit_bytes),
      Bytes(st.reservation_bytes), Limit(st.headroom_bytes),
      closed() ? " (closed)" : "");
  if (!children) return out;
  std::vector<std::pair<int, std::string>> lines;
  {
    Allocator::Lock lock(allocator_);
    std::vector<std::pair<int, const AccountState*>> stack;
    for (auto it = state_->children.rbegin(); it != state_->children.rend();
         ++it) {
      stack.emplace_back(1, *it);
    }
    while (!stack.empty()) {
      auto [depth, a] = stack.back();
      stack.pop_back();
      lines.emplace_back(
          depth, internal::Format("%s: %s in use of limit %s%s", a->path,
                                  Bytes(a->used.load()), Limit(a->limit),
                                  a->closed ? " (closed)" : ""));
      for (auto it = a->children.rbegin(); it != a->children.rend(); ++it) {
        stack.emplace_back(depth + 1, *it);
      }
    }
  }
  for (const auto& [depth, line] : lines) {
    absl::StrAppend(&out, "\n", std::string(2 * depth, ' '), line);
  }
  return out;
}

// --- Buffer
// --------------------------------------------------------------------

absl::StatusOr<Buffer> Buffer::Allocate(const std::shared_ptr<Account>& account,
                                        size_t num_bytes, size_t alignment) {
  if (account == nullptr) {
    return absl::InvalidArgumentError("Buffer::Allocate: no account");
  }
  absl::StatusOr<void*> p = account->Allocate(num_bytes, alignment);
  if (!p.ok()) return p.status();
  return Buffer(*p, num_bytes, account);
}

Buffer::Buffer(Buffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      account_(std::move(other.account_)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    account_ = std::move(other.account_);
  }
  return *this;
}

Buffer::~Buffer() { Reset(); }

void Buffer::Reset() {
  if (ptr_ == nullptr) return;
  // Its own account is credited by the free, whichever account it is now.
  absl::Status s = account_->allocator()->Deallocate(ptr_);
  if (!s.ok()) {
    Log(LogSeverity::kError, absl::StrCat("Buffer: ", s.message()));
  }
  ptr_ = nullptr;
  size_ = 0;
  account_.reset();
}

void* Buffer::Release() {
  account_.reset();
  size_ = 0;
  return std::exchange(ptr_, nullptr);
}

std::shared_ptr<const Buffer> Buffer::Share(Buffer&& buffer) {
  return std::make_shared<const Buffer>(std::move(buffer));
}

absl::Status TransferOwnership(Buffer& buffer,
                               const std::shared_ptr<Account>& to) {
  if (buffer.ptr_ == nullptr || to == nullptr) {
    return absl::InvalidArgumentError(
        "TransferOwnership: an empty buffer or no account");
  }
  absl::Status s = buffer.account_->TransferOwnership(buffer.ptr_, *to);
  if (s.ok()) buffer.account_ = to;
  return s;
}

}  // namespace bfc
