"""The ONNX embedder against the PyTorch one it was exported from (real bundled model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval.embedder import SentenceTransformerEmbedder, bundled_embedder_dir, model_id
from retrieval.onnx_embedder import MANIFEST, OnnxEmbedder, export_onnx

pytestmark = pytest.mark.real

TEXTS = [
    "How many days of paid leave do staff get?",
    "Meals abroad are refunded up to 45 euros a day with receipts.",
    "",
    "Ünïcödé — 東京 — emoji 🎉 and accents àéîõü",
    "word " * 600,  # longer than the model's window: truncated the same way
    "def f(x):\n    return x * 2  # code",
]


@pytest.fixture(scope="module")
def torch_embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(bundled_embedder_dir())


@pytest.mark.parametrize(
    ("quantize", "lowest", "mean"), [(False, 0.9999, 0.9999), (True, 0.97, 0.985)]
)
def test_onnx_vectors_match_pytorch(
    tmp_path: Path,
    torch_embedder: SentenceTransformerEmbedder,
    quantize: bool,
    lowest: float,
    mean: float,
) -> None:
    out = export_onnx(bundled_embedder_dir(), tmp_path / "onnx", quantize=quantize)
    onnx = OnnxEmbedder(out, model_id="x", batch_size=4)
    expected = torch_embedder.embed_batch(TEXTS)
    got = onnx.embed_batch(TEXTS)
    assert got.shape == expected.shape == (len(TEXTS), 384) and got.dtype == np.float32
    cosines = (got * expected).sum(axis=1)
    assert cosines.min() >= lowest and cosines.mean() >= mean, cosines
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    assert onnx.count_tokens(TEXTS) == torch_embedder.count_tokens(TEXTS)


def test_an_export_is_reused_until_the_model_or_mode_changes(tmp_path: Path) -> None:
    out = export_onnx(bundled_embedder_dir(), tmp_path / "onnx")
    graph = out / "model.onnx"
    before = graph.stat().st_mtime_ns
    export_onnx(bundled_embedder_dir(), out)
    assert graph.stat().st_mtime_ns == before
    (out / MANIFEST).unlink()  # as after a crash mid-export: exported again
    export_onnx(bundled_embedder_dir(), out)
    assert (out / MANIFEST).exists()


def test_the_app_builds_it_from_settings(tmp_path: Path) -> None:
    from app.config.retrieval import build_embedder
    from app.config.settings import Settings

    fp32 = build_embedder(Settings(data_dir=tmp_path, embedder_backend="onnx"))
    assert isinstance(fp32, OnnxEmbedder)
    assert fp32.model_id == model_id(bundled_embedder_dir())  # same vectors: no re-embedding
    int8 = build_embedder(Settings(data_dir=tmp_path, embedder_backend="onnx-int8"))
    assert int8.model_id.startswith("onnx-int8:")
