"""``python -m dialogmem.bench locomo --data ...`` (the same commands as ``dialogmem bench``)."""

from ._cli import bench_app

bench_app(prog_name="python -m dialogmem.bench")
