"""SQLite schema of a trace file (see :mod:`wsprof.trace.model` for column meanings)."""

from __future__ import annotations

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sites (id INTEGER PRIMARY KEY, file TEXT, line INTEGER, function TEXT);
CREATE TABLE IF NOT EXISTS calls (
    t_start_ns INTEGER, t_end_ns INTEGER, backend_ns INTEGER, n_backend INTEGER,
    thread INTEGER, op TEXT, api TEXT, layer TEXT, bytes INTEGER, dtype TEXT, grp TEXT,
    is_async INTEGER, site INTEGER, step INTEGER, phase TEXT, error TEXT);
CREATE TABLE IF NOT EXISTS spans (
    kind TEXT, name TEXT, t_start_ns INTEGER, t_end_ns INTEGER, step INTEGER, thread INTEGER);
CREATE TABLE IF NOT EXISTS counters (t_ns INTEGER, name TEXT, value REAL);
CREATE TABLE IF NOT EXISTS events (t_ns INTEGER, kind TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS stacks (id INTEGER PRIMARY KEY, frames TEXT);
CREATE TABLE IF NOT EXISTS samples (
    t_start_ns INTEGER, t_end_ns INTEGER, pid INTEGER, tid INTEGER, stack INTEGER, count INTEGER);
"""

INSERT = {
    "calls": "INSERT INTO calls VALUES (" + ",".join("?" * 16) + ")",
    "spans": "INSERT INTO spans VALUES (?,?,?,?,?,?)",
    "counters": "INSERT INTO counters VALUES (?,?,?)",
    "events": "INSERT INTO events VALUES (?,?,?)",
    "sites": "INSERT OR REPLACE INTO sites VALUES (?,?,?,?)",
    "stacks": "INSERT OR REPLACE INTO stacks VALUES (?,?)",
    "samples": "INSERT INTO samples VALUES (?,?,?,?,?,?)",
}
