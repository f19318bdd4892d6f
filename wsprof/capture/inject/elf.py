"""Addresses of C functions in a running process, from its ELF files' dynamic symbols and its
memory map: what lets gdb call them without reading any symbol file (``--readnever``), so the
target is stopped for a few milliseconds instead of the time gdb takes to read libc,
libpython and the executable (hundreds of ms; seconds with torch's libraries).

Only 64-bit little-endian ELF (x86-64, aarch64 Linux) is read; anything else returns None and
the caller falls back to gdb's own symbol lookup.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable

#: ELF constants (System V gABI): shared object type, program header PT_LOAD, section
#: type SHT_DYNSYM, undefined section index.
ET_DYN = 3
PT_LOAD = 1
SHT_DYNSYM = 11
SHN_UNDEF = 0
_LIBC = re.compile(r"/libc(?:\.so|-[\d.]+\.so)")


def dynamic_symbols(path: str, names: Iterable[str]) -> tuple[int, int, dict[str, int]] | None:
    """The values of ``names`` in the ``.dynsym`` of the ELF file ``path``.

    Returns:
        ``(e_type, bias, {name: st_value})``: ``bias`` is the first ``PT_LOAD``'s
        ``p_vaddr - p_offset`` (a shared object's address of file offset 0 is its mapping's
        start; a symbol is at ``start + st_value - bias``); names not defined there are left
        out. None when the file is not a 64-bit little-endian ELF or cannot be read.
    """
    want = set(names)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    try:
        (e_type,) = struct.unpack_from("<H", data, 16)
        e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
        e_phentsize, e_phnum, e_shentsize, e_shnum, _ = struct.unpack_from("<HHHHH", data, 54)
        bias = 0
        for i in range(e_phnum):
            p_type, _, p_offset, p_vaddr = struct.unpack_from(
                "<IIQQ", data, e_phoff + i * e_phentsize
            )
            if p_type == PT_LOAD:
                bias = p_vaddr - p_offset
                break
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
            for i in range(e_shnum)
        ]
        out: dict[str, int] = {}
        for sh in sections:
            if sh[1] != SHT_DYNSYM:
                continue
            off, size, link, entsize = sh[4], sh[5], sh[6], sh[9] or 24
            strtab = sections[link][4]
            for j in range(size // entsize):
                st_name, _, _, st_shndx, st_value, _ = struct.unpack_from(
                    "<IBBHQQ", data, off + j * entsize
                )
                if st_shndx == SHN_UNDEF or st_value == 0:
                    continue
                end = data.index(b"\0", strtab + st_name)
                name = data[strtab + st_name : end].decode("ascii", "replace")
                if name in want:
                    out[name] = st_value
    except (struct.error, ValueError, IndexError):
        return None
    return e_type, bias, out


def _mapped(pid: int) -> list[tuple[int, int, str]]:
    """``(start, file offset, path)`` of every file mapping of ``pid``."""
    out = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                out.append((int(parts[0].split("-")[0], 16), int(parts[2], 16), parts[5].strip()))
    return out


def addresses(pid: int) -> dict[str, int] | None:
    """Addresses in ``pid`` of ``mmap`` (libc) and ``Py_AddPendingCall`` /
    ``PyRun_SimpleString`` (libpython, else the executable), or None when any is not found."""
    try:
        maps = _mapped(pid)
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    bases: dict[str, int] = {}
    for start, offset, mapped in maps:
        if offset == 0 and mapped not in bases:
            bases[mapped] = start
    libc = next((p for p in bases if _LIBC.search(p)), None)
    libpython = next((p for p in bases if "libpython" in os.path.basename(p)), None)
    wanted: list[tuple[str | None, tuple[str, ...]]] = [
        (libc, ("mmap",)),
        (libpython or exe, ("Py_AddPendingCall", "PyRun_SimpleString")),
    ]
    out: dict[str, int] = {}
    for path, names in wanted:
        if path is None or path not in bases:
            return None
        # The file as the target sees it (its mount namespace), else as we do.
        root = f"/proc/{pid}/root{path}"
        found = dynamic_symbols(root if os.path.exists(root) else path, names)
        if found is None:
            return None
        e_type, bias, values = found
        for name in names:
            if name not in values:
                return None
            out[name] = values[name] + (bases[path] - bias if e_type == ET_DYN else 0)
    return out
