"""The int8 variant of the cached ONNX sentence encoder (``embedder.quantize = "int8"``).

Dynamic quantisation (``onnxruntime.quantization.quantize_dynamic``): the weights of every MatMul,
the fused Attention and the embedding layer are stored as int8, per output channel; activations are
quantised on the fly. ``reduce_range`` (7-bit weights) keeps the u8 x s8 products of CPUs without
VNNI (AVX2) from saturating, which costs far more accuracy than the lost bit (measured here: mean
cosine to the fp32 vectors 0.991 with it, 0.963 per-tensor without). The file is written once,
next to the fp32 graph it is made from, and the quantiser is deterministic (same bytes each time).

Quantised vectors are close to the fp32 ones but not equal, so a store records which of the two
embedded its memories (:func:`embedder_identity`) and refuses the other (see ``_facade._open``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from .._errors import ConfigError
from ._bert_onnx import write_atomically

log = logging.getLogger(__name__)

Quantize = Literal["none", "int8"]
# bump when the quantisation recipe changes: the file name and the embedder identity both change
QUANT_VERSION = 1


def quant_tag(quantize: Quantize) -> str:
    """What a quantised graph adds to the embedder's name ("" for fp32)."""
    return "" if quantize == "none" else f"int8-dyn-v{QUANT_VERSION}"


def quantized_onnx(fp32: Path) -> Path:
    """Path of the int8 graph made from the fp32 graph ``fp32``, writing it on first use."""
    target = fp32.with_name(f"{fp32.stem}-{quant_tag('int8')}.onnx")
    if target.is_file():
        return target
    try:
        from onnx import TensorProto
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ConfigError("embedder.quantize=int8 needs onnx and onnxruntime (with its quantization "
                          "tools) once: pip install onnx onnxruntime") from exc
    log.info("writing the int8 ONNX sentence encoder to %s (once)", target)
    try:
        # The fused kernels come from the com.microsoft domain, which ONNX shape inference does not
        # type: their outputs are float, as the quantiser is told.
        with _hint_as_debug():
            write_atomically(target, lambda tmp: quantize_dynamic(
                str(fp32), tmp, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                extra_options={"DefaultTensorType": TensorProto.FLOAT}))
    except Exception as exc:  # the quantiser raises plain RuntimeErrors and onnx's own types
        raise ConfigError(f"could not quantise the embedder graph {fp32}: {exc} "
                          "(use embedder.quantize=none)") from exc
    return target


class _PreprocessHint(logging.Filter):
    """onnxruntime's quantiser logs a WARNING on the root logger, asking for its pre-processing step
    (shape inference and graph cleanup for static quantisation): it does not apply to this graph,
    which is built with its shapes. The hint is kept at DEBUG on this module's logger instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "onnxruntime" in record.pathname and "pre-processing before quantization" in record.getMessage():
            log.debug("onnxruntime: %s", record.getMessage())
            return False
        return True


@contextmanager
def _hint_as_debug() -> Iterator[None]:
    """While the quantiser runs, its pre-processing hint leaves the root logger (only that record)."""
    hint = _PreprocessHint()
    root = logging.getLogger()
    root.addFilter(hint)
    try:
        yield
    finally:
        root.removeFilter(hint)
