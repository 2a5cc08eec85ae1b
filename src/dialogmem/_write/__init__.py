"""The write path: pre-compression, topic segmentation, due batches, extraction, time normalisation."""

from .._text._timenorm import absolutize
from .._text._tokens import count_tokens
from ._buffer import RECENT_TURNS, Batch, BufferPolicy, due_batch, topic_id
from ._compress import (
    Compressor,
    CompressResult,
    EntropyCompressor,
    LLMLingua2Compressor,
    NoCompressor,
    make_compressor,
)
from ._extract import BufferedTurn, ExtractedFact, Extractor, LLMExtractor, RuleExtractor
from ._segment import Segmenter, make_segmenter
from ._stages import WriteStages, make_write_stages

__all__ = [
    "RECENT_TURNS",
    "Batch",
    "BufferPolicy",
    "BufferedTurn",
    "CompressResult",
    "Compressor",
    "EntropyCompressor",
    "ExtractedFact",
    "Extractor",
    "LLMExtractor",
    "LLMLingua2Compressor",
    "NoCompressor",
    "RuleExtractor",
    "Segmenter",
    "WriteStages",
    "absolutize",
    "count_tokens",
    "due_batch",
    "make_compressor",
    "make_segmenter",
    "make_write_stages",
    "topic_id",
]
