"""A local model's settings reach the engine and llama.cpp configs by name
(``llm.local._passed_on``), so a setting of either that is neither passed on nor worked
out would silently keep its default: these tests pin which fields take which route."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from llm.engine.engine import EngineConfig
from llm.engine.native import NativeConfig
from llm.local import LocalModelConfig, _passed_on


def test_every_engine_setting_is_passed_on() -> None:
    engine: dict[str, Any] = {
        "context_tokens": 1234,
        "max_tokens_cap": 11,
        "prefill_chunk": 55,
        "max_waiting": 12,
        "max_waiting_tokens": 13,
        "batch_invariant": True,
    }
    config = LocalModelConfig(name="m", path=Path("m.gguf"), **engine)
    assert _passed_on(config, EngineConfig) == EngineConfig(name="m", **engine)


def test_native_settings_are_passed_on_and_worked_out_values_win() -> None:
    native: dict[str, Any] = {
        "n_gpu_layers": -1,
        "main_gpu": 2,
        "tensor_split": (0.5, 0.5),
        "flash_attn": "on",
        "type_k": "q8_0",
        "type_v": "q4_0",
    }
    config = LocalModelConfig(name="m", path=Path("m.gguf"), n_batch=77, n_threads=1, **native)
    worked_out: dict[str, Any] = {
        "model_path": config.path,
        "kv_cells": 999,
        "n_seq_max": 4,
        "n_batch": 80,
        "n_threads": 3,
        "swa_full": True,  # the setting, or batch_invariant (a windowed cache is not)
    }
    passed = _passed_on(config, NativeConfig, **worked_out)
    assert passed == NativeConfig(**worked_out, **native)


def test_every_field_of_the_parts_is_a_setting_or_worked_out() -> None:
    settings = {f.name for f in fields(LocalModelConfig)}
    assert {f.name for f in fields(EngineConfig)} <= settings
    # LocalModel.__init__ works these out (model_path from path, n_seq_max from parallel).
    assert {f.name for f in fields(NativeConfig)} - settings == {"model_path", "n_seq_max"}
