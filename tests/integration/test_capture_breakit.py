"""The capture path under abuse: a forked child, SIGTERM inside a write, a full disk under the
ring, a journal write cut short, a salvage without its journal. Each scenario runs in its own
interpreter (some of them used to hang or kill it), on the path this suite runs on (compiled,
or pure Python with ``WSPROF_NATIVE=0``), and where the two differ on both."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import REPO, free_port

from wsprof.trace.reader import read_trace

#: Seconds a scenario may take (torch import included) before it counts as hung.
TIMEOUT_S = 90

_GLOO = """
import os, sys
import torch, torch.distributed as dist
import wsprof
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
# torch 2.13's gloo group aborts the interpreter at exit ("terminate called without an
# active exception") in about 1 run of 14 when it is never destroyed, wsprof or not:
# destroyed at exit, after wsprof's own exit handler (registered later, run first).
__import__("atexit").register(dist.destroy_process_group)
"""


def _run(
    tmp_path: Path,
    body: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "scenario.py"
    script.write_text(textwrap.dedent(body))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "run"), str(free_port()), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGKILL: a hung SIGTERM handler would ignore anything else
        out, err = proc.communicate()
        pytest.fail(f"scenario hung for {timeout_s} s\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


_FORK = """
import os, sys
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
import wsprof
from wsprof.trace import journal as jfmt
from wsprof.trace.reader import read_trace

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
path = wsprof.patch(sys.argv[1], flush_interval_s=3600)
dist.broadcast(torch.ones(2), 0)
wsprof.flush()
journal = jfmt.journal_path(path)
before = open(journal).read()
pid = os.fork()
if pid == 0:  # the child: new dtypes, a backend call, a new phase (all new strings)
    code = 0
    try:
        pg = dist.distributed_c10d._get_default_group()
        dist.broadcast(torch.ones(2, dtype=torch.float64), 0)
        pg.broadcast([torch.ones(2, dtype=torch.int16)], dist.BroadcastOptions()).wait()
        with wsprof.phase("child_phase"):
            dist.all_reduce(torch.ones(2, dtype=torch.int8))
    except BaseException:
        code = 3
    os._exit(code)
_, status = os.waitpid(pid, 0)
grew = open(journal).read()[len(before):]
dist.all_reduce(torch.ones(2, dtype=torch.bfloat16))
live = read_trace(path)  # the parent still writing
print(json.dumps({"status": status, "grew": grew, "state": live.meta["end"]["state"],
                  "dtypes": live.calls.dtype.tolist()}), flush=True)
os._exit(0)
""".replace("import os, sys", "import json, os, sys", 1)


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_forked_child_never_writes_the_parents_journal(tmp_path: Path, native: str) -> None:
    """A DataLoader-style fork after patch(): the child's new strings went into the parent's
    journal with the parent's next ids, and reading the parent's trace failed (UNIQUE
    constraint failed: strings.id)."""
    done = _run(tmp_path, _FORK, env={"WSPROF_NATIVE": native})
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res["status"] == 0
    assert res["grew"] == ""  # nothing of the child's in the parent's journal
    assert res["state"] == "live"
    assert res["dtypes"] == ["float32", "bfloat16"]


_SIGTERM_INSIDE = (
    _GLOO
    + """
import signal
target = sys.argv[3]
if target == "ring":
    from wsprof.capture import buffer
    code = buffer.PyRing.put.__code__
else:
    from wsprof.trace import journal
    code = journal.Journal.add.__code__
path = wsprof.patch(sys.argv[1], flush_interval_s=3600)
wsprof.step()
dist.broadcast(torch.ones(2), 0)
fired = []


def tracer(frame, event, arg):
    if frame.f_code is not code:
        return None

    def local(f, ev, a):  # SIGTERM lands on a line inside the write's lock
        if ev == "line" and not fired and f.f_lineno > code.co_firstlineno + 6:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return local
    return local


print(path, flush=True)
sys.settrace(tracer)
if target == "ring":
    dist.broadcast(torch.ones(2), 0)
else:
    with wsprof.phase("a-phase-name-never-seen"):  # its span interns a new string
        pass
sys.settrace(None)
print("not terminated", fired, flush=True)
"""
)


@pytest.mark.parametrize("target", ["journal", "ring"])
def test_sigterm_inside_a_capture_write_ends_the_process(tmp_path: Path, target: str) -> None:
    """SIGTERM (torchrun, Ray, Kubernetes) while the main thread is inside a journal write or a
    pure-Python ring write: wsprof's flush-on-SIGTERM handler waited for the lock the
    interrupted write holds, for ever; the process never ended (and ignored further SIGTERMs).
    """
    env = {"WSPROF_NATIVE": "0"} if target == "ring" else None  # the Python ring only
    done = _run(tmp_path, _SIGTERM_INSIDE, target, env=env, timeout_s=TIMEOUT_S)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stdout, done.stderr[-2000:])
    path = done.stdout.splitlines()[0]
    trace = read_trace(path)  # the last flush ran
    assert trace.calls.op.tolist()[:1] == ["broadcast"]


_FULL_DISK = (
    "import json\n"
    + _GLOO
    + """
path = wsprof.patch(sys.argv[1], flush_interval_s=3600)
t = torch.ones(2)
for _ in range(20_000):  # 2.5 MB of ring records: more than the disk holds
    dist.broadcast(t, 0)
print(json.dumps({"path": path, "result": t.tolist()}), flush=True)
wsprof.unpatch()
"""
)


def test_a_full_disk_under_the_ring_never_kills_training(tmp_path: Path) -> None:
    """The ring was a sparse file: a hook's write to a page the full disk had no room for
    killed the training process with SIGBUS."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.strip()}")
    try:
        run = small / "run"
        script = tmp_path / "full.py"
        script.write_text(_FULL_DISK)
        done = subprocess.run(
            [sys.executable, str(script), str(run), str(free_port())],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            cwd=REPO,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
            check=False,
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        res = json.loads(done.stdout.strip().splitlines()[-1])
        assert res["result"] == [1.0, 1.0]
        assert res["path"] is None  # no room for the capture buffer: not profiling, said once
        assert "not profiling" in done.stderr
        # the files it made before the disk ran out (trace, journal, a 16 MiB sparse ring)
        # are removed: nothing half-made is left for analyze to trip on
        assert not run.exists() or list(run.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


_JOURNAL_CUT = """
import json, os, resource, signal, sys
from wsprof.trace import journal as jfmt

path = os.path.join(sys.argv[1] + ".journal")
os.makedirs(os.path.dirname(path), exist_ok=True)
j = jfmt.Journal(path)
j.add(["s", 0, "first"])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 5, hard))
j.add(["site", 1, "/a/long/file/name.py", 12, "function"])  # cut after 5 bytes
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # room again
_, drained_bytes = j.take()
j.add(["s", 2, "third"])
j.add(["s", 3, "fourth"])
every, _ = jfmt.read_entries(path, 0)
after, _ = jfmt.read_entries(path, drained_bytes)
print(json.dumps({"every": every, "after": after, "errors": j.write_errors}))
"""


def test_a_journal_write_cut_short_loses_no_later_entry(tmp_path: Path) -> None:
    """A disk that fills in the middle of a journal line, then has room again: the next entry
    was appended to the torn line (both unreadable), and the journal's length in the trace
    (where a salvage starts reading) no longer fell on a line start."""
    done = _run(tmp_path, _JOURNAL_CUT)
    assert done.returncode == 0, done.stderr[-2000:]
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res["errors"] == 1
    assert res["every"] == [["s", 0, "first"], ["s", 2, "third"], ["s", 3, "fourth"]]
    assert res["after"] == [["s", 2, "third"], ["s", 3, "fourth"]]


_KILLED = (
    _GLOO
    + """
path = wsprof.patch(sys.argv[1], flush_interval_s=3600)
for _ in range(5):
    dist.broadcast(torch.ones(2), 0)
wsprof.flush()
for _ in range(7):
    dist.all_reduce(torch.ones(2))  # only in the ring when the process dies
print(path, flush=True)
os.kill(os.getpid(), 9)
"""
)


def test_a_salvage_without_its_journal_keeps_the_recovered_calls(tmp_path: Path) -> None:
    """A killed process whose journal is gone (or cut short): the ring's calls were all
    skipped as naming 'a hook the journal lacks', though the trace knew every hook."""
    done = _run(tmp_path, _KILLED)
    assert done.returncode == -9, done.stderr[-2000:]
    path = done.stdout.strip().splitlines()[-1]
    journal = path + ".journal"
    shutil.copy(journal, tmp_path / "journal.bak")
    whole = read_trace(path).calls.op.tolist()
    assert whole == ["broadcast"] * 5 + ["all_reduce"] * 7
    os.unlink(journal)
    gone = read_trace(path)
    assert gone.calls.op.tolist() == whole
    assert gone.meta["end"]["recovered"]["calls"] == 7
    Path(journal).write_bytes((tmp_path / "journal.bak").read_bytes()[:40])  # cut short
    assert read_trace(path).calls.op.tolist() == whole
