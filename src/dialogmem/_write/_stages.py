"""Builds the write-path stages from settings: one compressor, segmenter and extractor per store,
and a fresh buffer per user scope."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._backends import use_llm
from .._models._embed_base import Embedder
from .._models._llm_base import LLMClient
from .._settings import WriteSettings
from ._buffer import WriteBuffer
from ._compress import Compressor, make_compressor
from ._extract import Extractor, LLMExtractor, RuleExtractor
from ._segment import Segmenter, make_segmenter


@dataclass
class WriteStages:
    compressor: Compressor
    segmenter: Segmenter
    extractor: Extractor
    embedder: Embedder
    sensory_tokens: int
    stm_threshold: int

    def new_buffer(self) -> WriteBuffer:
        return WriteBuffer(
            self.compressor, self.segmenter, self.extractor,
            sensory_tokens=self.sensory_tokens, stm_threshold=self.stm_threshold, embed_fn=self._embed,
        )

    def _embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts)


def make_write_stages(settings: WriteSettings, llm: LLMClient, embedder: Embedder) -> WriteStages:
    opts: dict[str, object] = {}
    if settings.compressor != "none":
        opts["rate"] = settings.compress_rate
        if settings.compressor_model:
            opts["model_path"] = settings.compressor_model
    compressor = make_compressor(settings.compressor, **opts)
    rules = RuleExtractor(context_turns=settings.context_turns)
    llm_extracts = use_llm("write.extractor", settings.extractor, llm)
    extractor: Extractor = LLMExtractor(llm, fallback=rules) if llm_extracts else rules
    segmenter_name = settings.segmenter
    if segmenter_name == "auto":
        segmenter_name = "attention" if llm_extracts else "none"
    sensory = settings.sensory_tokens
    if sensory is None:
        sensory = 512 if llm_extracts else 0
    threshold = settings.stm_threshold
    if threshold is None:
        threshold = 512 if llm_extracts else 0
    return WriteStages(compressor, make_segmenter(segmenter_name), extractor, embedder, sensory, threshold)
