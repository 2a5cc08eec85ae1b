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

_MS = "com.microsoft"


def build_fused_model(w: dict[str, np.ndarray], config: dict[str, Any]) -> Any:
    """ONNX model: (input_ids, attention_mask) int64 [B, S] -> L2-normalised mean-pooled [B, H]."""
    from onnx import TensorProto, helper, numpy_helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = iter(range(10**9))

    def const(arr: np.ndarray, name: str | None = None) -> str:
        name = name or f"c{next(counter)}"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(kind: str, inputs: list[str], *, domain: str = "", n_out: int = 1, **attrs: Any) -> str:
        outs = [f"{kind.lower()}{next(counter)}" for _ in range(n_out)]
        nodes.append(helper.make_node(kind, inputs, outs, domain=domain or None, **attrs))
        return outs[0]

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

    i64 = np.int64
    mask = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask3 = op("Unsqueeze", [mask, const(np.array([2], i64))])
    summed = op("ReduceSum", [op("Mul", [x, mask3]), const(np.array([1], i64))], keepdims=0)
    count = op("Max", [op("ReduceSum", [mask3, const(np.array([1], i64))], keepdims=0),
                       const(np.array(1e-9, np.float32))])
    mean = op("Div", [summed, count])
    norm = op("Max", [op("ReduceL2", [mean], axes=[1], keepdims=1), const(np.array(1e-12, np.float32))])
    nodes.append(helper.make_node("Div", [mean, norm], ["sentence_embedding"]))

    graph = helper.make_graph(
        nodes, "sentence_encoder_fused",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)],
                              producer_name="dialogmem")
    model.ir_version = 8
    return model
