"""One stateless node for tests/storage/test_postgres_store.py: a separate process that opens the store
(PostgreSQL journal + its own in-process Qdrant index), adds turns for users that other workers
write too, flushes now and then, and reports the turn ids it was told were accepted and the batches
it extracted. With ``hang_marker`` it flushes the first user and hangs inside the extraction (to be
killed holding that user's lock)."""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from dialogmem import Memory


def main() -> None:
    args = json.loads(sys.argv[1])
    users: list[str] = args["users"]
    acked: dict[str, list[str]] = {u: [] for u in users}
    started = time.perf_counter()
    with Memory(data_dir=args["data_dir"], journal={"url": args["url"], "schema_name": args["schema"]},
                store={"backend": "qdrant", "url": ":memory:"}, write={"stm_threshold": args["stm_threshold"]}) as mem:
        extracted: list[list[str]] = []  # the turn ids of every batch this process extracted
        extractor = mem._parts.stages.extractor
        extract = extractor.extract

        def spy(batch: Any, **kw: Any) -> Any:
            extracted.append([t.turn_id for segment in batch for t in segment])
            if args.get("hang_marker"):  # a node that dies holding the user's batch: announce, then hang
                Path(args["hang_marker"]).write_text(json.dumps(extracted[-1]))
                time.sleep(600)
            return extract(batch, **kw)

        extractor.extract = spy  # type: ignore[method-assign]
        if args.get("no_lock"):  # the negative control: without the cross-process user lock
            mem._parts.journal.user_lock = lambda user_id: nullcontext()  # type: ignore[method-assign]
        if args.get("hang_marker"):
            mem.flush(users[0])
        for i in range(args["turns"]):
            user = users[(i + args["worker"]) % len(users)]
            tid = f"w{args['worker']}-{i}"
            text = f"I adopted a dog named Rex{args['worker']}x{i} and I live in city number {i} near the river."
            got = mem.add([{"role": "user", "content": text, "id": tid}], user)
            acked[user] += got.turn_ids
            if i % args["flush_every"] == args["flush_every"] - 1:
                mem.flush(user)
        for user in users:
            mem.flush(user)
    json.dump({"acked": acked, "extracted": extracted, "seconds": time.perf_counter() - started}, sys.stdout)


if __name__ == "__main__":
    main()
