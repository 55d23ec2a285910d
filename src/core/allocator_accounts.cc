// File: src/core/allocator_accounts.cc
// -----------------------------------------------------------------------------
//
// The Allocator's side of accounts (bfc/account.h): charging up the tree,
// crediting on free through the chunk's tag, and the checks Validate runs.
// Every function here runs under the allocator's mutex, so charges are
// serial: a charge checks every level before it changes any (no undo, no
// transient overshoot that could refuse a concurrent charge; the
// compare-and-swap loop a lock-free charge would need is not needed), and
// the atomics only let readers see the counters without the lock.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/internal/bin.h"
#include "bfc/internal/str_format.h"
#include "bfc/units.h"
#include "core/internal/account_state.h"
#include "core/internal/allocator_accounts_inl.h"

namespace bfc {
namespace {

using internal::AccountState;
using internal::kInvalidChunkHandle;
using internal::RoundedBytes;

using internal::AddRelaxed;

std::string Bytes(int64_t n) {
  return HumanReadableBytes(static_cast<uint64_t>(std::max<int64_t>(n, 0)));
}

}  // namespace

// The payload that marks a refusal by an account limit (Account::Allocate
// retries once through the callback on it).
extern const char kAccountLimitPayload[];
const char kAccountLimitPayload[] = "bfc.account_limit";

void Allocator::ReserveAccountLocked(const AccountState& st) {
  // Tags are kept for every handle the chunk table can hold, and grow with
  // it (GrowColumns): tagging a chunk in the middle of an allocation never
  // allocates.
  if (chunk_account_.size() < chunks_.handle_bound()) {
    chunk_account_.resize(chunks_.handle_bound(), 0);
  }
  // Id 0 (no account) and this one's.
  accounts_.reserve(std::max<size_t>(accounts_.size() + 1, 2));
  if (st.parent != nullptr) {
    st.parent->children.reserve(st.parent->children.size() + 1);
  }
}

void Allocator::RegisterAccountLocked(const std::shared_ptr<AccountState>& st) {
  // Throws std::bad_alloc (from ReserveAccountLocked) before anything
  // changed; nothing below allocates once it returned.
  ReserveAccountLocked(*st);
  if (accounts_.empty()) accounts_.emplace_back();  // id 0: no account
  uint32_t id;
  if (!free_account_ids_.empty()) {
    id = free_account_ids_.back();
    free_account_ids_.pop_back();
    accounts_[id] = st;
  } else {
    id = static_cast<uint32_t>(accounts_.size());
    accounts_.push_back(st);
  }
  st->id = id;
  if (st->parent != nullptr) {
    st->index_in_parent = st->parent->children.size();
    st->parent->children.push_back(st.get());
  }
  accounts_on_ = true;
}

absl::Status Allocator::AccountChargeFailureLocked(AccountState* st,
                                                   size_t rounded) {
  if (st->allocator != this) {
    return absl::InvalidArgumentError(internal::Format(
        "Allocator '%s': account '%s' belongs to another allocator", name_,
        st->path));
  }
  if (st->closed) {
    return absl::FailedPreconditionError(
        internal::Format("account '%s' is closed", st->path));
  }
  if (rounded > static_cast<size_t>(kNoAccountLimit)) {
    // More than any account can hold (a use above kNoAccountLimit cannot
    // be counted): refused as past the limit, never cast negative.
    absl::Status s = absl::ResourceExhaustedError(internal::Format(
        "account '%s': charging %d bytes would pass the limit of account "
        "'%s': no account can hold more than %d bytes",
        st->path, rounded, st->path, kNoAccountLimit));
    s.SetPayload(kAccountLimitPayload, absl::Cord(st->path));
    return s;
  }
  return AccountRefusalLocked(st, static_cast<int64_t>(rounded));
}

absl::Status Allocator::CloseAccountLocked(AccountState* st) {
  AccountState& s = *st;
  if (s.closed) return absl::OkStatus();  // idempotent
  std::vector<std::string> open;
  for (const AccountState* c : s.children) {
    if (!c->closed) open.push_back(c->path);
  }
  if (!open.empty()) {
    return absl::FailedPreconditionError(
        internal::Format("account '%s' cannot close: %d children are open (%s)",
                         s.path, open.size(), absl::StrJoin(open, ", ")));
  }
  // An allocation charged here and still in flight (waiting for another
  // thread's free to retry) would otherwise complete on a closed account
  // after Close() said nothing was charged.
  if (s.in_flight != 0) {
    return absl::FailedPreconditionError(internal::Format(
        "account '%s' cannot close: %d allocation(s) charged to it are in "
        "progress (waiting for memory); close it once they return",
        s.path, s.in_flight));
  }
  s.closed = true;
  if (s.parent != nullptr) s.parent->open_child_names.erase(s.name);
  // The reservation goes back to the parent; what is still charged here
  // (leaks) stays charged up the chain until it is freed.
  const int64_t reservation = s.reservation.exchange(0);
  const int64_t used = s.used.load();
  if (s.parent != nullptr && reservation > used) {
    CreditAccountLocked(s.parent.get(), reservation - used);
  }
  MaybeValidate("Account::Close");
  return absl::OkStatus();
}

absl::Status Allocator::ChargeAccountLocked(AccountState* st, int64_t bytes) {
  if (TryChargeAccountLocked(st, bytes)) return absl::OkStatus();
  return AccountRefusalLocked(st, bytes);
}

absl::Status Allocator::AccountRefusalLocked(const AccountState* st,
                                             int64_t bytes) const {
  const AccountState* a = internal::RefusingLevel(st, bytes);
  if (a == nullptr) {
    return absl::InternalError("account charge refused by no limit");
  }
  const int64_t used = a->used.load(std::memory_order_relaxed);
  std::string children;
  std::vector<std::pair<int64_t, const AccountState*>> kids;
  for (const AccountState* c : a->children) {
    kids.emplace_back(std::max(c->used.load(), c->reservation.load()), c);
  }
  std::sort(kids.begin(), kids.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  for (size_t i = 0; i < kids.size() && i < 3; ++i) {
    absl::StrAppend(&children, i == 0 ? "; largest children: " : ", ", "'",
                    kids[i].second->path, "' ", Bytes(kids[i].first));
  }
  absl::Status s = absl::ResourceExhaustedError(internal::Format(
      "account '%s': charging %s (%d bytes) would pass the limit of "
      "account '%s': %s in use of %s (own allocations %s)%s",
      st->path, Bytes(bytes), bytes, a->path, Bytes(used), Bytes(a->limit),
      Bytes(a->own.load()), children));
  s.SetPayload(kAccountLimitPayload, absl::Cord(a->path));
  return s;
}

void Allocator::MaybeForgetAccountLocked(AccountState* st) {
  // A closed account goes once nothing is charged to it; its parent may
  // then go too (a closed parent kept alive by this child's leaks).
  while (st != nullptr && st->closed && st->handle == nullptr &&
         st->used.load(std::memory_order_relaxed) == 0 &&
         st->children.empty() && st->id != 0) {
    AccountState* parent = st->parent.get();
    if (parent != nullptr) {
      // O(1): the last child takes this one's place.
      std::vector<AccountState*>& kids = parent->children;
      AccountState* last = kids.back();
      kids[st->index_in_parent] = last;
      last->index_in_parent = st->index_in_parent;
      kids.pop_back();
    }
    const uint32_t id = st->id;
    st->id = 0;
    free_account_ids_.push_back(id);
    // Last: this may destroy `st` (the parent stays: `parent` is held by
    // other states or handles, or checked next).
    std::shared_ptr<AccountState> keep = std::move(accounts_[id]);
    st = parent;
  }
}

std::vector<LeakedAllocation> Allocator::ChargedAllocations(
    const AccountState* st) const {
  std::vector<LeakedAllocation> out;
  std::vector<RawStack> raw;
  {
    Lock lock(this);
    for (ChunkHandle h = 0; h < chunk_account_.size(); ++h) {
      if (ChunkAccountLocked(h) != st) continue;
      const internal::Chunk& c = chunks_[h];
      LeakedAllocation l;
      l.allocation = {c.addr(), c.size, c.requested_size, c.allocation_id, {}};
      l.age_in_allocations = next_allocation_id_ - 1 - c.allocation_id;
      out.push_back(std::move(l));
      auto it = sites_.find(c.allocation_id);
      raw.push_back(it != sites_.end() ? it->second : RawStack());
    }
  }
  // Symbolizing reads ELF files: without the lock.
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].allocation.site = SymbolizeSite(raw[i].frames, raw[i].depth);
  }
  std::sort(out.begin(), out.end(),
            [](const LeakedAllocation& x, const LeakedAllocation& y) {
              return x.allocation.allocation_id < y.allocation.allocation_id;
            });
  return out;
}

absl::Status Allocator::ValidateAccountsLocked() const {
  auto fail = [&](auto&&... parts) {
    return absl::InternalError(
        absl::StrCat("Allocator '", name_, "' accounts: ", parts...));
  };
  std::vector<int64_t> own(accounts_.size(), 0), live(accounts_.size(), 0);
  // The column is sized ahead of the table (GrowColumns); no handle past
  // the slots ever created can have been tagged.
  const size_t tagged_bound =
      std::min<size_t>(chunk_account_.size(), chunks_.capacity());
  for (ChunkHandle h = 0; h < tagged_bound; ++h) {
    const uint32_t id = chunk_account_[h];
    if (id == 0) continue;
    if (id >= accounts_.size() || accounts_[id] == nullptr) {
      return fail("chunk ", h, " is tagged with unknown account ", id);
    }
    if (h >= chunks_.capacity() || !chunks_[h].in_use()) {
      return fail("chunk ", h, " is tagged with account '", accounts_[id]->path,
                  "' but is not in use");
    }
    own[id] += static_cast<int64_t>(RoundedBytes(chunks_[h].requested_size));
    ++live[id];
  }
  size_t listed_children = 0, with_parent = 0;
  for (size_t id = 1; id < accounts_.size(); ++id) {
    const AccountState* a = accounts_[id].get();
    if (a == nullptr) continue;
    if (a->id != id) return fail("account '", a->path, "' has id ", a->id);
    if (a->own.load() != own[id] || a->live.load() != live[id]) {
      return fail("account '", a->path, "' counts ", a->own.load(),
                  " bytes in ", a->live.load(),
                  " allocations; its tagged chunks hold ", own[id], " in ",
                  live[id]);
    }
    const int64_t pending_bytes = a->pending;
    if (pending_bytes < 0) {
      return fail("account '", a->path, "' has ", pending_bytes,
                  " bytes of allocations in progress");
    }
    int64_t expected = own[id] + pending_bytes;
    size_t open_children = 0;
    for (size_t k = 0; k < a->children.size(); ++k) {
      const AccountState* c = a->children[k];
      if (c->parent.get() != a || c->index_in_parent != k) {
        return fail("account '", c->path, "' is listed under '", a->path,
                    "' at ", k, " but is not its child there");
      }
      if (!c->closed) {
        ++open_children;
        if (a->open_child_names.count(c->name) == 0) {
          return fail("account '", c->path,
                      "' is open but its name is not "
                      "taken under '",
                      a->path, "'");
        }
      }
      expected += std::max(c->used.load(), c->reservation.load());
    }
    if (a->open_child_names.size() != open_children) {
      return fail("account '", a->path, "' has ", open_children,
                  " open children but ", a->open_child_names.size(),
                  " names taken");
    }
    if (a->used.load() != expected) {
      return fail("account '", a->path, "' has ", a->used.load(),
                  " bytes in use; its allocations (", own[id],
                  "), allocations in progress (", pending_bytes,
                  ") and children add up to ", expected);
    }
    if (a->used.load() > a->limit) {
      return fail("account '", a->path, "' is over its limit: ", a->used.load(),
                  " > ", a->limit);
    }
    if (a->peak.load() < a->used.load()) {
      return fail("account '", a->path, "' has a peak of ", a->peak.load(),
                  " bytes, below its ", a->used.load(), " bytes in use");
    }
    // Close gives the reservation back; one kept would stay charged to the
    // parent (max(use, reservation)) for memory nothing can use.
    if (a->closed && a->reservation.load() != 0) {
      return fail("account '", a->path, "' is closed but still reserves ",
                  a->reservation.load(), " bytes of its parent");
    }
    // From the child's side (the loop above checks the parent's): a child
    // missing from its parent's list would be left out of the parent's use.
    if (a->parent != nullptr) {
      const std::vector<AccountState*>& kids = a->parent->children;
      if (a->index_in_parent >= kids.size() || kids[a->index_in_parent] != a) {
        return fail("account '", a->path, "' is not listed under its parent '",
                    a->parent->path, "'");
      }
      ++with_parent;
    }
    listed_children += a->children.size();
  }
  // Every registered account with a parent is listed there (above), so
  // equal counts mean the lists hold nothing else: no forgotten account,
  // whose state may be gone, is still listed (checked without reading the
  // listed pointers, which may dangle).
  if (listed_children != with_parent) {
    return fail("the accounts list ", listed_children, " children, but ",
                with_parent, " registered accounts have a parent");
  }
  // The free ids are exactly the unused ones, each once: a listed id still
  // in use would give two accounts one tag.
  std::vector<bool> free_id(accounts_.size(), false);
  for (const uint32_t id : free_account_ids_) {
    if (id == 0 || id >= accounts_.size() || accounts_[id] != nullptr ||
        free_id[id]) {
      return fail("free account id ", id,
                  " is out of range, in use or listed twice");
    }
    free_id[id] = true;
  }
  for (size_t id = 1; id < accounts_.size(); ++id) {
    if (accounts_[id] == nullptr && !free_id[id]) {
      return fail("account id ", id, " is unused but not on the free list");
    }
  }
  return absl::OkStatus();
}

}  // namespace bfc
