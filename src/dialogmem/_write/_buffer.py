"""Which pending turns form a batch that is due for extraction (seed 001 stages 1–3), decided from
the pending turns alone (pure, no I/O, no state between calls).

The journal's pending turns of a user *are* LightMem's sensory buffer and STM buffer: nothing
else holds them, so any process can decide the same way after a restart, and a turn can never
be in two buffers. The rules:

* Nothing is due while the pending turns hold fewer than ``sensory_tokens + stm_threshold``
  tokens (unless the caller forces a flush). With both 0 — the LLM-free default — every turn is
  due as soon as it arrives.
* When enough is pending, the turns are cut into topic segments (the segmenter's boundaries, and
  always at a change of session). Every segment but the last forms the batch; the last one stays
  pending, since its topic may still be going on — LightMem's residual sensory buffer. A last
  segment that alone fills the sensory buffer is taken too: no end of its topic is in sight, and
  waiting would only grow it past what the segmenter can look at.
* A flush takes everything pending.

Segmentation runs once per batch, not once per turn: the threshold is sensory + STM, where the
original buffer cut the sensory buffer each time it filled and extracted once STM reached ``th``.
Both cut batches of about the same size at topic ends; this form needs no state between calls.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._errors import ConfigError
from ._extract import BufferedTurn

Segment = list[BufferedTurn]
Batch = list[Segment]
#: texts of the pending turns -> indices where a new topic starts
Boundaries = Callable[[list[str]], Sequence[int]]

RECENT_TURNS = 4  # turns before a batch that its extractor sees as context


@dataclass(frozen=True)
class BufferPolicy:
    sensory_tokens: int = 0
    stm_threshold: int = 0

    def __post_init__(self) -> None:
        if self.sensory_tokens < 0 or self.stm_threshold < 0:
            raise ConfigError(f"buffer sizes cannot be negative (sensory_tokens={self.sensory_tokens}, "
                              f"stm_threshold={self.stm_threshold})")

    @property
    def immediate(self) -> bool:
        """Every turn is due as soon as it arrives."""
        return self.sensory_tokens == 0 and self.stm_threshold == 0


def topic_id(segment: Sequence[BufferedTurn]) -> int:
    """A stable id for a topic segment: the same turns give the same id in any process."""
    return zlib.crc32(segment[0].turn_id.encode("utf-8")) & 0x7FFFFFFF


def due_batch(pending: Sequence[BufferedTurn], tokens: Sequence[int], policy: BufferPolicy, *,
              force: bool, boundaries: Boundaries | None = None) -> Batch:
    """The segments of ``pending`` (oldest first, with their token counts) due now; [] if none."""
    if not pending:
        return []
    total = sum(tokens)
    if not force and total < policy.sensory_tokens + policy.stm_threshold:
        return []
    cuts: set[int] = set()
    if boundaries is not None and len(pending) > 1 and not policy.immediate:
        cuts = {c for c in boundaries([t.content() for t in pending]) if 0 < c < len(pending)}
    cuts |= {i for i in range(1, len(pending)) if pending[i].session_id != pending[i - 1].session_id}
    edges = [0, *sorted(cuts), len(pending)]
    spans = list(itertools.pairwise(edges))
    if not force and not policy.immediate and len(spans) > 1:
        last_tokens = sum(tokens[spans[-1][0]:spans[-1][1]])
        if last_tokens < policy.sensory_tokens:
            spans.pop()  # the topic may go on: it stays pending
    batch: Batch = []
    for a, b in spans:
        segment = list(pending[a:b])
        tid = topic_id(segment)
        batch.append([t.model_copy(update={"topic_id": tid}) for t in segment])
    return batch
