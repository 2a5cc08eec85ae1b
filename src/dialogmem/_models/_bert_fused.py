"""The BERT sentence encoder written with onnxruntime's fused CPU kernels (``com.microsoft``).

Same arithmetic as :func:`._bert_onnx.build_model` (BERT encoder, mean pooling, L2 norm), but
each block is one kernel instead of a chain of small ops: ``EmbedLayerNormalization`` for the
embeddings, one ``Attention`` per layer (Q/K/V projections, scaled softmax with the padding mask,
context), ``SkipLayerNormalization`` for residual + bias + LayerNorm and ``BiasGelu`` for the
exact (erf) GELU. onnxruntime's own optimizer does not find these fusions in the plain graph, and
the unfused attention costs most of a short text's latency. Vectors match the plain graph to
~1e-6 (tests/test_embed.py checks it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._onnx_graph import GraphParts

_MS = "com.microsoft"


def build_fused_model(w: dict[str, np.ndarray], config: dict[str, Any]) -> Any:
    """ONNX model: (input_ids, attention_mask) int64 [B, S] -> L2-normalised mean-pooled [B, H], and
    ``pooled_norm`` [B, 1], the mean's norm before normalisation."""
    from onnx import TensorProto

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    g = GraphParts()
    const, op = g.const, g.op

    def matmul(x: str, prefix: str) -> str:
        return op("MatMul", [x, const(w[f"{prefix}.weight"].T.astype(np.float32), f"{prefix}.weight_t")])

    def skip_ln(x: str, skip: str, prefix: str, ln: str) -> str:
        return op("SkipLayerNormalization",
                  [x, skip, const(w[f"{ln}.weight"], f"{ln}.weight"), const(w[f"{ln}.bias"], f"{ln}.bias"),
                   const(w[f"{prefix}.bias"], f"{prefix}.bias")], domain=_MS, epsilon=eps)

    ids32 = op("Cast", ["input_ids"], to=TensorProto.INT32)
    mask32 = op("Cast", ["attention_mask"], to=TensorProto.INT32)
    # Single-segment input: token type 0 is folded into the position table.
    positions = (w["embeddings.position_embeddings.weight"]
                 + w["embeddings.token_type_embeddings.weight"][0][None, :]).astype(np.float32)
    x = op("EmbedLayerNormalization",
           [ids32, "", const(w["embeddings.word_embeddings.weight"], "word_emb"), const(positions, "pos_emb"),
            "", const(w["embeddings.LayerNorm.weight"], "emb_ln.weight"),
            const(w["embeddings.LayerNorm.bias"], "emb_ln.bias")],
           domain=_MS, n_out=2, epsilon=eps)

    for n in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{n}"
        qkv = [f"{p}.attention.self.{part}" for part in ("query", "key", "value")]
        weights = np.concatenate([w[f"{q}.weight"].T for q in qkv], axis=1).astype(np.float32)
        bias = np.concatenate([w[f"{q}.bias"] for q in qkv]).astype(np.float32)
        ctx = op("Attention", [x, const(weights, f"{p}.qkv.weight"), const(bias, f"{p}.qkv.bias"), mask32],
                 domain=_MS, num_heads=heads)
        x = skip_ln(matmul(ctx, f"{p}.attention.output.dense"), x, f"{p}.attention.output.dense",
                    f"{p}.attention.output.LayerNorm")
        gelu = op("BiasGelu", [matmul(x, f"{p}.intermediate.dense"),
                               const(w[f"{p}.intermediate.dense.bias"], f"{p}.intermediate.dense.bias")],
                  domain=_MS)
        x = skip_ln(matmul(gelu, f"{p}.output.dense"), x, f"{p}.output.dense", f"{p}.output.LayerNorm")

    g.mean_pool_normalised(x, op("Cast", ["attention_mask"], to=TensorProto.FLOAT))
    # the norm of the mean before normalisation: with a text's token count it gives back the sum of its
    # token states, which composes memory vectors from their lines' vectors (``_write/_compose.py``)
    return g.model("sentence_encoder_fused", hidden, [("", 17), (_MS, 1)], ("pooled_norm",))
