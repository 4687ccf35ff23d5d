"""The sentence-transformers model run by ONNX Runtime: exported here, from local files.

sentence-transformers' own ``backend="onnx"`` needs optimum-onnx, which pins transformers
below 5 and so cannot be installed next to sentence-transformers 6. The export is simple
for the models Ragdesk bundles (a BERT-style encoder, mean pooling, L2 normalisation), so
Ragdesk does it itself with ``torch.onnx`` and bakes pooling and normalisation into the
graph. Optionally the weights are quantised to int8 (dynamic quantisation), which is
faster on CPUs and moves the vectors slightly (median cosine 0.993 to the PyTorch ones,
lowest ~0.98 on real text; fp32 matches to ~1e-7, both tested; docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.embedder import Vectors, count_with, fingerprint, in_sorted_batches

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MANIFEST = "ragdesk-onnx.json"


class UnsupportedModel(ValueError):
    pass


def export_onnx(model_dir: Path, out_dir: Path, *, quantize: bool = False) -> Path:
    """Export ``model_dir`` to ``out_dir`` (once: an export of the same files is reused).

    Returns ``out_dir``. The manifest is written last, so a crash mid-export leaves a
    directory that the next call exports again.
    """
    source = fingerprint(model_dir)
    manifest = out_dir / MANIFEST
    if manifest.exists():
        recorded = json.loads(manifest.read_text())
        if recorded.get("source") == source and recorded.get("quantized") == quantize:
            return out_dir
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    encoder, pooling = _check_pipeline(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest.unlink(missing_ok=True)
    model.tokenizer.save_pretrained(str(out_dir))
    sample = model.tokenizer(
        ["an example", "a second, longer example"], padding=True, return_tensors="pt"
    )
    graph = out_dir / "model.onnx"
    partial = out_dir / "model.onnx.partial"
    torch.onnx.export(
        _Pooled(encoder, normalize=len(model) == 3).eval(),
        tuple(sample[name] for name in INPUTS),
        str(partial),
        input_names=list(INPUTS),
        output_names=["embedding"],
        dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in INPUTS}, "embedding": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # Per-channel weights, and only MatMuls with a constant weight (not the attention
        # products): per-tensor int8 gave cosines down to 0.87 against PyTorch.
        quantize_dynamic(
            str(partial),
            str(graph),
            weight_type=QuantType.QInt8,
            per_channel=True,
            extra_options={"MatMulConstBOnly": True},
        )
        partial.unlink()
    else:
        partial.replace(graph)
    manifest.write_text(
        json.dumps(
            {
                "source": source,
                "quantized": quantize,
                "dimension": pooling,
                "max_tokens": int(model.max_seq_length or 512),
            }
        )
    )
    return out_dir


def _check_pipeline(model: Any) -> tuple[Any, int]:
    """The Transformer module and the embedding size, if the model is Transformer → mean
    Pooling (→ Normalize); other pipelines are not exported."""
    names = [type(m).__name__ for m in model]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise UnsupportedModel(f"cannot export a {' → '.join(names)} pipeline to ONNX")
    config = model[1].get_config_dict()
    if config.get("pooling_mode", "mean") != "mean" and not config.get("pooling_mode_mean_tokens"):
        raise UnsupportedModel("only mean pooling is exported to ONNX")
    if names[-1] != "Normalize":
        raise UnsupportedModel("only normalised embeddings are exported to ONNX")
    return model[0].auto_model, int(model.get_embedding_dimension())


def _Pooled(encoder: Any, *, normalize: bool) -> Any:
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            hidden = self.encoder(
                input_ids=ids, attention_mask=mask, token_type_ids=types
            ).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1) if normalize else mean

    return Pooled()


class OnnxEmbedder:
    """An exported model (see :func:`export_onnx`) on ONNX Runtime's CPU provider."""

    def __init__(
        self, onnx_dir: Path, *, model_id: str, batch_size: int = 32, threads: int | None = None
    ):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        manifest = json.loads((onnx_dir / MANIFEST).read_text())
        self.dimension = int(manifest["dimension"])
        self._max_tokens = int(manifest["max_tokens"])
        self.model_id = model_id
        self._batch_size = batch_size
        self._tokenizer = AutoTokenizer.from_pretrained(str(onnx_dir), local_files_only=True)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(
            str(onnx_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()  # the fast tokenizer is not safe to share

    def embed_batch(self, texts: Sequence[str]) -> Vectors:

        def encode(batch: list[str]) -> Vectors:
            encoded = self._tokenizer(
                batch,
                padding=True,
                truncation=True,
                max_length=self._max_tokens,
                return_tensors="np",
            )
            feed = {name: encoded[name].astype(np.int64) for name in INPUTS}
            (vectors,) = self._session.run(["embedding"], feed)
            return np.asarray(vectors, dtype=np.float32)

        return in_sorted_batches(texts, self.dimension, self._batch_size, self._lock, encode)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return count_with(self._tokenizer, self._lock, texts)
