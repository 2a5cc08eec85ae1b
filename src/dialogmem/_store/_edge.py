"""The embedded default: one Qdrant Edge shard in-process (HNSW, payload indexes, BM25, WAL)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from uuid import UUID

import qdrant_edge as q

from .._config import StoreConfig
from .._errors import DiskFullError, StoreError
from ._base import RecordSource
from ._filters import ConditionBuilder, FilterSpec, SearchSpec, translate
from ._payload import DENSE, FLOAT_FIELDS, KEYWORD_FIELDS, RRF_K, SPARSE, backend_errors
from ._room import MIB, DiskRoom, point_bytes
from ._scoped import Hit, ScopedIndex, Scored

log = logging.getLogger(__name__)

_CONFIG_FILE = "edge_config.json"

#: Threads of the shard's search pool (Edge's default is one per CPU, 8 seen on 2 cores). The pool
#: reads segments in parallel, and one user's memories are a small tenant slice of a segment, so
#: the threads buy nothing per search and compete with the query embedder for the cores: at 10^5
#: memories / 10^3 users on 2 cores, hybrid retrieve p95 1.7-1.8 ms with one thread against
#: 2.1-2.9 ms with the default, and Memory.search p95 7.6-8.3 against 9.5 ms.
SEARCH_THREADS = 1
#: MiB kept free beside what the index may claim (``store.min_free_mb``)
MIN_FREE_MB = 16
#: Dense vectors are kept twice: the float32 originals in memory-mapped files left on disk
#: (``Memory.Cold``: pages come in as a search touches them), and an int8 scalar-quantised copy in
#: RAM (a quarter of the size) that the HNSW graph walks. A search takes ``OVERSAMPLING`` times its
#: limit from the int8 copy and rescores them with the originals, so scores are the float32 ones.
#: One user's 10^5 memories opened: RSS 694 -> 585 MB, dense top-20 recall against an exact scan
#: 0.9935 -> 0.991 (0.9635 without oversampling), retrieval +0.7-1.4 ms; 10^6 open in 2.0 GB instead
#: of 3.6 (docs/benchmarks.md, "what an open store holds").
#: Segments written before this setting keep their placement until the optimizer rewrites them.
OVERSAMPLING = 2.0
_DENSE_PARAMS = q.SearchParams(quantization=q.QuantizationSearchParams(rescore=True, oversampling=OVERSAMPLING))
#: The files a search reads that Edge leaves on disk (memory-mapped, paged in on touch), as globs
#: under a segment: an indexed segment's float32 originals, which the rescoring reads; an appendable
#: segment's float32 chunks, which its exact scan reads; and BM25's posting lists. Closing a shard
#: drops their pages from the page cache, so a reopened store read them from disk one page a
#: candidate: at 10^6 memories a rescored dense top-40 took 5.3 ms against 1.2 ms cached; 10^5
#: memories over 10^3 users in one appendable segment, retrieval 6.5 against 2.0 ms. Opening asks
#: the kernel to read them ahead (``_read_ahead``), which costs no RSS until a search maps a page.
_SEARCHED_FILES = ("vector_storage-dense/matrix.dat", "vector_storage-dense/vectors/chunk_*.mmap",
                   "vector_index-bm25/inverted_index.dat")
_READ_AHEAD_STEP = 8 * MIB
#: Edge's default indexing threshold, KB of float32 vectors (``indexing_threshold_kb`` is read so too)
EDGE_INDEXING_KB = 10_000  # the kernel reads at most a few MiB a hint: hint the file part by part


class EdgeIndex(ScopedIndex):
    """``VectorIndex`` on a Qdrant Edge shard stored at ``path``.

    An existing shard is loaded (its data is never touched); a missing one is created. Upserts
    are visible to queries at once and logged to the shard's WAL; ``flush`` persists segments.
    Opening and every change first check the room on disk (``_room``): when the file system cannot
    hold what the shard's memory-mapped files may claim, ``DiskFullError`` is raised instead.
    """

    _label = "edge index"

    def __init__(self, path: Path, *, dim: int = 384, indexing_threshold_kb: int | None = None,
                 search_threads: int = SEARCH_THREADS, min_free_mb: int = MIN_FREE_MB,
                 segment_points: int | None = None, records: RecordSource | None = None) -> None:
        super().__init__(dim=dim, records=records)
        self.path = Path(path)
        self._room = DiskRoom(self.path, reserve=min_free_mb * MIB, label=self._label)
        existing = (self.path / _CONFIG_FILE).exists() or (self.path / "segments").exists()
        datatype = _stored_datatype(self.path) if existing else q.VectorStorageDatatype.Float16
        # Edge sizes segments and its indexing threshold in KB of stored vectors: float16 halves them,
        # so both are scaled to keep the point counts they meant with float32 (a graph is built for
        # the same ~6,700 points of MiniLM, a segment holds the same ``segment_points``)
        value_bytes = 2 if datatype == q.VectorStorageDatatype.Float16 else 4
        segment_kb = None if segment_points is None else max(1, segment_points * dim * value_bytes // 1024)
        if value_bytes != 4:
            indexing_threshold_kb = max(1, (indexing_threshold_kb or EDGE_INDEXING_KB) * value_bytes // 4)
        config = _edge_config(dim, indexing_threshold_kb, search_threads, segment_kb, datatype)
        # loading touches every page of the payload and vector files (on tmpfs that allocates them)
        self._room.check("open", opening_new=not existing)
        with backend_errors(f"opening the edge index at {self.path}"):
            if existing:
                # Passing the config makes the shard check that vectors match what it holds.
                self._shard = q.EdgeShard.load(str(self.path), config)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._shard = q.EdgeShard.create(str(self.path), config)
            self._ensure_indexes()
        if existing:
            _read_ahead(_searched_files(self.path / "segments"))
        log.debug("edge index %s %s", "loaded" if existing else "created", self.path)

    def _ensure_indexes(self) -> None:
        present = set(self._shard.info().payload_schema)
        wanted: dict[str, q.PayloadSchemaParams | q.PayloadSchemaType] = {
            "user_id": q.KeywordIndexParams(is_tenant=True)}
        wanted |= {f: q.PayloadSchemaType.Keyword for f in KEYWORD_FIELDS}
        wanted |= {f: q.PayloadSchemaType.Float for f in FLOAT_FIELDS}
        for name, schema in wanted.items():
            if name not in present:
                self._shard.update(q.UpdateOperation.create_field_index(name, schema))

    @classmethod
    def from_config(cls, path: Path, dim: int, store: StoreConfig, records: RecordSource | None = None
                    ) -> EdgeIndex:
        """The shard of a store whose settings are ``store`` (``search_threads``, ``min_free_mb``,
        ``segment_points``; ``index_records``: whether points keep a copy of their record even when
        ``records``, the journal's, gives them)."""
        return cls(path, dim=dim, search_threads=store.search_threads, min_free_mb=store.min_free_mb,
                   segment_points=store.segment_points, records=None if store.index_records else records)

    def optimize(self) -> bool:
        """Build HNSW/merge segments now (blocking). True if anything changed."""
        with self._io("optimize"):
            self._room.check("optimize", _occupied(self.path / "segments"))  # segments are rewritten
            return self._shard.optimize()

    def unindexed(self) -> int:
        """Points whose dense vector no HNSW graph holds yet (searched by an exact scan). The shard
        counts indexed vectors of both kinds, and the sparse (BM25) ones always are."""
        with self._io("info"):
            info = self._shard.info()
        return max(0, 2 * info.points_count - info.indexed_vectors_count)

    def build_index(self, min_points: int) -> int:
        """Put the points searched by exact scan into the HNSW graph when at least ``min_points``
        (> 0) wait. Blocks the process while it runs (qdrant-edge keeps the GIL): the caller picks
        the moment (``sleep``, the end of an import). Returns how many it indexed (the shard leaves
        a segment below its indexing threshold, about 10 MB of vectors, to exact scans)."""
        waiting = self.unindexed()
        if min_points <= 0 or waiting < min_points:
            return 0
        started = time.perf_counter()
        self.optimize()
        built = waiting - self.unindexed()
        log.info("indexed %d points of %s in %.1f s", built, self.path, time.perf_counter() - started)
        return built

    def info(self) -> q.ShardInfo:
        with self._io("info"):
            return self._shard.info()

    # -- primitives ----------------------------------------------------------------------------

    def _upsert(self, rows: list[tuple[str, list[float], q.SparseVector, dict]]) -> None:
        points = [q.Point(pid, {DENSE: dense, SPARSE: sparse}, payload)
                  for pid, dense, sparse, payload in rows]
        self._shard.update(q.UpdateOperation.upsert_points(points))

    def _set_payload(self, id: str, spec: FilterSpec, payload: dict,
                     sparse: q.SparseVector | None) -> None:
        flt = _filter(spec)
        self._shard.update(q.UpdateOperation.set_payload_by_filter(flt, payload))
        if sparse is not None:
            self._shard.update(q.UpdateOperation.update_vectors(
                [q.PointVectors(id, {SPARSE: sparse})], flt))

    def _delete(self, spec: FilterSpec) -> None:
        self._shard.update(q.UpdateOperation.delete_points_by_filter(_filter(spec)))

    def _count(self, spec: FilterSpec) -> int:
        return self._shard.count(q.CountRequest(exact=True, filter=_filter(spec)))

    def _scroll(self, spec: FilterSpec, limit: int, offset: str | None, with_vectors: bool
                ) -> tuple[list[Hit], str | None]:
        records, nxt = self._shard.scroll(q.ScrollRequest(
            offset=offset, limit=limit, filter=_filter(spec), with_payload=True,
            with_vector=[DENSE] if with_vectors else False))
        return [(str(r.id), r.payload, r.vector) for r in records], (None if nxt is None else str(nxt))

    def _fetch(self, ids: list[str], with_vectors: bool) -> list[Hit]:
        wanted: list[int | UUID | str] = [*ids]
        return [(str(r.id), r.payload, r.vector)
                for r in self._shard.retrieve(wanted, True, [DENSE] if with_vectors else False)]

    def _query(self, specs: list[SearchSpec]) -> list[list[Scored]]:
        requests = [_request(s) for s in specs]
        if len(requests) == 1:
            answers = [self._shard.query(requests[0])]
        else:
            answers = self._shard.query_batch(q.QueryBatchRequest(requests))
        return [[(str(p.id), p.payload, p.score) for p in points] for points in answers]

    def _make_room(self, operation: str, points: int, *, keep_reserve: bool = False) -> None:
        self._room.check(operation, points * point_bytes(self.dim), keep_reserve=keep_reserve)

    def _flush(self) -> None:
        self._shard.flush()

    def _close(self) -> None:
        try:
            try:
                self._make_room("close", 0)
            except DiskFullError as exc:  # nothing is lost: the WAL holds every change, replayed at load
                log.warning("closing %s without flushing its segments: %s", self.path, exc)
            else:
                self._shard.flush()
        finally:
            self._shard.close()


def _searched_files(segments: Path) -> list[Path]:
    """The files of ``_SEARCHED_FILES`` in every segment under ``segments``."""
    return sorted(f for seg in segments.glob("*") for pattern in _SEARCHED_FILES for f in seg.glob(pattern))


def _read_ahead(files: list[Path]) -> int:
    """Ask the kernel to read ``files`` into the page cache in the background (``posix_fadvise``
    WILLNEED; nothing is copied into this process), as many of them, in order, as fit in half the
    memory available; returns the bytes hinted (0: none, or not a POSIX system). Only a hint: any
    error is logged and the store opens as it would without it (a search reads the pages itself)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return 0
    budget, hinted = _available_memory() // 2, 0
    for path in files:
        try:
            if not path.is_file() or hinted + path.stat().st_size > budget:
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                for start in range(0, size, _READ_AHEAD_STEP):
                    advise(fd, start, _READ_AHEAD_STEP, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)
            hinted += size
        except OSError as exc:
            log.info("not reading ahead %s: %s", path, exc)
    log.debug("read ahead %d bytes of search files (budget %d)", hinted, budget)
    return hinted


def _available_memory() -> int:
    """Bytes this process could still fill without pushing anything out: the kernel's
    ``MemAvailable`` (free + reclaimable cache), capped by a cgroup v2 memory limit when one is set;
    0 when neither can be read."""
    found = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit.isdigit():
            found = min(found, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit to honour
    return found


def _occupied(path: Path) -> int:
    """Bytes the files under ``path`` occupy on disk."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def _stored_datatype(path: Path) -> q.VectorStorageDatatype:
    """The dense vectors' storage type of the shard at ``path``, which loading must repeat: float16
    since this release, float32 for a shard created before (its config file names none). A shard
    without a readable config file is one Edge itself will judge when it loads."""
    try:
        saved = json.loads((path / _CONFIG_FILE).read_text(encoding="utf-8"))["vectors"][DENSE]
    except (OSError, ValueError, KeyError, TypeError):
        return q.VectorStorageDatatype.Float32
    if saved.get("datatype") == "float16":
        return q.VectorStorageDatatype.Float16
    return q.VectorStorageDatatype.Float32


def _edge_config(dim: int, indexing_threshold_kb: int | None, search_threads: int,
                 segment_kb: int | None = None,
                 datatype: q.VectorStorageDatatype = q.VectorStorageDatatype.Float16) -> q.EdgeConfig:
    # Without a largest segment size every build merged the new points into one segment and rebuilt
    # the whole graph: at 10^5 points of one user, 11-34 s per build whatever was new; capped, a
    # build costs the new points (measured in this commit's note).
    optimizers = (q.EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb, max_segment_size=segment_kb)
                  if indexing_threshold_kb is not None or segment_kb is not None else None)
    return q.EdgeConfig(
        # Originals in float16 (768 B a MiniLM vector instead of 1,536): every index stores half
        # precision values (``_payload.half_precision``), so float16 holds them exactly.
        vectors={DENSE: q.EdgeVectorParams(
            size=dim, distance=q.Distance.Cosine, memory=q.Memory.Cold, datatype=datatype,
            quantization_config=q.ScalarQuantizationConfig(type=q.ScalarType.Int8, quantile=0.99,
                                                           memory=q.Memory.Cached))},
        sparse_vectors={SPARSE: q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)},
        optimizers=optimizers,
        # Every search returns its hits' payloads (their filter fields; the records too where a point
        # keeps one, ``store.index_records``: ~130 B a memory without, ~470 with). Edge's default placement
        # ("Cold", segment type mmap) leaves them on disk, and closing a shard drops its pages from
        # the page cache, so a reopened store reads payloads from disk per query: filtered top-10 at
        # 10^5 points, reopened, p50 0.53-1.09 ms against 0.13-0.18 ms with "Cached" (in_ram_mmap,
        # loaded into RAM at open; about 0.7 KB a memory). It applies to segments created from now
        # on: an existing segment keeps its type until the optimizer rewrites it.
        payload_memory=q.Memory.Cached,
        max_search_threads=search_threads,
    )


def _request(spec: SearchSpec) -> q.QueryRequest:
    flt = _filter(spec.filter)
    if spec.dense is not None and spec.sparse is not None:  # spec.hybrid, spelt out so both narrow
        prefetches = [
            q.Prefetch(limit=spec.prefetch_limit, query=q.Query.Nearest(spec.dense, using=DENSE),
                       params=_DENSE_PARAMS, filter=flt),
            q.Prefetch(limit=spec.prefetch_limit, query=q.Query.Nearest(spec.sparse, using=SPARSE),
                       filter=flt),
        ]
        # The stub declares Fusion.Rrf as a plain nested class; at runtime it subclasses Fusion.
        return q.QueryRequest(limit=spec.limit, prefetches=prefetches,
                              query=q.Fusion.Rrf(k=RRF_K),  # type: ignore[arg-type]
                              filter=flt, with_payload=spec.with_payload)
    params = None
    if spec.dense is not None:
        query, params = q.Query.Nearest(spec.dense, using=DENSE), _DENSE_PARAMS
    elif spec.sparse is not None:
        query = q.Query.Nearest(spec.sparse, using=SPARSE)
    else:
        raise StoreError("a search needs a dense or a sparse vector")
    return q.QueryRequest(limit=spec.limit, query=query, params=params, filter=flt, with_payload=spec.with_payload)


def _filter(spec: FilterSpec) -> q.Filter:
    builder: ConditionBuilder[q.ConditionType] = _Conditions()  # Filter takes lists of this stub union
    must, must_not = translate(spec, builder)
    return q.Filter(must=must, must_not=must_not)


class _Conditions:
    def match(self, key: str, value: str) -> q.FieldCondition:
        return q.FieldCondition(key, match=q.MatchValue(value))

    def match_any(self, key: str, values: list[str]) -> q.FieldCondition:
        return q.FieldCondition(key, match=q.MatchAny(values))

    def range(self, key: str, gte: float | None, lte: float | None) -> q.FieldCondition:
        return q.FieldCondition(key, range=q.RangeFloat(gte=gte, lte=lte))

    def has_id(self, ids: list[str]) -> q.HasIdCondition:
        return q.HasIdCondition(set(ids))
