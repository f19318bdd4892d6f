"""Call chunks: an ``(n, 16)`` int64 call matrix <-> one ``call_chunks`` row.

One obvious place for the on-disk form of calls: the writer packs, the reader and the
retention pass unpack.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.errors import quote
from wsprof.trace.model import CALL_COLUMNS

_NARROW = (np.int8, np.int16, np.int32, np.int64)

#: The most bytes one chunk may inflate to (a drain of two million calls with every column
#: int64; a default ring holds 131,072): a chunk declaring more is refused, never allocated.
MAX_CHUNK_BYTES = 256 * 1024 * 1024


def inflate(data: Any, expected_bytes: int, what: str = "a call chunk") -> bytes:
    """zlib ``data`` that must inflate to exactly ``expected_bytes`` (what its row count and
    column types say), inflated in bounded memory: never more than ``expected_bytes + 1``
    bytes are produced, so a zlib bomb costs what its row count declares, at most
    :data:`MAX_CHUNK_BYTES`.

    Args:
        data: the compressed bytes of one chunk.
        expected_bytes: its rows times their width (bytes).
        what: the chunk's name in messages.

    Raises:
        ValueError: the declared size is over :data:`MAX_CHUNK_BYTES`, or the data inflates
            to another size; zlib.error: it does not decompress.
    """
    if expected_bytes > MAX_CHUNK_BYTES:
        raise ValueError(
            f"{what} declares {expected_bytes} bytes of rows, over the "
            f"{MAX_CHUNK_BYTES >> 20} MiB a chunk may hold"
        )
    if not isinstance(data, bytes):
        raise ValueError(f"{what} holds {type(data).__name__}, not compressed bytes")
    z = zlib.decompressobj()
    raw = z.decompress(data, expected_bytes + 1)
    if len(raw) > expected_bytes:
        raise ValueError(f"{what} inflates to more than the {expected_bytes} bytes its rows hold")
    if len(raw) < expected_bytes or not z.eof:
        raise ValueError(
            f"{what} shorter than its columns (inflates to {len(raw)} bytes, its rows hold "
            f"{expected_bytes})"
        )
    return raw


def pack_columns(m: npt.NDArray[np.int64]) -> tuple[str, bytes]:
    """An ``(n, 16)`` call matrix -> (columns JSON, zlib data) of one ``call_chunks`` row.

    Each column is stored in the narrowest integer type that holds its values (most columns
    are small ids that repeat within a chunk), column after column, then compressed (zlib
    level 1): a few bytes per call.
    """
    columns: list[list[str]] = []
    parts: list[bytes] = []
    for name, col in zip(CALL_COLUMNS, m.T):
        lo, hi = (int(col.min()), int(col.max())) if len(col) else (0, 0)
        for dt in _NARROW:
            info = np.iinfo(dt)
            if info.min <= lo and hi <= info.max:
                break
        columns.append([name, np.dtype(dt).str])
        parts.append(col.astype(dt).tobytes())
    return json.dumps(columns), zlib.compress(b"".join(parts), 1)


def chunk_columns(columns: Any) -> list[tuple[str, np.dtype[Any]]]:
    """The ``columns`` JSON of a call chunk -> (name, integer dtype) pairs, each name once.

    Raises:
        ValueError: not a list of ``[name, dtype]`` pairs of integer dtypes, or a name twice.
    """
    spec = json.loads(columns)
    if not isinstance(spec, list):
        raise ValueError(f"call chunk columns {quote(spec)} are not a list")
    out: list[tuple[str, np.dtype[Any]]] = []
    for c in spec:
        if not (isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)):
            raise ValueError(f"call chunk column {quote(c)} is not [name, dtype]")
        dt = np.dtype(c[1])
        if dt.kind not in "biu" or dt.itemsize == 0:
            raise ValueError(
                f"call chunk column {quote(c[0])} has type {quote(c[1])}, not an integer"
            )
        out.append((c[0], dt))
    names = [name for name, _ in out]
    if len(set(names)) != len(names):
        raise ValueError("call chunk names a column twice")
    return out


def unpack_columns(
    n_rows: Any, columns: Any, data: Any, widen: bool = True
) -> dict[str, npt.NDArray[Any]]:
    """One ``call_chunks`` row -> column name to integer array of shape ``(n_rows,)``: int64,
    or with ``widen=False`` the narrow type it was stored in (a reader of millions of calls
    concatenates the narrow columns first and widens once).

    Columns this wsprof does not know are skipped.

    Raises:
        ValueError: a negative row count, data that does not inflate to its rows' size or
            to more than :data:`MAX_CHUNK_BYTES` (:func:`inflate`), or a column of
            :data:`CALL_COLUMNS` missing; zlib.error: the data does not decompress.
    """
    names = chunk_columns(columns)
    n, off = int(n_rows), 0
    if n < 0:
        raise ValueError(f"call chunk of {quote(n)} rows")
    missing = set(CALL_COLUMNS) - {name for name, _ in names}
    if missing:
        raise ValueError(f"call chunk lacks columns {sorted(missing)}")
    raw = inflate(data, n * sum(dt.itemsize for _, dt in names))
    out: dict[str, npt.NDArray[Any]] = {}
    for name, dt in names:
        size = n * dt.itemsize
        if name in CALL_COLUMNS:
            col = np.frombuffer(raw, dtype=dt, count=n, offset=off)
            out[name] = col.astype(np.int64) if widen else col.astype(dt.newbyteorder("="))
        off += size
    return out


def to_matrix(cols: dict[str, npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
    """Columns from :func:`unpack_columns` -> the ``(n, 16)`` matrix :func:`pack_columns` takes."""
    return np.stack([cols[c] for c in CALL_COLUMNS], axis=1).astype(np.int64)
