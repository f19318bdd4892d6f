"""A command that runs out of memory or of stack ends in one line naming its input and what to
do, exit 2, no traceback: ``wsprof analyze`` run in a child process whose address space is
capped (``RLIMIT_AS``) just above what it holds once warmed up, on a valid 1,000,000-step CSV
that cannot fit (a real MemoryError, wherever the allocation fails), and under a recursion
limit lowered below the command's call depth (a real RecursionError)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import REPO

#: The child: analyse a small CSV first (every module the command imports is loaded), then
#: cap the address space at what it uses plus ``argv[3]`` MiB and analyse the big one.
_UNDER_RLIMIT_AS = textwrap.dedent(
    """
    import resource, sys
    from wsprof.cli import main
    assert main(["analyze", sys.argv[1]]) in (0, 1)
    with open("/proc/self/status") as fh:
        vm = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[3]) * 2**20, resource.RLIM_INFINITY))
    sys.exit(main(["analyze", sys.argv[2]]))
    """
)
#: The child: warm up, then analyse under recursion limit ``argv[2]``.
_UNDER_RECURSION_LIMIT = textwrap.dedent(
    """
    import sys
    from wsprof.cli import main
    assert main(["analyze", sys.argv[1]]) in (0, 1)
    sys.setrecursionlimit(int(sys.argv[2]))
    sys.exit(main(["analyze", sys.argv[1]]))
    """
)
#: Address space the big run gets beyond the warmed-up process, MiB: one float64 column of
#: the big CSV alone is 8 MB.
MARGIN_MIB = 8
BIG_STEPS = 1_000_000


def _child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def _small(tmp: Path) -> Path:
    small = tmp / "small.csv"
    small.write_text("step,weight_sync_s\n" + "".join(f"{k},{1 + 0.1 * k}\n" for k in range(20)))
    return small


def test_out_of_memory_is_one_line_naming_the_input(tmp_path: Path) -> None:
    big = tmp_path / "long-run.csv"
    with big.open("w") as fh:
        fh.write("step,weight_sync_s,rss_bytes\n")
        for k0 in range(0, BIG_STEPS, 100_000):
            fh.write(
                "".join(f"{k},{1 + k * 1e-3:.4f},{2**30 + k}\n" for k in range(k0, k0 + 100_000))
            )
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    res = _child(_UNDER_RLIMIT_AS, str(_small(tmp_path)), str(big), str(MARGIN_MIB))
    assert res.returncode == 2, res.stderr[-3000:]
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr[-3000:]
    assert lines[0].startswith(f"wsprof: error: {big}: ran out of memory; give a smaller input")
    assert "Traceback" not in res.stderr
    assert hashlib.sha256(big.read_bytes()).hexdigest() == digest


def test_out_of_stack_is_one_line_naming_the_input(tmp_path: Path) -> None:
    small = _small(tmp_path)
    failed = 0
    for limit in range(16, 48, 4):  # below and above the command's depth
        res = _child(_UNDER_RECURSION_LIMIT, str(small), str(limit))
        assert "Traceback" not in res.stderr, (limit, res.stderr[-3000:])
        if res.returncode == 2:
            failed += 1
            assert res.stderr.count("\n") == 1, res.stderr
            assert res.stderr.startswith("wsprof: error: "), res.stderr
            assert "recursion limit" in res.stderr, res.stderr
        else:
            assert res.returncode in (0, 1) and res.stderr == "", (limit, res.stderr)
    assert failed, "no recursion limit tried was below the command's depth"
