"""What keeps the vector index a faithful copy of the journal: the one change writer (journal
transaction, then the index through an outbox), repair, checks at open, the embedder record, the access
log and the graph-node index."""
