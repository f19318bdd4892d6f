"""The trace: data model, writer and reader (one SQLite file per process)."""
