"""Validated settings of the write path, read path and sleep time (the free-form config sections)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: the dense side's weight in convex fusion (read.dense_weight; measured in _store/_fusion.py)
DENSE_WEIGHT = 0.4


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WriteSettings(_Section):
    """``None`` / ``"auto"`` choose by whether an LLM extracts: with one, turns are segmented by
    topic and batched (512-token sensory buffer, ``stm_threshold`` 512) so each call sees whole
    topics; without one, each turn becomes a memory as soon as it is added, with the turns before it
    as context (``context_turns``)."""

    compressor: Literal["none", "entropy", "llmlingua2"] = "none"
    compress_rate: float = Field(0.6, gt=0.0, le=1.0)
    compressor_model: str | None = None  # GGUF for entropy, model dir for llmlingua2
    segmenter: Literal["auto", "none", "similarity", "attention"] = "auto"
    sensory_tokens: int | None = Field(None, ge=0)
    stm_threshold: int | None = Field(None, ge=0)
    extractor: Literal["auto", "llm", "rules"] = "auto"
    llm_facts: Literal["enrich", "memories"] = Field("enrich", description=(
        "What the LLM extractor's facts become. enrich: every turn keeps the memory the LLM-free path "
        "writes, and a fact adds its words to the lexical view of the memories of the turns it cites; "
        "memories: each fact is a memory of its own, LLM-free memories only for turns no fact covers. "
        "Measured with the reference 1.5B model (README): facts as memories lose evidence recall "
        "(they cite one turn and lose the turn's wording), enrich keeps the LLM-free recall."))
    events: Literal["off", "auto", "llm"] = Field("off", description=(
        "HyMem's event units: each topic segment (with the last event_overlap turns before it) "
        "summarised by the LLM into one extra memory saying who, what, when and where, citing the "
        "segment's turns (memory_class 'event'), beside the extractor's memories. auto: when an LLM "
        "is configured; llm: required. Turns are then buffered and segmented by topic as for the LLM "
        "extractor. off by default: measured with the reference 1.5B model (README)."))
    event_turns: int = Field(10, ge=2, le=64, description=(
        "Most turns in one event unit: consecutive topic segments are packed up to this many "
        "turns, a longer segment is cut in pieces."))
    event_overlap: int = Field(2, ge=0, le=8, description=(
        "Turns before a unit (same session) shown with it and cited by its summary."))
    context_turns: int = Field(2, ge=0, le=4, description=(
        "LLM-free memories carry this many preceding turns of their session as context (and cite "
        "them). 2 (was 1): LoCoMo dev conv-26+30, evidence recall@10 0.774 -> 0.821 and at "
        "256/512/1024 context tokens 0.610/0.723/0.810 -> 0.627/0.763/0.835 (compact context "
        "rendering in both)."))
    vectors: Literal["auto", "text", "turns"] = Field("text", description=(
        "How a rule memory's vector is made (the LLM-free extractor's, also under 'enrich'). turns: "
        "from its turns' line vectors, each line embedded once while it is remembered (4,096 lines, "
        "per user), so a turn arriving alone costs one embedding of its own line. With the local "
        "embedder (mean-pooled MiniLM) each line weighs its mass, token count times the norm of its "
        "mean before normalisation, i.e. the memory's vector is about what embedding its text would "
        "give, each context turn (clipped as in the text) weighing 0.75 of its mass; an embedder without "
        "masses weighs the own turn 1 and each context turn 0.5. text: its text (the turn and its context turns) "
        "embedded as one. auto: turns where the embedder gives masses, text elsewhere. Other memories "
        "(an LLM's, the per-turn writer's, merged ones) and any later re-embedding (an edit, an import "
        "without vectors) embed the text. LoCoMo dev (docs/benchmarks.md): auto ingests x1.8-2.4 "
        "faster than text; against text in one session evidence recall@10 -0.001, at 512 tokens -0.004, "
        "session_any -0.002 / 0.000, but session_all@10 -0.006, so text stays the default for now."))
    # Bounds on what one message may carry (checked before anything is written).
    max_turn_chars: int = Field(200_000, gt=0, le=10_000_000)
    max_metadata_bytes: int = Field(65_536, gt=0, le=10_000_000)
    # -- SimpleMem write path (seed 003 §2.1-2.2) and the per-turn writer (seed 000 Algorithm 2)
    window_turns: int | None = Field(None, ge=1, le=64, description=(
        "Sliding-window extraction: W turns per window, the last `stride` of them the window's "
        "targets and the turns before them (the previous batch's last turns included) read-only "
        "context; every turn is a target of exactly one window. None: one extraction per batch."))
    stride: int | None = Field(None, ge=1, le=64, description=(
        "Targets per window (1 <= stride <= window_turns); None: half the window, at least 1."))
    coref: bool = Field(False, description=(
        "LLM-free coreference: pronouns of a turn resolved by rules against the preceding turns of "
        "its session (from earlier batches too), the referent appended in brackets. The LLM "
        "extractor resolves them in its prompt."))
    synthesis: Literal["off", "duplicates", "auto", "llm", "rules"] = Field("off", description=(
        "Online semantic synthesis at write time: a new memory merged with near-duplicate or "
        "same-entity memories of the same user and session (LLM: one statement; rules: lossless "
        "line merge); history keeps every version. duplicates: near-duplicates only, by the rule. "
        "off: each memory stays as extracted."))
    synthesis_min_cosine: float = Field(0.8, ge=-1.0, le=1.0, description=(
        "Cosine a stored memory needs to the new one to be a synthesis candidate."))
    synthesis_cross_session: bool = Field(False, description=(
        "Let synthesis merge memories of different sessions of the same user."))
    mode: Literal["batch", "turn"] = Field("batch", description=(
        "batch: extraction over buffered batches (LightMem/SimpleMem); turn: one concise item per "
        "interaction (a turn and the reply to it) written when the interaction is complete, "
        "redundant items merged or rewritten, conflicts settled by time and evidence."))
    turn_writer: Literal["auto", "llm", "rules"] = Field("auto", description=(
        "Backend of mode='turn': the LLM summary (turnwrite prompt) or the LLM-free rule item."))

    @model_validator(mode="after")
    def _consistent(self) -> WriteSettings:
        if self.events != "off" and self.mode == "turn":
            raise ValueError("write.events summarises topic segments of batches: it needs write.mode = 'batch'")
        if self.stride is not None:
            if self.window_turns is None:
                raise ValueError("write.stride needs write.window_turns")
            if self.stride > self.window_turns:
                raise ValueError(f"write.stride ({self.stride}) must be <= write.window_turns "
                                 f"({self.window_turns})")
        return self

    def window_stride(self) -> tuple[int, int] | None:
        """(W, stride) of sliding-window extraction, or None when it is off."""
        if self.window_turns is None:
            return None
        return self.window_turns, self.stride or max(1, self.window_turns // 2)


class ReadSettings(_Section):
    planner: Literal["auto", "llm", "rules"] = "rules"
    selector: Literal["auto", "llm", "rules"] = "rules"
    fusion: Literal["convex", "rrf"] = Field("convex", description=(
        "How a view's dense and BM25 results are fused: convex, dense_weight times the dense score "
        "plus the rest times the BM25 score, each min-max normalised over its list (one batch request "
        "of ids and scores, then the fused top hits' payloads); rrf, reciprocal rank fusion inside the "
        "index (one query). Measured in _store/_fusion.py."))
    dense_weight: float = Field(DENSE_WEIGHT, ge=0.0, le=1.0, description=(
        "The dense side's weight in convex fusion (0: BM25 alone, 1: dense alone)."))

    def fusion_weight(self) -> float | None:
        """What ``VectorIndex.hybrid_search`` takes as ``dense_weight``: None for RRF."""
        return None if self.fusion == "rrf" else self.dense_weight
    # access_count / last_accessed of the hits, batched and written outside the search itself
    track_access: bool = True
    max_query_chars: int = Field(4_000, gt=0, le=1_000_000)


class AnswerSettings(_Section):
    """``Memory.answer`` (seed 004 HyMem §3.2-3.4): a light round over the top memories, and on missing
    information a deep round (LLM retriever over more candidates, back to their raw turns) with reflection."""

    mode: Literal["auto", "light", "deep"] = Field("auto", description=(
        "auto: light first, deep only when the light answer reports missing information; light: one "
        "generator call over the top memories; deep: straight to the deep module."))
    light_k: int = Field(10, ge=1, le=200, description="Memories (L1) the light generator sees at most (k).")
    light_tokens: int | None = Field(512, ge=32, le=100_000, description=(
        "Context tokens the light generator sees at most: of the top light_k memories, those that fit in "
        "rank order (at least one). None: all light_k. 512 (the default) measured with the 1.5B reader "
        "and the plain prompt (README): F1 0.551 at 600 prompt tokens a question."))
    citations: Literal["match", "inline"] = Field("match", description=(
        "How the generator's answer gets its lines. match: the plain short-answer prompt (unnumbered "
        "lines), and the lines sharing the most words with the answer are cited, without a model; "
        "inline: the model writes the numbers of its lines after the answer. Measured with the 1.5B "
        "reader (README): match F1 0.551 against inline 0.490 on the same contexts."))
    deep_n: int = Field(30, ge=1, le=200, description="Candidate memories the deep retriever judges (N).")
    batch_size: int = Field(10, ge=1, le=200, description=(
        "Candidates per retriever call (d); the batches run in parallel."))
    max_workers: int = Field(4, ge=1, le=64, description="Threads for the retriever batches.")
    max_rounds: int = Field(1, ge=1, le=5, description=(
        "Deep rounds at most (T); with 2 or more, reflection between rounds may stop earlier or rewrite "
        "the question. 1 (the default; HyMem uses 2): measured with the 1.5B reader (README), a second "
        "round doubled the deep module's cost (about 10k prompt tokens and 65 s a question) and changed "
        "no answer; set 2 for a stronger model."))
    max_turns: int = Field(20, ge=1, le=200, description=(
        "Raw turns (L2) shown to the deep generator at most, those of the best-ranked memories first."))
    retriever: Literal["auto", "llm", "rules"] = Field("auto", description=(
        "Deep retriever backend: llm picks the relevant candidates; rules keeps the top rules_keep."))
    rules_keep: int = Field(5, ge=1, le=200, description=(
        "Candidates the rule retriever keeps (also used when the LLM retriever picks none)."))
    reflection: Literal["auto", "llm", "rules"] = Field("auto", description=(
        "Reflection backend between deep rounds: llm checks the answers and may ask a sub-question; "
        "rules never rewrites (one deep round)."))


class SleepSettings(_Section):
    updater: Literal["auto", "llm", "rules"] = "auto"
    # the LLM-free change detector at sleep time: older memories a new one replaces ("I moved to
    # Leeds") are marked superseded (kept, with invalid_at / superseded_by). Off by default: on
    # LoCoMo's real dialogue it was right in 2 of the 12 supersessions it made (hand-checked), and a
    # wrong one marks a true fact stale. With an LLM updater the LLM decides, whatever this says.
    supersede_rules: bool = False
    top_k: int = Field(20, ge=1)
    keep_top_n: int = Field(10, ge=1)
    score_threshold: float = Field(0.8, ge=-1.0, le=1.0)
    max_workers: int = Field(4, ge=1, le=64)
    # -- memory tiers (seed 000 §3.5-3.6) --
    # B of eq. 6: a user's active MTM items after ``sleep()``; beyond it the lowest-utility items
    # are compressed into near-duplicates or evicted (they stay readable with ``get``, leave search,
    # and feed LTM consolidation). The default is far above what a LoCoMo conversation produces.
    mtm_capacity: int = Field(100_000, ge=1)
    # The shared, de-identified LTM graph: consolidated by ``sleep()``, searched by the ``ltm`` route.
    ltm: bool = True
    # Backend of LTM abstraction: "llm" (the consolidation prompt, one call per 20 memories of each
    # cycle), "rules" (co-occurrence graph), "auto". "rules" by default: an LLM is only spent on it
    # when asked for.
    consolidator: Literal["auto", "llm", "rules"] = "rules"
    # Of the K search results, at most this many are LTM graph facts for a question about the user
    # (a personal reference: a pronoun or a speaker's name), and never more than K // 10 (the top ranks stay
    # the user's own memories); a general question gets up to K // 2.
    ltm_search_hits: int = Field(2, ge=0, le=50)
    # A graph node is a search hit only with at least this cosine to the query.
    ltm_min_score: float = Field(0.45, ge=-1.0, le=1.0)
    # k-anonymity of the shared graph: a node or edge is shown to a user (search, ``graph``) only
    # when that user's own memories support it or at least this many distinct users' memories do
    # (an edge also needs both ends shown). Consolidation still learns from everyone.
    ltm_min_users: int = Field(3, ge=2, le=1000)


class ServerSettings(_Section):
    """``dialogmem serve`` and ``dialogmem mcp``: where they listen and what one request may carry."""

    host: str = "127.0.0.1"  # listen address; 0.0.0.0 to serve other machines (keys are required)
    port: int = Field(8420, ge=1, le=65535)
    # a request body over this many bytes gets 413 before it is parsed
    max_body_bytes: int = Field(4_194_304, ge=1024, le=1_073_741_824)
    # a POST /v1/import body (streamed to a temporary file, not held in memory) over this gets 413
    max_import_bytes: int = Field(1_073_741_824, ge=1024, le=1_099_511_627_776)
    # messages in one POST /v1/memories, and turns in one POST /v1/conversations (422 above)
    max_batch_messages: int = Field(100, ge=1, le=100_000)
    max_conversation_turns: int = Field(10_000, ge=1, le=1_000_000)
    # worker threads for the (blocking) memory verbs; one slow call holds one thread only
    threads: int = Field(32, ge=2, le=512)
    # finished sleep jobs remembered for GET /v1/sleep/{job_id} (oldest dropped first)
    sleep_jobs_kept: int = Field(200, ge=1, le=100_000)
    # the user a stdio MCP server acts for (``dialogmem mcp --user`` overrides it)
    mcp_user: str | None = None
    # seconds a request body may take to arrive in full (408 and the connection closed after)
    body_timeout_s: float = Field(15.0, gt=0, le=3600)
    # seconds an idle keep-alive connection is kept open between requests
    keep_alive_s: int = Field(5, ge=1, le=3600)
    # requests per second one API key may make on average, and how many at once above that rate
    # (token bucket; 429 with Retry-After past it); 0: unlimited
    requests_per_second: float = Field(100.0, ge=0, le=1_000_000)
    request_burst: int = Field(200, ge=1, le=1_000_000)
    # requests of one key that may be running at once on the routes that can call the LLM (answer,
    # search, add, conversations, MCP tool calls); 429 with Retry-After past it; 0: unlimited
    llm_calls_per_key: int = Field(8, ge=0, le=10_000)
    # the inspector's sign-in form: attempts one client address, and one key, may make at once, and
    # then per minute (429 with Retry-After past either; wrong keys count too)
    ui_signin_burst: int = Field(20, ge=1, le=1_000_000)
    ui_signins_per_minute: float = Field(10.0, gt=0, le=1_000_000)
