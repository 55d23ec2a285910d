// File: src/core/internal/allocator_accounts_inl.h
// -----------------------------------------------------------------------------
//
// The Allocator's account operations that run on every charged allocation
// and free (bfc/account.h), inline so that they cost a few stores: the
// charge up the tree, the tag on the chunk, the credit on free. Their cold
// companions (messages, validation, lifecycle) are in
// src/core/allocator_accounts.cc. Internal: not part of the API.
//
// All of it runs under the allocator's mutex: every counter is written only
// there, so a plain load and store (no locked read-modify-write) keeps it
// exact, and readers without the lock see whole values.
#ifndef BFC_CORE_INTERNAL_ALLOCATOR_ACCOUNTS_INL_H_
#define BFC_CORE_INTERNAL_ALLOCATOR_ACCOUNTS_INL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/internal/bin.h"
#include "core/internal/account_state.h"

namespace bfc {
namespace internal {

inline void AddRelaxed(std::atomic<int64_t>& counter, int64_t delta) {
  counter.store(counter.load(std::memory_order_relaxed) + delta,
                std::memory_order_relaxed);
}

// What a use of `used` puts on the parent: the part above the reservation.
inline int64_t AboveReservation(int64_t used, const AccountState& a) {
  const int64_t r = a.reservation.load(std::memory_order_relaxed);
  return used > r ? used - r : 0;
}

// The first level from `st` up whose limit a charge of `bytes` would pass
// (what each level adds is what the level below adds beyond its
// reservation), or nullptr when every level can take it. Changes nothing.
inline const AccountState* RefusingLevel(const AccountState* st,
                                         int64_t bytes) {
  int64_t amount = bytes;
  for (const AccountState* a = st; a != nullptr && amount > 0;
       a = a->parent.get()) {
    const int64_t used = a->used.load(std::memory_order_relaxed);
    if (amount > a->limit - used) return a;
    amount = AboveReservation(used + amount, *a) - AboveReservation(used, *a);
  }
  return nullptr;
}

}  // namespace internal

inline bool Allocator::TryChargeAccountLocked(internal::AccountState* st,
                                              int64_t bytes) {
  using internal::AboveReservation;
  // Every level is checked before any changes.
  if (internal::RefusingLevel(st, bytes) != nullptr) return false;
  ApplyChargeLocked(st, bytes);
  return true;
}

inline void Allocator::ApplyChargeLocked(internal::AccountState* st,
                                         int64_t bytes) {
  using internal::AboveReservation;
  int64_t amount = bytes;
  for (internal::AccountState* a = st; a != nullptr && amount > 0;
       a = a->parent.get()) {
    const int64_t used = a->used.load(std::memory_order_relaxed);
    const int64_t now = used + amount;
    a->used.store(now, std::memory_order_relaxed);
    if (now > a->peak.load(std::memory_order_relaxed)) {
      a->peak.store(now, std::memory_order_relaxed);
    }
    amount = AboveReservation(now, *a) - AboveReservation(used, *a);
  }
}

inline absl::Status Allocator::ChargeForAllocationLocked(
    internal::AccountState* st, size_t rounded) {
  if (ABSL_PREDICT_TRUE(st->allocator == this && !st->closed &&
                        rounded <= static_cast<size_t>(kNoAccountLimit)) &&
      TryChargeAccountLocked(st, static_cast<int64_t>(rounded))) {
    return absl::OkStatus();
  }
  return AccountChargeFailureLocked(st, rounded);
}

inline void Allocator::CreditAccountLocked(internal::AccountState* st,
                                           int64_t bytes) {
  using internal::AboveReservation;
  int64_t amount = bytes;
  for (internal::AccountState* a = st; a != nullptr && amount > 0;
       a = a->parent.get()) {
    const int64_t used = a->used.load(std::memory_order_relaxed);
    a->used.store(used - amount, std::memory_order_relaxed);
    amount = AboveReservation(used, *a) - AboveReservation(used - amount, *a);
  }
}

inline void Allocator::TagChunkLocked(ChunkHandle h,
                                      internal::AccountState* st) {
  if (ABSL_PREDICT_FALSE(h >= chunk_account_.size())) {
    chunk_account_.resize(std::max<size_t>(h + 1, chunks_.capacity()), 0);
  }
  chunk_account_[h] = st->id;
  const int64_t bytes =
      static_cast<int64_t>(internal::RoundedBytes(chunks_[h].requested_size));
  st->pending -= bytes;
  internal::AddRelaxed(st->own, bytes);
  internal::AddRelaxed(st->allocations, 1);
  internal::AddRelaxed(st->live, 1);
}

inline void Allocator::CreditFreedChunkLocked(ChunkHandle h) {
  if (h >= chunk_account_.size() || chunk_account_[h] == 0) return;
  internal::AccountState* st = accounts_[chunk_account_[h]].get();
  chunk_account_[h] = 0;
  const int64_t bytes =
      static_cast<int64_t>(internal::RoundedBytes(chunks_[h].requested_size));
  internal::AddRelaxed(st->own, -bytes);
  internal::AddRelaxed(st->frees, 1);
  internal::AddRelaxed(st->live, -1);
  CreditAccountLocked(st, bytes);
  if (ABSL_PREDICT_FALSE(st->closed)) MaybeForgetAccountLocked(st);
}

}  // namespace bfc

#endif  // BFC_CORE_INTERNAL_ALLOCATOR_ACCOUNTS_INL_H_
