"""Write a BERT sentence encoder as an ONNX graph straight from its safetensors weights.

The embedding model package ships PyTorch weights only. Exporting through ``torch.onnx`` would
make torch a requirement of the fast path; instead the graph of a BERT encoder followed by mean
pooling and L2 normalisation (what sentence-transformers runs for all-MiniLM-L6-v2) is written
here with ``onnx.helper`` and the weights are copied in. The result is cached on disk, keyed by
the weights' hash, so ``onnx`` is only needed the first time.

``build_model`` is the plain reference graph (standard ONNX ops only); what is cached and run is
``_bert_fused.build_fused_model``, the same arithmetic with onnxruntime's fused kernels.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import ConfigError
from ._bert_fused import build_fused_model
from ._onnx_graph import GraphParts

log = logging.getLogger(__name__)

# bump when the cached graph changes, so stale cache files are not reused (2: fused kernels; 3: the
# pooled norm as a second output, the vectors unchanged)
GRAPH_VERSION = 3
_OPSET = 17
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": None}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file as numpy arrays (the format is a JSON header + raw data)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    header_len = int(np.frombuffer(raw[:8].tobytes(), dtype="<u8")[0])
    header = json.loads(raw[8:8 + header_len].tobytes())
    base = 8 + header_len
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ConfigError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        arr = np.frombuffer(raw[base + start:base + end].tobytes(), dtype=np.dtype(dtype).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"]).astype(np.float32 if dtype != np.int64 else np.int64)
    return out


def weights_key(weights: Path, config: dict[str, Any]) -> str:
    h = hashlib.sha256()
    with open(weights, "rb") as fh:
        h.update(hashlib.file_digest(fh, "sha256").digest())
    h.update(json.dumps(config, sort_keys=True).encode())
    h.update(f"graph-v{GRAPH_VERSION}".encode())
    return h.hexdigest()[:24]


def cached_onnx(model_dir: Path, cache_dir: Path) -> Path:
    """Path of the ONNX sentence encoder for ``model_dir``, building it on first use."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    weights = model_dir / "model.safetensors"
    target = cache_dir / f"minilm-{weights_key(weights, config)}.onnx"
    if target.is_file():
        return target
    try:
        import onnx
    except ImportError as exc:
        raise ConfigError("building the ONNX embedder needs the onnx package once: pip install onnx "
                          "(or use embedder.engine=torch)") from exc
    log.info("writing the ONNX sentence encoder to %s (once)", target)
    model = build_fused_model(read_safetensors(weights), config)
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(target, lambda tmp: onnx.save_model(model, tmp))
    return target


def write_atomically(target: Path, write: Callable[[str], object]) -> None:
    """``write(tmp)`` into a temporary file beside ``target``, then rename it to ``target``: another
    process loading at the same time sees either no file or a whole one. The temporary file never
    outlives the call; what ``write`` raises propagates."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build_model(w: dict[str, np.ndarray], config: dict[str, Any], *, attentions: bool = False) -> Any:
    """ONNX model: (input_ids, attention_mask) int64 [B, S] -> L2-normalised mean-pooled [B, H]; with
    ``attentions`` also each layer's attention probabilities, ``attention_<layer>`` [B, heads, S, S] (what
    transformers' eager attention returns with ``output_attentions``: the attention segmenter's input)."""
    from onnx import TensorProto, helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    head_dim = hidden // heads
    g = GraphParts()
    const, op = g.const, g.op

    def linear(x: str, prefix: str) -> str:
        weight = const(w[f"{prefix}.weight"].T.astype(np.float32), f"{prefix}.weight_t")
        bias = const(w[f"{prefix}.bias"].astype(np.float32), f"{prefix}.bias")
        return op("Add", [op("MatMul", [x, weight]), bias])

    def layer_norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", [x, const(w[f"{prefix}.weight"], f"{prefix}.weight"),
                                         const(w[f"{prefix}.bias"], f"{prefix}.bias")],
                  axis=-1, epsilon=eps)

    i64 = np.int64
    # Embeddings: word + position + token type 0 (single-segment input), then LayerNorm.
    seq_len = op("Slice", [op("Shape", ["input_ids"]), const(np.array([1], i64)),
                           const(np.array([2], i64))])
    positions = op("Slice", [const(w["embeddings.position_embeddings.weight"], "pos_emb"),
                             const(np.array([0], i64)), seq_len, const(np.array([0], i64))])
    words = op("Gather", [const(w["embeddings.word_embeddings.weight"], "word_emb"), "input_ids"])
    token_type = const(w["embeddings.token_type_embeddings.weight"][0], "type_emb0")
    x = layer_norm(op("Add", [op("Add", [words, positions]), token_type]), "embeddings.LayerNorm")

    mask = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    # Padding gets a large negative score so softmax gives it no weight.
    neg = op("Mul", [op("Sub", [const(np.array(1.0, np.float32)), mask]),
                     const(np.array(-1e9, np.float32))])
    bias4 = op("Unsqueeze", [neg, const(np.array([1, 2], i64))])
    split_heads = const(np.array([0, 0, heads, head_dim], i64))
    merge_heads = const(np.array([0, 0, hidden], i64))
    scale = const(np.array(1.0 / np.sqrt(head_dim), np.float32))
    half, one = const(np.array(0.5, np.float32)), const(np.array(1.0, np.float32))
    inv_sqrt2 = const(np.array(1.0 / np.sqrt(2.0), np.float32))

    for n in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{n}"
        q = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.query"), split_heads])],
               perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.key"), split_heads])],
               perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.value"), split_heads])],
               perm=[0, 2, 1, 3])
        scores = op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), bias4])
        probs = op("Softmax", [scores], axis=-1)
        if attentions:
            g.nodes.append(helper.make_node("Identity", [probs], [f"attention_{n}"]))
        ctx = op("MatMul", [probs, v])
        ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_heads])
        x = layer_norm(op("Add", [linear(ctx, f"{p}.attention.output.dense"), x]),
                       f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense")
        gelu = op("Mul", [op("Mul", [h, half]), op("Add", [op("Erf", [op("Mul", [h, inv_sqrt2])]), one])])
        x = layer_norm(op("Add", [linear(gelu, f"{p}.output.dense"), x]), f"{p}.output.LayerNorm")

    g.mean_pool_normalised(x, mask)
    layers = int(config["num_hidden_layers"])
    extra = tuple(f"attention_{n}" for n in range(layers)) if attentions else ()
    return g.model("sentence_encoder", hidden, [("", _OPSET)], extra)
