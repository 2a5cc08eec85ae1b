"""Sensory and short-term buffers of one scope (seed 001, stages 1–3), as a state machine.

``push`` compresses each turn and appends it to the sensory buffer. When the sensory buffer holds
``sensory_tokens`` tokens, the segmenter cuts it into topic segments: every complete segment moves
to the STM buffer with a new topic id, and the last segment — whose topic may still be going on —
stays behind as the start of the next sensory buffer. When the STM buffer holds ``stm_threshold``
tokens (0: at once), its segments are extracted together and the facts returned. A change of
session always starts a new segment.

The buffer does no I/O of its own. The caller journals turns before pushing them and marks them
processed only after the returned facts are stored; ``pending_turn_ids`` names what is still held, so
turns can be replayed after a crash (a replayed id that is still pending is ignored).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._errors import ConfigError
from ._compress import Compressor
from ._extract import BufferedTurn, ExtractedFact, Extractor
from ._segment import Segmenter
from ._tokens import count_tokens

logger = logging.getLogger(__name__)

EmbedFn = Callable[[list[str]], np.ndarray]


@dataclass
class _Held:
    turn: BufferedTurn
    tokens: int
    new_session: bool  # a segment must start at this turn


RECENT_TURNS = 4  # turns kept after extraction as context for the next batch


class WriteBuffer:
    """Per-scope buffers; not shared between users. Methods are serialised by a lock."""

    def __init__(self, compressor: Compressor, segmenter: Segmenter, extractor: Extractor, *,
                 sensory_tokens: int = 512, stm_threshold: int = 512,
                 embed_fn: EmbedFn | None = None, first_topic_id: int = 0) -> None:
        if sensory_tokens < 0 or stm_threshold < 0:
            raise ConfigError(f"buffer sizes cannot be negative (sensory_tokens={sensory_tokens}, "
                              f"stm_threshold={stm_threshold})")
        self._compressor = compressor
        self._segmenter = segmenter
        self._extractor = extractor
        self.sensory_tokens = sensory_tokens
        self.stm_threshold = stm_threshold
        self._embed_fn = embed_fn
        self._next_topic = first_topic_id
        self._sensory: list[_Held] = []
        self._stm: list[list[_Held]] = []
        self._recent: list[BufferedTurn] = []  # the last turns extracted, context for the next batch
        self._lock = threading.RLock()

    # -- public API ----------------------------------------------------------------------
    def push(self, turns: Sequence[BufferedTurn]) -> list[ExtractedFact]:
        """Take new turns (in order); return the facts of any STM batch that became due."""
        with self._lock:
            held = set(self._pending_ids())
            fresh = [t for t in turns if t.turn_id not in held]
            if len(fresh) < len(turns):
                logger.debug("ignored %d turns already in the buffer", len(turns) - len(fresh))
            if not fresh:
                return []
            results = self._compressor.compress_many([t.text for t in fresh])
            facts: list[ExtractedFact] = []
            for turn, res in zip(fresh, results, strict=True):
                # A turn compressed to nothing keeps its original text (seed 001's practice).
                kept = bool(res.text.strip())
                item = _Held(
                    turn.model_copy(update={"compressed": res.text if kept else turn.text}),
                    # in the project's token unit, whatever the compressor's model counts in
                    count_tokens(res.text if kept else turn.text),
                    new_session=self._starts_session(turn),
                )
                self._sensory.append(item)
                if self._sensory_total() >= self.sensory_tokens:
                    self._segment(final=False)
                    facts.extend(self._extract(force=False))
            return facts

    def flush(self) -> list[ExtractedFact]:
        """Segment and extract everything held, whatever the thresholds."""
        with self._lock:
            if self._sensory:
                self._segment(final=True)
            return self._extract(force=True)

    def seed_context(self, turns: Sequence[BufferedTurn]) -> None:
        """The turns extracted before this buffer existed (oldest first), so that turns replayed
        after a restart get the same context, hence the same memories, as they would have before."""
        with self._lock:
            self._recent = list(turns)[-RECENT_TURNS:]

    def pending_turn_ids(self) -> list[str]:
        """Ids of turns not yet turned into facts, oldest first."""
        with self._lock:
            return self._pending_ids()

    def pending_turns(self) -> list[BufferedTurn]:
        """The held turns themselves (compressed text filled in), oldest first."""
        with self._lock:
            return [h.turn for seg in self._stm for h in seg] + [h.turn for h in self._sensory]

    @property
    def next_topic_id(self) -> int:
        """The topic id the next committed segment will get (persist it to resume numbering)."""
        return self._next_topic

    @property
    def sensory_token_count(self) -> int:
        return self._sensory_total()

    @property
    def stm_token_count(self) -> int:
        return sum(h.tokens for seg in self._stm for h in seg)

    # -- internals -----------------------------------------------------------------------
    def _pending_ids(self) -> list[str]:
        return [h.turn.turn_id for seg in self._stm for h in seg] + [h.turn.turn_id for h in self._sensory]

    def _starts_session(self, turn: BufferedTurn) -> bool:
        if self._sensory:
            return turn.session_id != self._sensory[-1].turn.session_id
        if self._stm:
            return turn.session_id != self._stm[-1][-1].turn.session_id
        return False

    def _sensory_total(self) -> int:
        return sum(h.tokens for h in self._sensory)

    def _segment(self, *, final: bool) -> None:
        """Cut the sensory buffer; move complete segments (all of them when ``final``) to STM."""
        held = self._sensory
        texts = [h.turn.compressed for h in held]
        cuts = set()
        if len(held) > 1:
            embeddings = self._embed_fn(texts) if self._embed_fn is not None else None
            cuts = {c for c in self._segmenter.boundaries(texts, embeddings) if 0 < c < len(held)}
        cuts |= {i for i, h in enumerate(held) if h.new_session and i > 0}
        edges = [0, *sorted(cuts), len(held)]
        segments = [held[a:b] for a, b in itertools.pairwise(edges)]
        residual: list[_Held] = []
        if not final:
            residual = segments.pop()
            # A residual that still fills the buffer has no topic end in sight; keeping it would
            # only grow the buffer past what the segmenter can look at.
            if sum(h.tokens for h in residual) >= self.sensory_tokens:
                segments.append(residual)
                residual = []
        for seg in segments:
            topic = self._next_topic
            self._next_topic += 1
            self._stm.append([
                _Held(h.turn.model_copy(update={"topic_id": topic}), h.tokens, h.new_session)
                for h in seg
            ])
        self._sensory = residual

    def _extract(self, *, force: bool) -> list[ExtractedFact]:
        if not self._stm:
            return []
        if not force and self.stm_threshold and self.stm_token_count < self.stm_threshold:
            return []
        batch = [[h.turn for h in seg] for seg in self._stm]
        facts = self._extractor.extract(batch, previous=self._recent)
        # Cleared only after the extractor returned: an exception leaves the batch pending.
        self._stm = []
        self._recent = [*self._recent, *(t for seg in batch for t in seg)][-RECENT_TURNS:]
        return facts
