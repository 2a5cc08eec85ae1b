"""What an ``add`` costs, counted at the store's own encoder, journal and index (issue 45): every text
embedded once, and one encoder call, one journal transaction and one index write per call, on
every LLM-free bulk path; each acknowledged turn journaled and searchable when the call returns.
Counts, not timings (the rates are measured by benchmarks/bench_ingest.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dialogmem import Memory
from seams import trace_sql

TURNS = [("Ann", "I moved to Lisbon in May to teach piano."), ("Bo", "Why Lisbon of all places?"),
         ("Ann", "The light, and a job at the conservatory."), ("Bo", "Do you miss Porto?"),
         ("Ann", "Only the bakery on my old street."), ("Bo", "Which bakery was that?"),
         ("Ann", "Padaria Ribeiro, they made the best bread."), ("Bo", "I will visit it in August.")]


class Counted:
    """Encoder calls and texts, journal transactions (BEGIN statements) and index writes of ``mem``."""

    def __init__(self, mem: Memory) -> None:
        self.calls, self.texts, self.index_writes, self.index_points = 0, [], 0, 0
        self.statements: list[str] = []
        embedder, index = mem._parts.embedder, mem._parts.index
        inner_embed, inner_upsert = embedder._embed, index.upsert  # type: ignore[attr-defined]

        def embed(texts: Any, **kw: Any) -> Any:
            self.calls += 1
            self.texts += list(texts)
            return inner_embed(texts, **kw)

        def upsert(points: Any) -> None:
            self.index_writes += 1
            self.index_points += len(points)
            inner_upsert(points)

        embedder._embed = embed  # type: ignore[attr-defined]
        index.upsert = upsert  # type: ignore[method-assign]
        trace_sql(mem, self.statements.append)

    @property
    def transactions(self) -> int:
        return sum(s.startswith("BEGIN") for s in self.statements)

    @contextmanager
    def call(self) -> Iterator[Counted]:
        self.calls = self.index_writes = self.index_points = 0
        self.texts, self.statements[:] = [], []
        yield self


def _msgs(start: int = 0, end: int = len(TURNS)) -> list[dict[str, str]]:
    return [{"name": who, "content": text, "id": f"t{i}"} for i, (who, text) in enumerate(TURNS[start:end], start)]


def test_a_sessions_list_is_one_encoder_call_one_transaction_one_index_write(make_memory: Any) -> None:
    mem = make_memory()
    mem.add("warm-up", "w", flush=True)
    counted = Counted(mem)
    with counted.call() as c:
        out = mem.add(_msgs(), "u", session_id="s1")
    assert len(out.memories) == len(TURNS) and out.pending_turns == 0
    assert (c.calls, len(c.texts), len(set(c.texts))) == (1, len(TURNS), len(TURNS))  # each text once
    assert c.transactions == 1 and (c.index_writes, c.index_points) == (1, len(TURNS))
    own = next(m.id for m in out.memories if m.source_turn_ids[-1] == "t6")  # searchable at once
    assert own in [h.id for h in mem.search("Padaria Ribeiro bread", "u").hits]


def test_one_turn_a_call_embeds_one_text_in_one_transaction(make_memory: Any) -> None:
    mem = make_memory()
    mem.add("warm-up", "w", flush=True)
    counted = Counted(mem)
    for i in range(len(TURNS)):
        with counted.call() as c:
            out = mem.add(_msgs(i, i + 1), "u", session_id="s1")
        assert (c.calls, len(c.texts), c.transactions, c.index_writes, c.index_points) == (1, 1, 1, 1, 1)
        assert [h.id for h in mem.search(TURNS[i][1], "u", limit=20).hits].count(out.memories[0].id) == 1


def test_add_conversation_and_chat_import_pay_per_session_not_per_turn(make_memory: Any, tmp_path: Path) -> None:
    sessions = {"session_1": _msgs(0, 4), "session_2": _msgs(4)}
    conv = {"speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2_date_time": "1:14 pm on 25 May, 2023",
            **{k: [{"speaker": m["name"], "text": m["content"], "dia_id": m["id"]} for m in v]
               for k, v in sessions.items()}}
    mem = make_memory()
    mem.add("warm-up", "w", flush=True)
    counted = Counted(mem)
    with counted.call() as c:
        mem.add_conversation({"sample_id": "x", "conversation": conv}, "u", flush=True)
    assert len(c.texts) == len(set(c.texts)) == len(TURNS) and c.calls == 2
    assert c.index_writes == 2 and c.index_points == len(TURNS) and c.transactions <= 2 + 1  # + the flush's check
    log = tmp_path / "chats.jsonl"
    log.write_text("".join(json.dumps({"messages": [{"role": "user", "name": m["name"], "content": m["content"]}
                                                    for m in v]}) + "\n" for v in sessions.values()))
    with counted.call() as c:
        got = mem.import_chats(log, "v")
    assert len(got.turn_ids) == len(TURNS) and len(got.memories) == len(TURNS)
    assert len(c.texts) == len(set(c.texts)) == len(TURNS) and c.calls == 2
    assert c.index_writes == 2 and c.transactions == 2


def test_an_llm_free_add_does_not_tokenise_its_turns_beside_the_encoder(make_memory: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Token counts size the buffers of a batched (LLM) write path; LLM-free every turn is due on
    arrival and nothing reads them, so an ``add`` runs no tokenizer but the encoder's (it ran two a turn:
    the identity compressor's count and the stages' own, ~0.3 ms each)."""
    from dialogmem._text._tokens import default_token_counter

    mem = make_memory()
    mem.add("warm-up", "w", flush=True)
    counter, counted = default_token_counter(), []
    for name in ("count", "count_many"):
        inner = getattr(counter, name)
        monkeypatch.setattr(counter, name, lambda x, _inner=inner: counted.append(x) or _inner(x))
    mem.add(_msgs(0, 1), "u", session_id="s1")
    mem.add(_msgs(1), "u", session_id="s1")
    assert counted == []
    assert len(mem.search("Padaria Ribeiro", "u").hits) > 0


def test_a_change_sets_vectors_round_together_as_each_alone() -> None:
    """The writer rounds a change set's vectors to the journal's precision in one pass: the same
    values as one vector at a time (each row keeps its own scale), whatever their sizes."""
    from dialogmem._journal import stored_precision, stored_precision_all

    rng = np.random.default_rng(7)
    vectors = {f"m{i}": rng.normal(size=384).astype(np.float32) * 10.0 ** rng.integers(-3, 3) for i in range(9)}
    vectors |= {"zero": np.zeros(384, np.float32), "odd": rng.normal(size=5).astype(np.float32)}
    got = dict(zip(vectors, stored_precision_all(list(vectors.values())), strict=True))
    assert list(got) == list(vectors)
    for key, v in vectors.items():
        assert got[key].shape == v.shape and np.array_equal(got[key], stored_precision(v)), key
