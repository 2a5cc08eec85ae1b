"""The pieces both ONNX encoder graphs (``_bert_onnx.build_model`` and ``_bert_fused``) are built from.

``onnx`` is imported inside the methods: it is needed only while a graph is written, once per cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class GraphParts:
    """The pieces both encoder graphs are made of: initializers, nodes with unique output names, and
    the shared head (mean over real tokens, L2 normalisation) and model wrapper."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._counter = iter(range(10**9))

    def const(self, arr: np.ndarray, name: str | None = None) -> str:
        from onnx import numpy_helper

        name = name or f"c{next(self._counter)}"
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(self, kind: str, inputs: list[str], *, domain: str = "", n_out: int = 1, **attrs: Any) -> str:
        from onnx import helper

        outs = [f"{kind.lower()}{next(self._counter)}" for _ in range(n_out)]
        self.nodes.append(helper.make_node(kind, inputs, outs, domain=domain or None, **attrs))
        return outs[0]

    def mean_pool_normalised(self, x: str, mask: str) -> None:
        """``sentence_embedding``: mean over real tokens, then L2 normalisation (the clamps of
        sentence-transformers). ``mask`` is the float attention mask [B, S]. The mean's norm before
        normalisation is the tensor ``pooled_norm`` [B, 1] (an output where the model lists it)."""
        from onnx import helper

        i64 = np.int64
        mask3 = self.op("Unsqueeze", [mask, self.const(np.array([2], i64))])
        summed = self.op("ReduceSum", [self.op("Mul", [x, mask3]), self.const(np.array([1], i64))], keepdims=0)
        count = self.op("Max", [self.op("ReduceSum", [mask3, self.const(np.array([1], i64))], keepdims=0),
                                self.const(np.array(1e-9, np.float32))])
        mean = self.op("Div", [summed, count])
        self.nodes.append(helper.make_node("Max", [self.op("ReduceL2", [mean], axes=[1], keepdims=1),
                                                   self.const(np.array(1e-12, np.float32))], ["pooled_norm"]))
        self.nodes.append(helper.make_node("Div", [mean, "pooled_norm"], ["sentence_embedding"]))

    def model(self, name: str, hidden: int, opsets: list[tuple[str, int]], extra_outputs: tuple[str, ...] = ()) -> Any:
        """The model; ``extra_outputs``: more float tensors of the graph to return (shapes left open)."""
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
             helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
            [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden]),
             *(helper.make_tensor_value_info(out, TensorProto.FLOAT, None) for out in extra_outputs)],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                                  producer_name="dialogmem")
        model.ir_version = 8
        return model
