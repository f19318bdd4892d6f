"""Writes trace rows to one SQLite file (WAL mode), created user-only (0600)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from wsprof.trace.model import SCHEMA_VERSION
from wsprof.trace.schema import DDL, INSERT


class TraceWriter:
    """Appends batches of rows to a trace file.

    Not thread-safe: one thread (the recorder's writer thread, or a sampler) owns it.

    Args:
        path: trace file to create or append to.

    Raises:
        OSError: the folder cannot be created or the file cannot be opened.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if not os.path.exists(path):
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(DDL)
        self.set_meta({"schema_version": SCHEMA_VERSION})

    def set_meta(self, values: Mapping[str, Any]) -> None:
        """Store metadata values (JSON-encoded); later values replace earlier ones."""
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def write(self, batches: Mapping[str, Iterable[tuple[Any, ...]]]) -> None:
        """Write rows for several tables in one transaction.

        Args:
            batches: table name (calls, spans, counters, events, sites, stacks, samples) to rows
                in that table's column order.
        """
        self._db.execute("BEGIN")
        try:
            for table, rows in batches.items():
                self._db.executemany(INSERT[table], rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self._db.close()
