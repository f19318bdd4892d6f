"""SQLite schema of a trace file (see :mod:`wsprof.trace.model` for column meanings).

Calls, the one high-volume table, are stored as chunks: each ``call_chunks`` row holds
``n_rows`` calls as a zlib-compressed, column-major ``int64`` matrix whose columns are named in
``columns`` (JSON list, :data:`~wsprof.trace.model.CALL_COLUMNS`); string columns hold ids into
``strings`` (-1 for None). One SQLite row per call cost about 3.5 µs of writer CPU per call;
a chunk costs well under 1 µs per call and a few bytes compressed. ``step_min``/``step_max``
of a chunk let retention find a step's chunks; ``call_totals`` holds exact per-step sums of every
call (string columns as ids), kept when retention thins a step's detail
(:mod:`wsprof.trace.retention`), per process group with the collectives the calls issued
(``n_backend``); ``issued`` holds c10d's own per-group count of issued collectives
(:mod:`wsprof.capture.audit`), the ground truth of the coverage audit. ``update_chunks`` holds
``call_updates`` rows in bulk (schema 5: one per async call, so as chunks: ``n_rows`` rows of
the four int64 columns, row-major little-endian, zlib-compressed).
"""

from __future__ import annotations

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sites (id INTEGER PRIMARY KEY, file TEXT, line INTEGER, function TEXT);
CREATE TABLE IF NOT EXISTS strings (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS call_chunks (
    id INTEGER PRIMARY KEY, n_rows INTEGER NOT NULL, step_min INTEGER, step_max INTEGER,
    columns TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS call_chunks_steps ON call_chunks (step_max, step_min);
CREATE TABLE IF NOT EXISTS call_totals (
    step INTEGER, op INTEGER, api INTEGER, layer INTEGER, n INTEGER, duration_ns INTEGER,
    between_layers_ns INTEGER, bytes INTEGER, max_duration_ns INTEGER, grp INTEGER,
    n_backend INTEGER);
CREATE TABLE IF NOT EXISTS issued (
    t_ns INTEGER, step INTEGER, grp TEXT, backend TEXT, seq INTEGER, at TEXT);
CREATE TABLE IF NOT EXISTS call_updates (
    t_start_ns INTEGER, thread INTEGER, t_done_ns INTEGER, device_ns INTEGER);
CREATE TABLE IF NOT EXISTS update_chunks (
    id INTEGER PRIMARY KEY, n_rows INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS spans (
    kind TEXT, name TEXT, t_start_ns INTEGER, t_end_ns INTEGER, step INTEGER, thread INTEGER);
CREATE TABLE IF NOT EXISTS counters (t_ns INTEGER, name TEXT, value REAL);
CREATE TABLE IF NOT EXISTS events (t_ns INTEGER, kind TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS stacks (id INTEGER PRIMARY KEY, frames TEXT);
CREATE TABLE IF NOT EXISTS samples (
    t_start_ns INTEGER, t_end_ns INTEGER, pid INTEGER, tid INTEGER, stack INTEGER, count INTEGER);
"""

INSERT = {
    "strings": "INSERT INTO strings VALUES (?,?)",
    "call_chunks": "INSERT INTO call_chunks (n_rows, columns, data, step_min, step_max) "
    "VALUES (?,?,?,?,?)",
    "call_totals": "INSERT INTO call_totals VALUES (?,?,?,?,?,?,?,?,?,?,?)",
    "issued": "INSERT INTO issued VALUES (?,?,?,?,?,?)",
    "meta": "INSERT OR REPLACE INTO meta VALUES (?,?)",
    "call_updates": "INSERT INTO call_updates VALUES (?,?,?,?)",
    "update_chunks": "INSERT INTO update_chunks (n_rows, data) VALUES (?,?)",
    "spans": "INSERT INTO spans VALUES (?,?,?,?,?,?)",
    "counters": "INSERT INTO counters VALUES (?,?,?)",
    "events": "INSERT INTO events VALUES (?,?,?)",
    "sites": "INSERT OR REPLACE INTO sites VALUES (?,?,?,?)",
    "stacks": "INSERT OR REPLACE INTO stacks VALUES (?,?)",
    "samples": "INSERT INTO samples VALUES (?,?,?,?,?,?)",
}
