"""The write-path stages of one store, built from settings: a compressor, a segmenter, an extractor,
and the buffer policy that says when pending turns are due."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .._backends import use_llm
from .._models._embed_base import Embedder
from .._models._llm_base import LLMClient
from .._settings import WriteSettings
from .._text._tokens import count_tokens_many
from ._buffer import RECENT_TURNS, Batch, BufferPolicy, due_batch
from ._compose import UNIT_CONTEXT_WEIGHT, PartVectors, unit_parts
from ._compress import Compressor, NoCompressor, make_compressor
from ._events import LLMEventWriter
from ._extract import BufferedTurn, ExtractedFact, Extractor, LLMExtractor, RuleExtractor
from ._interactions import due_interactions
from ._segment import NoSegmenter, Segmenter, make_segmenter
from ._synthesize import Decide, RuleConfig, rule_decider
from ._synthesize_llm import LLMSynthesizer
from ._turnwriter import LLMTurnWriter, RuleTurnWriter, TurnWriter
from ._windowed import CorefRuleExtractor, WindowedExtractor

_CACHE_SIZE = 4096


@dataclass(frozen=True)
class Synthesis:
    """How online synthesis decides: by the rule, or by ``llm`` (the rule as its fallback)."""

    config: RuleConfig
    llm: LLMClient | None = None

    def decider(self, ignore_entities: Sequence[str]) -> Decide:
        """The decision function for one user, the store's speaker names ignored as entities."""
        config = replace(self.config, ignore_entities=tuple(ignore_entities))
        return LLMSynthesizer(self.llm, config).decide if self.llm is not None else rule_decider(config)


@dataclass
class WriteStages:
    compressor: Compressor
    segmenter: Segmenter
    extractor: Extractor
    embedder: Embedder
    policy: BufferPolicy
    llm_extracts: bool = False
    context_turns: int = RECENT_TURNS  # turns before a batch read from the journal as its context
    synthesis: Synthesis | None = None  # online synthesis at write time (write.synthesis)
    turn_writer: TurnWriter | None = None  # write.mode = "turn": one item per interaction
    llm_writes_turns: bool = False
    events: LLMEventWriter | None = None  # write.events: an event summary per topic unit
    parts: PartVectors | None = None  # write.vectors = "turns": memory vectors made of their turns'
    # compressed text and token count per (user id, turn id, text): compression may be a model call,
    # and a pending turn is looked at again by every later decision until its batch is due
    _cache: OrderedDict[tuple[str, str, str], tuple[str, int]] = field(default_factory=OrderedDict, repr=False)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def immediate(self) -> bool:
        """Whether a turn's memories are written in the same call (and transaction) that journals it:
        every turn is due at once and no LLM call sits between arrival and storage."""
        if self.turn_writer is not None:
            return not self.llm_writes_turns
        return self.policy.immediate and not self.llm_extracts and self.events is None

    def due(self, user_id: str, pending: Sequence[BufferedTurn], *, force: bool) -> Batch:
        """The batch of ``user_id``'s ``pending`` turns due now (compressed, with topic ids), or []."""
        prepared = self._prepare(user_id, pending)
        tokens = [n for _, n in prepared]
        turns = [t.model_copy(update={"compressed": text}) for t, (text, _) in zip(pending, prepared, strict=True)]
        if self.turn_writer is not None:  # write.mode = "turn": the complete interactions
            return due_interactions(turns, force=force)
        return due_batch(turns, tokens, self.policy, force=force, boundaries=self._boundaries)

    def _prepare(self, user_id: str, pending: Sequence[BufferedTurn]) -> list[tuple[str, int]]:
        keys = [(user_id, t.turn_id, t.text) for t in pending]
        with self._cache_lock:
            known = {k: self._cache[k] for k in keys if k in self._cache}
        todo = [t for t, k in zip(pending, keys, strict=True) if k not in known]
        if todo:
            if isinstance(self.compressor, NoCompressor):  # the text as it is: nothing to tokenise for it
                texts = [t.text for t in todo]
            else:
                texts = [res.text if res.text.strip() else t.text  # compressed to nothing: the original
                         for t, res in zip(todo, self.compressor.compress_many([t.text for t in todo]), strict=True)]
            # token counts size the buffers; with every turn due on arrival nothing reads them
            counts = [0] * len(texts) if self.policy.immediate else count_tokens_many(texts)
            with self._cache_lock:
                for t, text, n in zip(todo, texts, counts, strict=True):
                    key = (user_id, t.turn_id, t.text)
                    known[key] = self._cache[key] = (text, n)
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
        return [known[k] for k in keys]

    @property
    def whole_lists(self) -> bool:
        """Whether a list of turns in one call gives the memories that the same turns one call each
        give: LLM-free, each turn written as it arrives by the plain rule extractor, uncompressed
        (coreference, compression, windows and the per-turn writer read a batch's turns differently
        from the journaled turns before it)."""
        return (self.immediate and self.turn_writer is None and self.synthesis is None
                and type(self.extractor) is RuleExtractor and isinstance(self.compressor, NoCompressor))

    def memory_vectors(self, user_id: str, facts: Sequence[ExtractedFact]) -> np.ndarray:
        """The facts' vectors (rows in order): their texts embedded, or with ``write.vectors =
        "turns"`` made of their parts' vectors."""
        if not facts:
            return np.zeros((0, 0), np.float32)
        if self.parts is None:
            return self.embedder.embed([f.fact for f in facts])
        return self.parts.memory_vectors(user_id, facts)

    def forget(self, user_id: str) -> None:
        """Drop what the stages remember of ``user_id``'s turns (``forget_user``): their compressed
        texts and their parts' vectors."""
        with self._cache_lock:
            for key in [k for k in self._cache if k[0] == user_id]:
                del self._cache[key]
        if self.parts is not None:
            self.parts.forget(user_id)

    def _boundaries(self, texts: list[str]) -> list[int]:
        if isinstance(self.segmenter, NoSegmenter):
            return []
        return self.segmenter.boundaries(texts, self.embedder.embed(texts))


def make_write_stages(settings: WriteSettings, llm: LLMClient, embedder: Embedder) -> WriteStages:
    opts: dict[str, object] = {}
    if settings.compressor != "none":
        opts["rate"] = settings.compress_rate
        if settings.compressor_model:
            opts["model_path"] = settings.compressor_model
    compressor = make_compressor(settings.compressor, **opts)
    llm_extracts = use_llm("write.extractor", settings.extractor, llm)
    extractor, context = _extractor(settings, llm, llm_extracts)
    events = None
    if settings.events != "off" and use_llm("write.events", settings.events, llm):
        events = LLMEventWriter(llm, max_turns=settings.event_turns, overlap=settings.event_overlap)
        context = max(context, settings.event_overlap)
    batched = llm_extracts or events is not None  # an LLM call per batch: buffer whole topics
    segmenter_name = settings.segmenter
    if segmenter_name == "auto":
        segmenter_name = "attention" if batched else "none"
    sensory = settings.sensory_tokens
    if sensory is None:
        sensory = 512 if batched else 0
    threshold = settings.stm_threshold
    if threshold is None:
        threshold = 512 if batched else 0
    turn_writer, llm_writes_turns = _turn_writer(settings, llm)
    return WriteStages(compressor, make_segmenter(segmenter_name), extractor, embedder,
                       BufferPolicy(sensory, threshold), llm_extracts=llm_extracts, context_turns=context,
                       synthesis=_synthesis(settings, llm), events=events, turn_writer=turn_writer,
                       llm_writes_turns=llm_writes_turns,
                       parts=_part_vectors(settings, embedder))


def _part_vectors(settings: WriteSettings, embedder: Embedder) -> PartVectors | None:
    """``write.vectors``: "auto" composes memory vectors from line vectors where the embedder gives
    each line's mass (the local mean-pooled encoder), "turns" always (unit weights without masses),
    "text" never."""
    embed_parts = getattr(embedder, "embed_parts", None)
    if settings.vectors == "text" or (settings.vectors == "auto" and embed_parts is None):
        return None
    if embed_parts is not None:
        return PartVectors(embed_parts)
    return PartVectors(unit_parts(embedder.embed), context_weight=UNIT_CONTEXT_WEIGHT)


def _turn_writer(settings: WriteSettings, llm: LLMClient) -> tuple[TurnWriter | None, bool]:
    """The per-turn writer (``write.mode = "turn"``) and whether an LLM writes the items."""
    if settings.mode != "turn":
        return None, False
    rules = RuleTurnWriter(context_turns=settings.context_turns)
    if use_llm("write.turn_writer", settings.turn_writer, llm):
        return LLMTurnWriter(llm, fallback=rules), True
    return rules, False


def _synthesis(settings: WriteSettings, llm: LLMClient) -> Synthesis | None:
    if settings.synthesis == "off":
        return None
    config = RuleConfig(min_cosine=settings.synthesis_min_cosine, cross_session=settings.synthesis_cross_session,
                        shared_entity=settings.synthesis != "duplicates")
    if settings.synthesis == "duplicates":
        return Synthesis(config)
    return Synthesis(config, llm if use_llm("write.synthesis", settings.synthesis, llm) else None)


def _extractor(settings: WriteSettings, llm: LLMClient, llm_extracts: bool) -> tuple[Extractor, int]:
    """The extractor of the settings and how many turns before a batch it reads as context."""
    windows = settings.window_stride()
    # LLM-free windows: a window's read-only turns are its memories' context. With an LLM the rule
    # facts beside (or under) the model's are the LLM-free memories: context_turns of context.
    rule_context = settings.context_turns if windows is None or llm_extracts else windows[0] - windows[1]
    rules = (CorefRuleExtractor(context_turns=rule_context) if settings.coref
             else RuleExtractor(context_turns=rule_context))
    enrich = settings.llm_facts == "enrich"
    if windows is not None:
        windowed = WindowedExtractor(rules, llm if llm_extracts else None, window=windows[0], stride=windows[1],
                                     enrich=enrich)
        return windowed, max(RECENT_TURNS, windowed.context_needed)
    return (LLMExtractor(llm, fallback=rules, enrich=enrich) if llm_extracts else rules), RECENT_TURNS
