"""The hostile inputs of issue 37 through the real command line: exit code, stderr, time, peak
memory, and whether the input was left as it was.

Each case builds its input itself, in a folder of its own under a temporary directory, with the
builders the tests use (:mod:`tests.hostile_traces` for traces, ``scripts/bench_long_series.py``
for long CSVs), then runs ``wsprof`` on it in a child process (``python -c`` calling
:func:`wsprof.cli.main`, working directory a separate empty folder). The child's address space
is capped (``--max-gib``, RLIMIT_AS, default 6 GiB) and it is killed after ``--timeout`` seconds
(default 60: shown as ``timeout``); a MemoryError traceback is shown as ``MemoryError``. Its peak
RSS is the ``ru_maxrss`` that :func:`os.wait4` reports for it, which is there whether it exited,
raised or was killed. Cases run one at a time.

``input`` compares the input folder before and after: its listing (names, sizes) and a sha256
of every file (of its non-zero 1 MiB blocks and their offsets, so that a sparse 2 GiB ring is
hashed without reading its holes); ``same`` when both are unchanged, ``same, dir touched`` when
they are but the folder's mtime moved (a file was created and removed beside the input), else
what changed. ``1 line`` says whether stderr is exactly one line (``empty`` when silent).

``--wsprof-root DIR`` runs the command line of another checkout (``PYTHONPATH=DIR`` for the
child) on the inputs this checkout builds, so that the same script measures before and after::

    git worktree add /tmp/wsprof-before 286ff31
    python scripts/bench_hostile_inputs.py --wsprof-root /tmp/wsprof-before
    python scripts/bench_hostile_inputs.py

Usage: python scripts/bench_hostile_inputs.py [--wsprof-root DIR] [--timeout 60] [--max-gib 6]
[--cases 3a,5b,...]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import resource
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_long_series import write_csv  # noqa: E402

from tests import hostile_traces as h  # noqa: E402
from wsprof.trace import ring as fmt  # noqa: E402

#: The child: the real command line, its exit status as the process's.
_CHILD = "import sys\nfrom wsprof.cli import main\nsys.exit(main(sys.argv[1:]))\n"
#: Records a hostile ring header claims (2 GiB of slots).
CLAIMED = 1 << 24
#: Characters of the stderr line shown.
LINE_CHARS = 100


# -- inputs ------------------------------------------------------------------------------------


def csv_steps(steps: int) -> Callable[[Path], Path]:
    """A per-step CSV of ``steps`` rows (weight sync growing, the rest flat, 5% noise)."""

    def build(folder: Path) -> Path:
        path = folder / f"long-{steps}.csv"
        write_csv(str(path), steps)
        return path

    return build


def wide_csv(folder: Path, columns: int = 100_000, rows: int = 6) -> Path:
    """``step`` and ``columns`` metric columns (``weight_sync_s`` first), ``rows`` rows."""
    names = ["weight_sync_s", *(f"m{i}_s" for i in range(columns - 1))]
    path = folder / "wide.csv"
    with path.open("w", encoding="utf-8") as f:
        f.write("step," + ",".join(names) + "\n")
        for step in range(rows):
            f.write(f"{step}," + ",".join([f"{10.0 + step}"] * columns) + "\n")
    return path


def slime_log(digits: int) -> Callable[[Path], Path]:
    """A slime log of 20 ``perf N`` lines; on line 10 the weight-sync value is a token of
    ``digits`` digits and an ``x`` (the issue's quadratic regex case), its neighbour is 60.5."""

    def build(folder: Path) -> Path:
        path = folder / "train.log"
        lines = []
        for step in range(20):
            sync = "1" * digits + "x" if step == 10 else f"{10.0 + 2.0 * step:.1f}"
            lines.append(
                f"perf {step}: {{'perf/update_weights_time': {sync}, "
                f"'perf/rollout_time': {60 + step % 3}.5}}\n"
            )
        path.write_text("".join(lines), encoding="utf-8")
        return path

    return build


def trace(builder: Callable[[Path], Path]) -> Callable[[Path], Path]:
    """A trace ``h-1.wsprof`` made by one of :mod:`tests.hostile_traces`' builders."""
    return lambda folder: builder(folder / "h-1.wsprof")


def sparse_ring_beside_killed_trace(folder: Path) -> Path:
    """A killed trace (salvaged when read) whose ring, beside it, is a sparse 2 GiB file whose
    header claims 2^24 records: the header of the ring :func:`h.killed_trace_with_hook` made
    (hook 3, one call after the drain) with the capacity changed, that call in its slot."""
    path = h.killed_trace_with_hook(folder / "h-1.wsprof", hook=3)
    ring = Path(fmt.ring_path(str(path)))
    with ring.open("r+b") as fh:
        head = fh.read(fmt.HEADER_BYTES)
        fh.seek(fmt.HEADER_BYTES + 1 * fmt.RECORD_BYTES)
        record = fh.read(fmt.RECORD_BYTES)
        words = list(struct.unpack_from("<8q", head, 8))
        words[2] = CLAIMED  # magic, then version, record bytes, capacity, ...
        fh.seek(0)
        fh.write(head[:8] + struct.pack("<8q", *words) + head[72:])
        fh.seek(fmt.HEADER_BYTES + (1 % CLAIMED) * fmt.RECORD_BYTES)
        fh.write(record)
        fh.truncate(fmt.HEADER_BYTES + CLAIMED * fmt.RECORD_BYTES)
    assert ring.stat().st_size > 2 << 30
    return path


def frames_65kb(folder: Path) -> Path:
    """A trace whose py-spy samples' frame is a 65 KB qualified name of dots."""
    return h.write_trace(
        folder / "h-1.wsprof", frames=["main (train.py:1)", "a." * 32_500 + "f (x.py:2)"]
    )


@dataclass(frozen=True)
class Case:
    key: str
    item: str
    name: str
    build: Callable[[Path], Path]
    command: str = "analyze"


CASES = [
    Case("3a", "3", "10,000-step CSV", csv_steps(10_000)),
    Case("3b", "3", "40,000-step CSV", csv_steps(40_000)),
    Case("5a", "5", "trace: endless recursive view", trace(h.endless_view)),
    Case("5b", "5", "killed trace: endless trigger", trace(h.killed_with_trigger)),
    Case("6a", "6", "trace: 1 GiB zlib-bomb chunk", trace(h.call_chunk_bomb)),
    Case("6b", "6", "killed trace: hook id 10^15", trace(h.killed_trace_with_hook)),
    Case("6c", "6", "killed trace: 2 GiB ring, 2^24", sparse_ring_beside_killed_trace),
    Case("7a", "7", "slime log: 16,000 digits", slime_log(16_000)),
    Case("7b", "7", "slime log: 64,000 digits", slime_log(64_000)),
    Case("8", "8", "100,000-column CSV", wide_csv),
    Case("10a", "10", "closed trace + leftover -wal", trace(lambda p: h.leftover_wal(p, False))),
    Case("10b", "10", "closed trace + hot -journal", trace(h.hot_journal)),
    Case("12", "12", "trace: 65 KB py-spy frames", frames_65kb),
]


# -- the input folder ----------------------------------------------------------------------------

#: (name -> (size, digest) of everything in a folder, the folder's mtime in ns).
State = tuple[dict[str, tuple[int, str]], int]


def digest(path: Path) -> str:
    """sha256 of a file's non-zero 1 MiB blocks and their offsets: the same for the same bytes
    however the file system reports its data regions (holes are not read)."""
    d = hashlib.sha256()
    size, block = path.stat().st_size, 1 << 20
    zero = bytes(block)
    with path.open("rb") as fh:
        fd, pos, done = fh.fileno(), 0, 0  # done: blocks below it are hashed
        while pos < size:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
                stop = min(os.lseek(fd, pos, os.SEEK_HOLE), size)
            except OSError:  # no data after pos
                break
            for start in range(max(pos // block, done) * block, stop, block):
                data = os.pread(fd, block, start)
                if data != zero[: len(data)]:
                    d.update(start.to_bytes(8, "little") + data)
            done = max(done, -(-stop // block))
            pos = stop
    return d.hexdigest()


def folder_state(folder: Path) -> State:
    """(name -> (size, digest) of everything in ``folder``, the folder's mtime in ns)."""
    files = {}
    for p in sorted(folder.iterdir()):
        st = p.lstat()
        files[p.name] = (st.st_size, digest(p) if p.is_file() and not p.is_symlink() else "-")
    return files, os.stat(folder).st_mtime_ns


def compare(before: State, after: State) -> str:
    """What changed in the input folder, or ``same``."""
    (b, bm), (a, am) = before, after
    changes = [f"+{n}" for n in a if n not in b] + [f"-{n}" for n in b if n not in a]
    for n in b:
        if n in a and a[n] != b[n]:
            changes.append(f"{n} {b[n][0]}->{a[n][0]} B" if a[n][0] != b[n][0] else f"{n} bytes")
    if changes:
        return "CHANGED: " + ", ".join(changes)
    return "same" if am == bm else "same, dir touched"


# -- the child -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    exit: str
    stderr_lines: list[str]
    seconds: float
    peak_mib: float


def run_cli(
    args: list[str], cwd: Path, wsprof_root: Path, timeout: float, max_bytes: int
) -> Outcome:
    """``wsprof args`` in a child (cwd ``cwd``, ``PYTHONPATH=wsprof_root``), capped at
    ``max_bytes`` of address space and ``timeout`` seconds; reaped with :func:`os.wait4`."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))

    env = {**os.environ, "PYTHONPATH": str(wsprof_root), "PYTHONDONTWRITEBYTECODE": "1"}
    err_path = cwd / ".stderr"
    with open(os.devnull, "wb") as out, err_path.open("wb") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(
            [sys.executable, "-c", _CHILD, *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=env,
            preexec_fn=cap,
        )
        timed_out = False
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                timed_out = True
                os.kill(p.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    text = err_path.read_text(encoding="utf-8", errors="replace")
    err_path.unlink()
    lines = text.strip("\n").splitlines() if text.strip() else []
    if timed_out:
        exit_text = "timeout"
    elif p.returncode < 0:
        exit_text = f"signal {-p.returncode}"
    elif lines and re.match(r"[\w.]*MemoryError\b", lines[-1]):  # numpy's _ArrayMemoryError too
        exit_text = "MemoryError"
    else:
        exit_text = str(p.returncode)
    return Outcome(exit_text, lines, seconds, usage.ru_maxrss / 1024)


def shown(line: str) -> str:
    """``line`` with control characters escaped, cut to :data:`LINE_CHARS`."""
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    return safe if len(safe) <= LINE_CHARS else safe[: LINE_CHARS - 3] + "..."


def child_wsprof(wsprof_root: Path, cwd: Path) -> str:
    """Where the child imports wsprof from."""
    env = {**os.environ, "PYTHONPATH": str(wsprof_root), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", "import os, wsprof; print(os.path.dirname(wsprof.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        env=env,
    ).stdout.strip()


def git_head(root: Path) -> str:
    r = subprocess.run(
        ["git", "-C", str(root), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    )
    return r.stdout.strip()[:72] or "(not a git checkout)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wsprof-root", type=Path, default=ROOT, help="checkout whose CLI runs")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per command")
    ap.add_argument("--max-gib", type=float, default=6.0, help="address-space cap of a child")
    ap.add_argument("--cases", default="", help="comma-separated keys (default: all)")
    args = ap.parse_args()
    wanted = {k.strip() for k in args.cases.split(",") if k.strip()}
    cases = [c for c in CASES if not wanted or c.key in wanted]
    root = args.wsprof_root.resolve()
    max_bytes = int(args.max_gib * 2**30)
    sqlite3.connect(":memory:").close()  # the builders need sqlite3; fail early if absent
    with tempfile.TemporaryDirectory(prefix="wsprof-bench-hostile-") as tmp:
        base = Path(tmp)
        where = child_wsprof(root, base)
        print(f"wsprof: {where}  ({git_head(root)})")
        print(f"inputs built by: {ROOT}  ({git_head(ROOT)})")
        print(f"child: RLIMIT_AS {args.max_gib:g} GiB, timeout {args.timeout:g} s, one at a time")
        print()
        head = (
            f"{'item':<5} {'case':<32} {'command':<22} {'exit':<11} {'1 line':<7} "
            f"{'wall s':>7} {'peak MB':>8}  {'input':<18} stderr (the line, else the last)"
        )
        print(head)
        print("-" * len(head))
        for case in cases:
            folder, cwd = base / case.key / "in", base / case.key / "cwd"
            folder.mkdir(parents=True)
            cwd.mkdir()
            path = case.build(folder)
            before = folder_state(folder)
            o = run_cli([case.command, str(path)], cwd, root, args.timeout, max_bytes)
            same = compare(before, folder_state(folder))
            n = len(o.stderr_lines)
            one = "yes" if n == 1 else "empty" if n == 0 else f"no ({n})"
            last = o.stderr_lines[-1] if o.stderr_lines else ""
            line = shown(last.replace(f"{folder}/", ""))  # the temporary folder says nothing
            command = f"{case.command} {path.name}"
            print(
                f"{case.key:<5} {case.name:<32} {command:<22} {o.exit:<11} {one:<7} "
                f"{o.seconds:7.1f} {o.peak_mib:8.0f}  {same:<18} {line}",
                flush=True,
            )
            shutil.rmtree(folder.parent)  # free the disk before the next case
    return 0


if __name__ == "__main__":
    sys.exit(main())
