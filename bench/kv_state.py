"""Copying a sequence's KV state out of llama.cpp: what the engine does when a chat answer
ends (its conversation's state goes to disk) and, for sliding-window models, before each
prompt's last tokens (a checkpoint of the window).

    python -m bench.kv_state [--tokens 600] [--repeats 5]

The default chat model prefills one ``--tokens`` prompt; then its state is read out
``--repeats`` times each way, alternating: into bytes with one copy (``ctypes.string_at``,
what ``NativeModel`` does), and by slicing the ctypes array (what it did before, which
builds a Python list of one int per byte first). Both read the same state from llama.cpp.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp as C

from bench.serving import MODEL_DIR, machine
from llm.engine.native import NativeConfig, NativeModel
from llm.models import bundled_model


def by_slicing(native: NativeModel, seq: int) -> bytes:
    size = int(C.llama_state_seq_get_size_ext(native.ctx, seq, 0))
    buffer = (ctypes.c_uint8 * size)()
    written = int(C.llama_state_seq_get_data_ext(native.ctx, buffer, size, seq, 0))
    return bytes(buffer[:written])


def timed(read: Callable[[NativeModel, int], bytes], native: NativeModel) -> tuple[float, int]:
    start = time.perf_counter()
    state = read(native, 0)
    return time.perf_counter() - start, len(state)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    path = bundled_model(Path(MODEL_DIR))
    native = NativeModel(NativeConfig(path, kv_cells=4096, n_seq_max=1))
    try:
        words = " ".join(f"word{i}" for i in range(args.tokens))
        tokens = native.tokenize(words)[: args.tokens]
        for start in range(0, len(tokens), 512):
            native.clear_batch()
            for i in range(start, min(len(tokens), start + 512)):
                native.add(tokens[i], i, 0, False)
            assert native.decode() == 0
        now, before = [], []
        for _ in range(args.repeats):
            seconds, size = timed(NativeModel.seq_state, native)
            now.append(seconds)
            before.append(timed(by_slicing, native)[0])
    finally:
        native.close()
    print(f"## Reading a sequence's KV state out of llama.cpp ({machine()})\n")
    print(
        f"{path.name}, {len(tokens)} tokens, {size / 2**20:.1f} MiB of state; "
        f"medians of {args.repeats}, alternating.\n"
    )
    print("| read into bytes by | time |")
    print("| --- | --- |")
    print(f"| slicing the ctypes array (before) | {statistics.median(before) * 1000:.0f} ms |")
    print(f"| one copy, `ctypes.string_at` (now) | {statistics.median(now) * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
