"""A Qdrant server or cluster through ``qdrant-client``, with the same data model as the Edge shard.

BM25 sparse vectors are computed here with the same ``qdrant_edge.Bm25`` the Edge adapter uses and
sent as plain sparse vectors to a ``bm25`` vector with the IDF modifier, so both adapters tokenize
and score text identically and no inference model is needed on either side.
"""

from __future__ import annotations

import logging

import qdrant_edge
from qdrant_client import QdrantClient
from qdrant_client import models as m

from .._errors import StoreError
from ._filters import FilterSpec, SearchSpec, translate
from ._payload import DENSE, FLOAT_FIELDS, KEYWORD_FIELDS, RRF_K, SPARSE, backend_errors
from ._scoped import Hit, ScopedIndex, Scored

log = logging.getLogger(__name__)


class RemoteIndex(ScopedIndex):
    """``VectorIndex`` on a Qdrant collection; ``url=":memory:"`` runs qdrant-client in-process.

    The collection is created only when it does not exist; an existing one must have a ``dense``
    vector of size ``dim``. ``read_only``: nothing is created (a missing collection is an error).
    """

    _label = "qdrant index"

    def __init__(self, url: str, *, api_key: str | None = None, collection: str = "dialogmem",
                 dim: int = 384, read_only: bool = False) -> None:
        super().__init__(dim=dim)
        self.collection = collection
        with backend_errors(f"connecting to qdrant at {url}"):
            if url == ":memory:":
                self._client = QdrantClient(":memory:")
            else:
                self._client = QdrantClient(url=url, api_key=api_key)
            if not self._client.collection_exists(collection):
                if read_only:
                    raise StoreError(f"qdrant has no collection {collection!r}: open the store read-write "
                                     "once to create it")
                self._create()
            self._check_and_index(read_only=read_only)

    def _create(self) -> None:
        self._client.create_collection(
            self.collection,
            vectors_config={DENSE: m.VectorParams(size=self.dim, distance=m.Distance.COSINE)},
            sparse_vectors_config={SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF)},
        )
        log.info("created qdrant collection %s", self.collection)

    def reset(self) -> None:
        """Drop the collection and create it empty (a rebuild from the journal follows)."""
        with self._io("reset"):
            self._client.delete_collection(self.collection)
            self._create()
            self._check_and_index()

    def _check_and_index(self, *, read_only: bool = False) -> None:
        info = self._client.get_collection(self.collection)
        vectors = info.config.params.vectors
        dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
        if dense is None or dense.size != self.dim:
            found = "none" if dense is None else dense.size
            raise StoreError(f"collection {self.collection!r} has no {DENSE!r} vector of size "
                             f"{self.dim} (found {found})")
        if read_only:  # searches work without the payload indexes, only slower
            return
        present = set(info.payload_schema or {})
        wanted: dict[str, m.KeywordIndexParams | m.PayloadSchemaType] = {
            "user_id": m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, is_tenant=True)}
        wanted |= {f: m.PayloadSchemaType.KEYWORD for f in KEYWORD_FIELDS}
        wanted |= {f: m.PayloadSchemaType.FLOAT for f in FLOAT_FIELDS}
        for name, schema in wanted.items():
            if name not in present:
                self._client.create_payload_index(self.collection, name, field_schema=schema)

    # -- primitives ----------------------------------------------------------------------------

    def _upsert(self, rows: list[tuple[str, list[float], qdrant_edge.SparseVector, dict]]) -> None:
        points = [m.PointStruct(id=pid, vector={DENSE: dense, SPARSE: _sparse(sparse)},
                                payload=payload)
                  for pid, dense, sparse, payload in rows]
        self._client.upsert(self.collection, points=points, wait=True)

    def _set_payload(self, id: str, spec: FilterSpec, payload: dict,
                     sparse: qdrant_edge.SparseVector | None) -> None:
        flt = _filter(spec)
        self._client.set_payload(self.collection, payload=payload, points=flt, wait=True)
        if sparse is not None:
            self._client.update_vectors(
                self.collection, points=[m.PointVectors(id=id, vector={SPARSE: _sparse(sparse)})],
                update_filter=flt, wait=True)

    def _delete(self, spec: FilterSpec) -> None:
        self._client.delete(self.collection, points_selector=m.FilterSelector(filter=_filter(spec)),
                            wait=True)

    def _count(self, spec: FilterSpec) -> int:
        return self._client.count(self.collection, count_filter=_filter(spec), exact=True).count

    def _scroll(self, spec: FilterSpec, limit: int, offset: str | None, with_vectors: bool
                ) -> tuple[list[Hit], str | None]:
        records, nxt = self._client.scroll(
            self.collection, scroll_filter=_filter(spec), limit=limit, offset=offset,
            with_payload=True, with_vectors=[DENSE] if with_vectors else False)
        return [(str(r.id), r.payload, r.vector) for r in records], (None if nxt is None else str(nxt))

    def _fetch(self, ids: list[str], with_vectors: bool) -> list[Hit]:
        records = self._client.retrieve(self.collection, ids=ids, with_payload=True,
                                        with_vectors=[DENSE] if with_vectors else False)
        return [(str(r.id), r.payload, r.vector) for r in records]

    def _query(self, specs: list[SearchSpec]) -> list[list[Scored]]:
        requests = [_request(s) for s in specs]
        answers = self._client.query_batch_points(self.collection, requests=requests)
        return [[(str(p.id), p.payload, p.score) for p in answer.points] for answer in answers]

    def _make_room(self, operation: str, points: int, *, keep_reserve: bool = False) -> None:
        # The server keeps its own disk: a full one answers an error (StoreError) instead of a crash here.
        return None

    def _flush(self) -> None:
        # Every write above waits for the server's acknowledgement; durability is the server's.
        return None

    def _close(self) -> None:
        self._client.close()


def _sparse(vector: qdrant_edge.SparseVector) -> m.SparseVector:
    return m.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _request(spec: SearchSpec) -> m.QueryRequest:
    flt = _filter(spec.filter)
    if spec.hybrid and spec.sparse is not None:
        prefetch = [
            m.Prefetch(query=spec.dense, using=DENSE, limit=spec.prefetch_limit, filter=flt),
            m.Prefetch(query=_sparse(spec.sparse), using=SPARSE, limit=spec.prefetch_limit,
                       filter=flt),
        ]
        return m.QueryRequest(prefetch=prefetch, query=m.RrfQuery(rrf=m.Rrf(k=RRF_K)), filter=flt,
                              limit=spec.limit, with_payload=spec.with_payload)
    if spec.dense is not None:
        return m.QueryRequest(query=spec.dense, using=DENSE, filter=flt, limit=spec.limit,
                              with_payload=spec.with_payload)
    if spec.sparse is not None:
        return m.QueryRequest(query=_sparse(spec.sparse), using=SPARSE, filter=flt,
                              limit=spec.limit, with_payload=spec.with_payload)
    raise StoreError("a search needs a dense or a sparse vector")


def _filter(spec: FilterSpec) -> m.Filter:
    must, must_not = translate(spec, _Conditions())
    return m.Filter(must=must, must_not=must_not)


class _Conditions:
    def match(self, key: str, value: str) -> m.FieldCondition:
        return m.FieldCondition(key=key, match=m.MatchValue(value=value))

    def match_any(self, key: str, values: list[str]) -> m.FieldCondition:
        return m.FieldCondition(key=key, match=m.MatchAny(any=values))

    def range(self, key: str, gte: float | None, lte: float | None) -> m.FieldCondition:
        return m.FieldCondition(key=key, range=m.Range(gte=gte, lte=lte))

    def has_id(self, ids: list[str]) -> m.HasIdCondition:
        return m.HasIdCondition(has_id=ids)
