"""HyMem answering (seed 004 §3.2-3.4, Algorithm 1): light module, deep module, reflection.

* **Light**: the top ``light_k`` memories (L1) → one generator call (``answer_v2`` short answer
  with the "not mentioned" rule; the lines it rests on matched by words, or with
  ``citations="inline"`` named by the model) → an answer and its status: complete, or missing
  information when the generator abstains.
* **Deep** (on missing, or ``mode="deep"``): the top ``deep_n`` memories → the LLM retriever judges
  them in parallel batches of ``batch_size`` → the picked memories are traced back to their raw
  turns (L2; deduplicated, shown oldest first) → the generator answers the original question from
  the turns and the memory pool (answers of earlier rounds).
* **Reflection**: after a deep round that is not the last, a check whether every part of the
  question is answered; a follow-up question drives the next round's retrieval. At most
  ``max_rounds`` deep rounds.

Searching and reading turns are injected (the facade owns the I/O). The deep roles go through
``_backends.use_llm``/``with_fallback``: a failed or unusable retriever batch falls back to the
rule retriever (the top candidates by rank), a failed or unusable reflection ends the rounds, and a
failed or empty deep generator reply keeps the light answer. Every such event is counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from .._backends import record_fallback, use_llm, with_fallback
from .._errors import LLMError, LLMOutputError, LLMUnavailableError
from .._models._llm_base import ChatMessage, LLMClient
from .._prompts import answer_v2 as gen_prompt
from .._prompts import hymem as deep_prompt
from .._prompts.answer_v2 import CitedAnswer
from .._settings import AnswerSettings
from .._text._render import shown_lines, shown_text
from .._text._tokens import count_tokens
from .._types import SearchHit, Turn, with_validity
from ..types import AnswerMode
from . import _hymem_steps as steps
from ._answer import Answer

log = logging.getLogger(__name__)

SearchFn = Callable[[str, int], list[SearchHit]]  # (query, limit) -> this user's hits
TurnsFn = Callable[[list[str]], list[Turn]]  # turn ids -> this user's turns

_GEN_TOKENS = 48
_PICK_TOKENS = 48
_REFLECT_TOKENS = 64


@dataclass
class _Round:
    kind: Literal["light", "deep"]
    reply: CitedAnswer
    memory_ids: list[str]
    turn_ids: list[str]


@dataclass
class _Run:
    """What one ``answer`` call has shown and received so far."""

    rounds: list[_Round] = field(default_factory=list)
    pool: list[str] = field(default_factory=list)
    context_tokens: int = 0
    prompt_tokens: int = 0
    garbage: int = 0
    deep: bool = False  # the deep module ran (even if none of its rounds gave an answer)

    lock: threading.Lock = field(default_factory=threading.Lock)  # retriever batches run in threads

    def shown(self, messages: list[ChatMessage], context_text: str) -> None:
        context = count_tokens(context_text)
        prompt = sum(count_tokens(m["content"]) for m in messages)
        with self.lock:
            self.context_tokens += context
            self.prompt_tokens += prompt


class HyMemAnswerer:
    def __init__(self, llm: LLMClient, settings: AnswerSettings) -> None:
        self.llm = llm
        self.s = settings

    def answer(self, query: str, search: SearchFn, turns: TurnsFn, *, mode: AnswerMode = "auto",
               max_rounds: int | None = None, light_k: int | None = None,
               reference_time: datetime | None = None) -> Answer:
        if not getattr(self.llm, "available", True):
            raise LLMUnavailableError(
                "answering needs an LLM: set llm.backend in the config (or the environment variable "
                "DIALOGMEM_LLM__BACKEND=openai|llama_cpp, with llm.base_url/llm.model or llm.model_path); "
                "search() returns the memories without one")
        run = _Run()
        rounds = max_rounds if max_rounds is not None else self.s.max_rounds
        if mode != "deep":
            self._light(query, search(query, light_k or self.s.light_k), run, reference_time)
            if mode == "light" or steps.sufficient(run.rounds[-1].reply):
                return self._finish(run)
        self._deep(query, search, turns, run, rounds, reference_time)
        if not run.rounds:  # deep mode and every deep round failed: answer lightly after all
            self._light(query, search(query, light_k or self.s.light_k), run, reference_time)
        return self._finish(run)

    # -- modules ------------------------------------------------------------------------------
    def _generate(self, question: str, lines: list[gen_prompt.ContextLine], run: _Run,
                  reference_time: datetime | None, stage: str) -> CitedAnswer:
        inline = self.s.citations == "inline"
        if inline:
            messages = gen_prompt.build_cited_answer_messages(question, lines, reference_time=reference_time,
                                                              abstain=True, notes=run.pool)
        else:
            messages = gen_prompt.build_short_answer_messages(question, lines, reference_time=reference_time,
                                                              abstain=True, numbered=False, notes=run.pool)
        run.shown(messages, gen_prompt.context_text(lines, numbered=inline))
        # a plain reply is read as a cited one too: line numbers a model adds anyway leave the answer
        reply = gen_prompt.parse_cited_answer(self.llm.complete(messages, stage=stage, max_tokens=_GEN_TOKENS),
                                              len(lines))
        if not inline:  # matched against one dated line each, whatever the layout shown
            reply = CitedAnswer(text=reply.text,
                                lines=steps.match_lines(reply.text, gen_prompt.render_lines(lines, numbered=False)))
        if not reply.text:
            run.garbage += 1
            record_fallback(self.llm, stage)
        return reply

    def _light(self, query: str, hits: list[SearchHit], run: _Run, reference_time: datetime | None) -> None:
        """The top memories that fit ``light_tokens``, shown as the reader's context lines (a line
        shared by neighbouring memories once) in excerpts of neighbouring turns; a cited line cites
        its memories and turns."""
        hits = with_validity(hits)  # "[until ...]" on a superseded memory's line: not read as current

        def cost(prefix: Sequence[SearchHit]) -> int:
            lines = steps.light_lines((stamp, text, ex) for stamp, _, text, ex in shown_text(prefix))
            return count_tokens(gen_prompt.context_text(lines))

        shown = shown_lines(steps.within_budget(hits, self.s.light_tokens, cost))
        lines = steps.light_lines((s.time_stamp, s.text, s.excerpt) for s in shown)
        reply = self._generate(query, lines, run, reference_time, "answer.light")
        mids, tids = steps.owners(steps.at_lines(shown, reply.lines))
        run.rounds.append(_Round("light", reply, mids, tids))

    def _deep(self, query: str, search: SearchFn, turns: TurnsFn, run: _Run, rounds: int,
              reference_time: datetime | None) -> None:
        asked = query
        run.deep = True
        for r in range(rounds):
            candidates = search(asked, self.s.deep_n)
            chosen = self._retrieve(asked, candidates, run)
            shown = steps.chronological(turns(steps.backtrack(chosen, self.s.max_turns)))
            try:
                reply = self._generate(query, steps.turn_lines(shown), run, reference_time, "answer.deep")
            except LLMError as exc:  # keep what the earlier rounds found
                log.warning("deep generator failed: %s; keeping the earlier answer", exc)
                record_fallback(self.llm, "answer.deep")
                run.garbage += 1
                return
            tids = steps.cited([t.id for t in shown], reply)
            run.rounds.append(_Round("deep", reply, steps.memories_of(tids, chosen), tids))
            if reply.text:
                run.pool.append(steps.note(asked, reply.text))
            if r + 1 >= rounds:
                return
            follow = self._reflect(query, run)
            if follow is None:
                return
            asked = follow

    def _retrieve(self, question: str, candidates: list[SearchHit], run: _Run) -> list[SearchHit]:
        """The candidates the retriever keeps, in rank order (the rule retriever: the top ones)."""
        rules = candidates[:self.s.rules_keep]
        if not candidates or not use_llm("answer.retriever", self.s.retriever, self.llm):
            return rules
        groups = steps.batches(candidates, self.s.batch_size)

        def judge(batch: list[SearchHit]) -> list[SearchHit]:
            def attempt() -> list[SearchHit]:
                lines = steps.hit_lines(batch)
                messages = deep_prompt.build_retrieve_messages(question, lines)
                run.shown(messages, gen_prompt.context_text(lines))
                raw = self.llm.complete(messages, stage="answer.retrieve", max_tokens=_PICK_TOKENS)
                if "[" not in raw and not any(ch.isdigit() for ch in raw):
                    raise LLMOutputError(f"retriever reply without line numbers: {raw[:80]!r}")
                return steps.at_lines(batch, gen_prompt.parse_line_numbers(raw, len(batch)))

            return with_fallback(self.llm, "answer.retrieve", attempt,
                                 lambda: [h for h in batch if h in rules], what="deep retriever batch")

        with ThreadPoolExecutor(max_workers=min(self.s.max_workers, len(groups))) as pool:
            kept = [h for picked in pool.map(judge, groups) for h in picked]
        return kept or rules

    def _reflect(self, query: str, run: _Run) -> str | None:
        """A follow-up question for the next round, or None to stop."""
        if not use_llm("answer.reflection", self.s.reflection, self.llm):
            return None

        def attempt() -> str | None:
            messages = deep_prompt.build_reflect_messages(query, run.pool)
            run.shown(messages, "")
            got = deep_prompt.parse_reflection(
                self.llm.complete(messages, stage="answer.reflect", max_tokens=_REFLECT_TOKENS))
            if not got.usable:
                raise LLMOutputError("reflection reply is neither DONE nor ASK: <question>")
            return None if got.done or got.question.strip().lower() == query.strip().lower() else got.question

        return with_fallback(self.llm, "answer.reflect", attempt, lambda: None, what="reflection")

    def _finish(self, run: _Run) -> Answer:
        kinds = [r.kind for r in run.rounds]
        i = steps.choose(kinds, [r.reply for r in run.rounds])
        deep_rounds = kinds.count("deep")
        chosen = run.rounds[i]
        mode: Literal["light", "deep"] = "deep" if run.deep else "light"
        self.llm.usage.record("answer", mode, calls=1, prompt_tokens=run.prompt_tokens)
        return Answer(text=chosen.reply.text, memory_ids=chosen.memory_ids, turn_ids=chosen.turn_ids,
                      mode=mode, used=chosen.kind, rounds=deep_rounds,
                      context_tokens=run.context_tokens, prompt_tokens=run.prompt_tokens,
                      garbage=run.garbage,
                      light_text=next((r.reply.text for r in run.rounds if r.kind == "light"), None))

