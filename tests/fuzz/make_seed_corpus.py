#!/usr/bin/env python3
"""Writes the committed seed corpus (corpus/seed-*) for allocator_fuzzer.

Each seed is one configuration (byte 0), a fault mode (byte 1), a
fragmentation byte (byte 2) and a few hundred operations in the encoding
harness.h documents, weighted towards allocate/free so the fuzzer starts
from inputs that reach deep allocator states (growth, splits, merges, GC,
releases, retries). Deterministic: re-running it rewrites the same files.
"""
import os
import random

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def u16(v):
    return [v & 0xFF, (v >> 8) & 0xFF]


def u32(v):
    return u16(v & 0xFFFF) + u16(v >> 16)


def allocate(rng, size_class=None, align_byte=None):
    cls = rng.choice([0, 0, 1, 2, 3, 3, 4, 5, 6, 7]) if size_class is None else size_class
    align = rng.choice([0, 0, 0, 130, 140, 150, 200, 241, 250]) if align_byte is None else align_byte
    return [rng.randrange(0, 6), cls] + u32(rng.getrandbits(32)) + [align, rng.getrandbits(8)]


def free_live(rng):
    return [rng.choice([6, 7, 8])] + u16(rng.getrandbits(16)) + [rng.getrandbits(8)]


def free_bogus(rng):
    return [rng.choice([9, 10]), rng.getrandbits(8)] + u16(rng.getrandbits(16)) + [rng.getrandbits(8)]


def other(rng):
    op = rng.choice([11, 12, 13, 14, 15])
    if op == 13:
        return [op, rng.getrandbits(8)] + u16(rng.getrandbits(16)) + [0, 0, 0]
    return [op]


def seed(rng, config, faults, frag, n_ops):
    out = [config, faults, frag]
    for _ in range(n_ops):
        r = rng.random()
        if r < 0.45:
            out += allocate(rng)
        elif r < 0.75:
            out += free_live(rng)
        elif r < 0.85:
            out += free_bogus(rng)
        else:
            out += other(rng)
    return bytes(out)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(2024)
    n = 0
    # Every configuration byte pattern for growth/GC/coalescing/retry, across
    # the limits, without faults; then the fault modes.
    for config in range(0, 256, 11):
        data = seed(rng, config, 0, rng.choice([0, 0, 26, 255]), rng.randrange(100, 600))
        with open(os.path.join(OUT, "seed-%03d" % n), "wb") as f:
            f.write(data)
        n += 1
    for mode in range(4, 8):
        for which in (0, 5, 17, 30):
            config = rng.getrandbits(8) & 0x7F
            data = seed(rng, config, (mode << 5) | which, 0, rng.randrange(100, 400))
            with open(os.path.join(OUT, "seed-%03d" % n), "wb") as f:
                f.write(data)
            n += 1
    # Growth options with release_before_extend (bit 2 of `which`) and
    # grow_below_peak_ratio (bits 5-6 of byte 2): growth below the peak, its
    # fallback, and the releases beside it. Written after the others so
    # that their bytes stay as they were.
    for mode in (1, 2, 3):
        for which in (4 | 1, 4 | 8 | 1, 4 | 16):
            config = (rng.getrandbits(8) & 0x7F) | 1  # growth on
            frag = 32 | (64 if which & 8 else 0)
            data = seed(rng, config, (mode << 5) | which, frag, rng.randrange(200, 600))
            with open(os.path.join(OUT, "seed-%03d" % n), "wb") as f:
                f.write(data)
            n += 1
    # grow_below_peak_ratio with failing sub-allocator calls: the growth it
    # asks for may fail, and the chunk it spared must then serve.
    for which in (5, 17, 30):
        for frag in (32, 96):
            config = (rng.getrandbits(8) & 0x7F) | 1
            data = seed(rng, config, (4 << 5) | which, frag, rng.randrange(300, 600))
            with open(os.path.join(OUT, "seed-%03d" % n), "wb") as f:
                f.write(data)
            n += 1
    print("wrote %d seeds to %s" % (n, OUT))


if __name__ == "__main__":
    main()
