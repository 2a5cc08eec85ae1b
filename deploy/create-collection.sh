#!/usr/bin/env sh
# Creates dialogmem's collection replicated over the Qdrant cluster, before the first API node writes
# (a node creates it unreplicated when it is missing). Same vectors as dialogmem's RemoteIndex:
# "dense" (size = embedder.dim, cosine) and sparse "bm25" with the IDF modifier. NOT RUN here.
set -eu
QDRANT_URL="${QDRANT_URL:-http://localhost:6333}"
DIM="${DIM:-384}"
curl -fsS -X PUT "$QDRANT_URL/collections/${COLLECTION:-dialogmem}" -H 'Content-Type: application/json' -d "{
  \"vectors\": {\"dense\": {\"size\": $DIM, \"distance\": \"Cosine\"}},
  \"sparse_vectors\": {\"bm25\": {\"modifier\": \"idf\"}},
  \"shard_number\": ${SHARDS:-3},
  \"replication_factor\": ${REPLICAS:-2},
  \"write_consistency_factor\": 1
}"
