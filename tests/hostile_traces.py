"""Hostile traces, each built from a real trace written by the real :class:`TraceWriter` and
then edited the way an attacker (or a damaged disk) would: views and triggers in the schema, a
``-wal`` or hot ``-journal`` beside a closed trace, a zlib bomb, a hook id of 10^15 in a killed
trace's ring, 65 KB py-spy frames. Shared by the unit tier (``tests/unit/test_trace_hostile.py``)
and the command-line tier (``tests/integration/test_trace_hostile_cli.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import struct
import zlib
from pathlib import Path

from wsprof.trace import journal as jfmt
from wsprof.trace import ring as fmt
from wsprof.trace.writer import TraceWriter

#: Steps and calls of :func:`write_trace`.
STEPS, CALLS_PER_STEP = 6, 200
#: A recursive common table expression that never ends.
ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
#: The hook id of :func:`killed_trace_with_hook`.
HUGE_HOOK = 10**15


def _call(t0: int, step: int) -> tuple[object, ...]:
    return (t0, t0 + 1000, 600, 1, 7, "broadcast", "dist.broadcast", "api", 64, "float32",
            "0", 0, 0, step, "weight_sync", None)  # fmt: skip


def write_trace(
    path: Path, meta: dict[str, object] | None = None, frames: list[str] | None = None
) -> Path:
    """A closed trace like ``wsprof.patch()`` writes: steps of broadcasts, spans, counters, and
    py-spy samples of ``frames`` (one stack, a sample window per 10 ms) when given."""
    w = TraceWriter(str(path))
    w.set_meta({"pid": 4242, "rank": 0, "world_size": 1, "host": "h", **(meta or {})})
    step_ns = 10**9
    for s in range(STEPS):
        t = s * step_ns
        batch: dict[str, list[tuple[object, ...]]] = {
            "sites": [(0, "train.py", 42, "sync_weights")],
            "calls": [_call(t + 1000 * i, s) for i in range(CALLS_PER_STEP)],
            "spans": [
                ("step", str(s), t, t + step_ns - 1, s, 7),
                ("phase", "weight_sync", t, t + 10**6, s, 7),
            ],
            "counters": [(t, "cuda.segments", float(s))],
        }
        if frames is not None:
            batch["stacks"] = [(0, json.dumps(frames))]
            batch["samples"] = [
                (t + k * 10**7, t + (k + 1) * 10**7, 4242, 7, 0, 1) for k in range(100)
            ]
        w.write(batch)
    w.close()
    return path


def edit(path: Path, *sql: str) -> Path:
    """Run ``sql`` on the trace (then closed: no ``-wal`` left)."""
    db = sqlite3.connect(path)
    for stmt in sql:
        db.execute(stmt)
    db.commit()
    db.close()
    assert not os.path.exists(f"{path}-wal")
    return path


def endless_view(path: Path) -> Path:
    """``counters`` replaced by a view that never ends."""
    write_trace(path)
    return edit(
        path,
        "DROP TABLE counters",
        f"CREATE VIEW counters AS {ENDLESS}SELECT x AS t_ns, 'c' AS name, 1.0 AS value FROM r",
    )


def blob_view(path: Path) -> Path:
    """``strings`` replaced by a view of 900 MB blobs."""
    write_trace(path)
    return edit(
        path,
        "DROP TABLE strings",
        "CREATE VIEW strings AS SELECT 0 AS id, zeroblob(900000000) AS value "
        "UNION ALL SELECT 1, zeroblob(900000000)",
    )


def default_column(path: Path) -> Path:
    """A column whose default makes a 900 MB blob for every row that lacks it."""
    write_trace(path)
    return edit(path, "ALTER TABLE events ADD COLUMN pad BLOB DEFAULT (zeroblob(900000000))")


def killed(path: Path) -> Path:
    """A trace as a killed process leaves it (``meta['ring']``, no ``meta['closed']``, a host
    that is not this one), ring and journal beside it (empty: nothing after the drain)."""
    meta = {"ring": {"drained": 0, "journal_bytes": 0}, "host": "elsewhere.invalid"}
    write_trace(path, meta=meta)
    fd = fmt.create(fmt.ring_path(str(path)), 1024, 4242)
    os.close(fd)
    Path(jfmt.journal_path(str(path))).write_bytes(b"")
    return path


def killed_with_trigger(path: Path) -> Path:
    """A killed trace whose ``meta`` has a trigger that never ends: a salvage's own insert
    into its copy would fire it."""
    killed(path)
    return edit(
        path,
        "CREATE TRIGGER hang AFTER INSERT ON meta BEGIN "
        f"INSERT INTO events {ENDLESS}SELECT x, 'k', 'd' FROM r; END",
    )


def killed_trace_with_hook(path: Path, hook: int = HUGE_HOOK) -> Path:
    """A killed trace whose ring holds one call after the drain, by hook id ``hook``, and whose
    journal names that hook (op ``all_reduce``): the right result is that call, recovered."""
    killed(path)
    db = sqlite3.connect(path)
    top = int(db.execute("SELECT max(id) FROM strings").fetchone()[0])
    db.close()
    op, api, layer = top + 1, top + 2, top + 3
    entries = [
        ["s", op, "all_reduce"],
        ["s", api, "dist.all_reduce"],
        ["s", layer, "api"],
        ["hook", hook, op, api, layer],
    ]
    Path(jfmt.journal_path(str(path))).write_text("".join(json.dumps(e) + "\n" for e in entries))
    t = STEPS * 10**9
    payload = [t, t + 5000, 4000, 1, 7, 64, -1, -1, 0, 0, STEPS - 1, -1, -1]
    assert len(payload) == len(fmt.CALL_PAYLOAD)
    words = [1, fmt.CALL | hook << 8, *payload]
    words.append(fmt.check_word(words))
    fd = os.open(fmt.ring_path(str(path)), os.O_RDWR)
    try:
        record = b"".join(w.to_bytes(8, "little", signed=True) for w in words)
        os.pwrite(fd, record, fmt.HEADER_BYTES + (1 % 1024) * fmt.RECORD_BYTES)
    finally:
        os.close(fd)
    return path


def zlib_bomb(n_bytes: int) -> bytes:
    """``n_bytes`` of zeros, deflated (about 1 KB a MB), made in 1 MiB blocks."""
    z = zlib.compressobj(9)
    block = bytes(1 << 20)
    out = [z.compress(block) for _ in range(n_bytes >> 20)]
    out.append(z.flush())
    return b"".join(out)


def call_chunk_bomb(path: Path, n_bytes: int = 1 << 30) -> Path:
    """A trace whose first call chunk (one row, as its columns say) inflates to ``n_bytes``."""
    write_trace(path)
    db = sqlite3.connect(path)
    db.execute("UPDATE call_chunks SET n_rows=1, data=? WHERE id=1", (zlib_bomb(n_bytes),))
    db.commit()
    db.close()
    return path


def update_chunk_bomb(path: Path, n_bytes: int = 1 << 30) -> Path:
    """A trace whose ``update_chunks`` holds one row that inflates to ``n_bytes``."""
    write_trace(path)
    db = sqlite3.connect(path)
    db.execute("INSERT INTO update_chunks (n_rows, data) VALUES (1, ?)", (zlib_bomb(n_bytes),))
    db.commit()
    db.close()
    return path


def leftover_wal(path: Path, shm: bool) -> Path:
    """A closed trace with a ``-wal`` beside it (and its ``-shm`` when ``shm``) that holds one
    committed transaction not yet in the file: a counter ``from.wal`` = 7."""
    write_trace(path)
    base = path.read_bytes()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("INSERT INTO counters VALUES (1, 'from.wal', 7.0)")
    wal = Path(f"{path}-wal").read_bytes()
    shm_bytes = Path(f"{path}-shm").read_bytes()
    db.close()  # checkpoints into the file and removes both: put back the state before
    path.write_bytes(base)
    Path(f"{path}-wal").write_bytes(wal)
    if shm:
        Path(f"{path}-shm").write_bytes(shm_bytes)
    return path


def hot_journal(path: Path) -> Path:
    """A closed trace with a hot ``-journal``: a transaction that deleted every call chunk and
    grew the file, cut short before its commit (its pages already written to the file). The
    right read is the trace as it was: every call."""
    write_trace(path)
    edit(path, "PRAGMA journal_mode=DELETE")
    work = path.parent / "work"
    work.mkdir()
    live = work / path.name
    shutil.copyfile(path, live)
    db = sqlite3.connect(live, isolation_level=None)
    db.execute("PRAGMA cache_size=1")  # spill: pages reach the file before the commit
    db.execute("BEGIN")
    db.execute("DELETE FROM call_chunks")
    db.execute("INSERT INTO events VALUES (1, 'pad', ?)", ("x" * 2_000_000,))
    shutil.copyfile(live, path)
    shutil.copyfile(f"{live}-journal", f"{path}-journal")
    db.execute("ROLLBACK")
    db.close()
    shutil.rmtree(work)
    return path


def folder_state(folder: Path) -> tuple[dict[str, str], int]:
    """(name -> sha256 of every file in ``folder``, the folder's mtime in ns): a file created
    and removed again changes the mtime."""
    files = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }
    return files, os.stat(folder).st_mtime_ns


def _varint(v: int) -> bytes:
    """SQLite's big-endian varint of ``v`` (https://www.sqlite.org/fileformat.html)."""
    if v < 0x80:
        return bytes([v])
    groups = []
    while v:
        groups.append(v & 0x7F)
        v >>= 7
    groups.reverse()
    return bytes([b | 0x80 for b in groups[:-1]] + [groups[-1]])


def looped_overflow(
    path: Path, rows: int = 4, value_bytes: int = 250_000_000, sparse_bytes: int = 0
) -> Path:
    """A trace whose ``strings`` table holds ``rows`` cells, each a TEXT value of about
    ``value_bytes`` whose overflow chain is one page linked to itself: read naively, every
    row is ``value_bytes`` from one 4 KB page. With ``sparse_bytes``, the file is then grown
    (a hole, header page count to match) to that size."""
    write_trace(path)
    edit(path, "DELETE FROM strings", "PRAGMA journal_mode=DELETE")
    db = sqlite3.connect(path)
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='strings'").fetchone()[0]
    ps = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    ov = len(data) // ps + 1  # the page appended below
    usable, max_local = ps, ps - 35
    min_local = ((usable - 12) * 32 // 255) - 23
    n = value_bytes
    while True:  # a length whose local part is min_local (the simplest cell layout)
        serial = _varint(2 * n + 13)
        header = _varint(1 + 1 + len(serial)) + _varint(0) + serial
        total = len(header) + n
        local = min_local + ((total - min_local) % (usable - 4))
        if local > max_local:
            break
        n += 1
    cells = [
        _varint(total) + _varint(i + 1) + header + b"A" * (min_local - len(header))
        + struct.pack(">I", ov)
        for i in range(rows)
    ]  # fmt: skip
    page = bytearray(ps)
    at = 100 if root == 1 else 0
    content, ptrs = ps, []
    for c in cells:
        content -= len(c)
        page[content : content + len(c)] = c
        ptrs.append(content)
    page[at] = 0x0D  # a table leaf
    struct.pack_into(">HHHB", page, at + 1, 0, rows, content, 0)
    for j, ptr in enumerate(ptrs):
        struct.pack_into(">H", page, at + 8 + 2 * j, ptr)
    data[(root - 1) * ps : root * ps] = page
    data += struct.pack(">I", ov) + b"A" * (ps - 4)  # the overflow page: next is itself
    struct.pack_into(">I", data, 28, len(data) // ps)
    struct.pack_into(">I", data, 92, struct.unpack_from(">I", data, 24)[0])
    path.write_bytes(data)
    if sparse_bytes:
        os.truncate(path, sparse_bytes)
        with open(path, "r+b") as f:
            f.seek(28)
            f.write(struct.pack(">I", sparse_bytes // ps))
    return path


def wal_to_dev_zero(path: Path) -> Path:
    """A closed trace with its ``-wal`` a symbolic link to ``/dev/zero`` (endless zeros)."""
    write_trace(path)
    os.symlink("/dev/zero", f"{path}-wal")
    return path


def sparse_sidecar(path: Path, suffix: str, size: int) -> Path:
    """A closed trace with a ``suffix`` (``-journal``, ``-wal``) beside it that is a regular,
    sparse (all hole) file of ``size`` bytes."""
    write_trace(path)
    with open(f"{path}{suffix}", "wb") as f:
        f.truncate(size)
    return path


def link_state(folder: Path) -> dict[str, tuple[int, int, int, int, int]]:
    """name -> (mode, size, owner, links, mtime in ns) of every entry in ``folder``, links
    not followed and nothing read (safe on a sparse terabyte or a FIFO)."""
    out = {}
    for p in sorted(folder.iterdir()):
        st = os.lstat(p)
        out[p.name] = (st.st_mode, st.st_size, st.st_uid, st.st_nlink, st.st_mtime_ns)
    return out
