"""``make bench`` (memory): a single-writer key window's memory at the issue's size.

A topic scope whose topic is not partitioned holds every key of its window in the
owner's memory (``WindowKeys``). This fills one with the keys of a 10-minute window at
50,000 new keys/s (30 million random 16-byte keys, anchors spread evenly over the
window, one call per 5,000 keys as confirmations come), then prints its keys, the bytes
of its tables, the process's peak RSS, the time the fill took, and what a lookup of a
group of 4,096 new keys costs per key.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from dedup_broker.key_dedup.memory import WindowKeys, compiled_window
from dedup_broker.key_dedup.window import now_ms

GROUP = 4_096


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.window_memory", description=__doc__)
    parser.add_argument("--window-seconds", type=int, default=600)
    parser.add_argument("--keys-per-second", type=int, default=50_000)
    parser.add_argument("--per-entry", type=int, default=5_000)
    args = parser.parse_args()
    window_ms = args.window_seconds * 1000
    total = args.window_seconds * args.keys_per_second
    window = WindowKeys(window_ms)
    start = now_ms() - window_ms + 60_000  # a minute of margin: no key expires meanwhile
    began = time.monotonic()
    for done in range(0, total, args.per_entry):
        anchor = start + done * (window_ms - 60_000) // total
        window.add_packed(os.urandom(16 * min(args.per_entry, total - done)), anchor)
    filled = time.monotonic() - began
    probe = [os.urandom(16) for _ in range(GROUP)]
    began = time.monotonic()
    rounds = 50
    for _ in range(rounds):
        window.anchors(probe, now_ms())
    lookup_us = (time.monotonic() - began) / (rounds * GROUP) * 1e6
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"window {args.window_seconds} s at {args.keys_per_second:,} keys/s "
        f"({'compiled' if compiled_window is not None else 'pure Python'} tables): "
        f"{len(window):,} keys, tables {window.nbytes / 1e6:,.0f} MB "
        f"({window.nbytes / max(len(window), 1):.1f} B/key), peak RSS {peak_mb:,.0f} MB, "
        f"filled in {filled:.1f} s; lookup of {GROUP:,} new keys {lookup_us:.3f} us/key"
    )


if __name__ == "__main__":
    main()
