"""``attach --inject`` cannot be taken over by another local user (issue 37, items 1 and 4).

Root injects into a real target (torch loaded, main thread blocked in ``read()``); user
``nobody`` (uid 65534) plants code where the bootstrap or wsprof would be read. The injector's
own steps run for real (:func:`~wsprof.capture.inject.injector.prepare`, ``await_ack``, the
withdrawal); the queued call is put in the target with ``Py_AddPendingCall`` of
``PyRun_SimpleString`` on the very program gdb writes, from a thread of the target
(``tests/targets/inject_blocked.py``): gdb itself cannot call functions in a process on a
machine whose CPU has AMX (gdb < 15: "Couldn't write extended state status"), and what is
tested here is what the program and the bootstrap do once they run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import TARGETS

from wsprof.capture.inject import injector
from wsprof.capture.inject.request import ACK_NAME, WITHDRAWN_NAME

NOBODY = 65534
TARGET = str(TARGETS / "inject_blocked.py")


def _skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (to act as a second user, nobody)"
    try:
        import pwd

        pwd.getpwuid(NOBODY)
    except KeyError:
        return "needs the user nobody (uid 65534)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A /tmp of this test's own: world-writable and sticky, reachable by nobody; the
    injector's private parent is made in it (no XDG_RUNTIME_DIR)."""
    path = Path(tempfile.mkdtemp(prefix="wsprof-shared-", dir="/tmp"))
    path.chmod(0o1777)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def blocked_target(cwd: str | None = None, via_cwd: bool = False) -> Iterator[Callable[..., str]]:
    """A running ``inject_blocked.py``; yields ``talk(program=None, line=None)``: queue a
    program in it, or send its main thread a line; returns the line it answers."""
    r, w = os.pipe()
    argv = [sys.executable, TARGET]
    if via_cwd:  # started as `python -c ...`: its working folder is on sys.path (as '')
        argv = [
            sys.executable,
            "-c",
            f"import runpy; runpy.run_path({TARGET!r}, run_name='__main__')",
        ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        pass_fds=(r,),
        env={**os.environ, "INJECT_BLOCKED_FD": str(r)},
    )
    os.close(r)
    assert proc.stdin is not None and proc.stdout is not None

    def talk(program: str | None = None, line: str | None = None) -> str:
        if program is not None:
            os.write(w, program.encode().hex().encode() + b"\n")
        else:
            proc.stdin.write(f"{line}\n")
            proc.stdin.flush()
        return proc.stdout.readline().strip()

    try:
        assert proc.stdout.readline().strip() == "ready"
        talk.pid = proc.pid  # type: ignore[attr-defined]
        yield talk
        assert proc.poll() is None, "the target died"
        os.close(w)
        _, err = proc.communicate(timeout=60)  # stdin closed: its loop ends, it exits
        assert proc.returncode == 0, err[-2000:]
        assert "Traceback" not in err and "SystemError" not in err, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def as_nobody(action: Callable[[], None]) -> int:
    """Run ``action`` in a child process as uid/gid 65534; its exit status: 0 it did it, 1 a
    PermissionError stopped it, 2 anything else."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 2
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action()
            code = 0
        except PermissionError:
            code = 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _plant(path: Path, marker: Path) -> None:
    path.write_text(f"open({str(marker)!r}, 'w').write(str(__import__('os').getuid()))\n")
    path.chmod(0o777)


def test_a_withdrawn_injection_cannot_be_taken_over(tmp_path: Path, shared_tmp: Path) -> None:
    """Three calls queued and withdrawn in a target blocked in read(); nobody tries every
    way to put its code where they read; released, the target runs none of it, runs on."""
    markers = [shared_tmp / f"pwned-{i}" for i in range(3)]
    with blocked_target() as talk:
        pid = talk.pid  # type: ignore[attr-defined]
        run = str(tmp_path / "run")
        # The control: one call queued and withdrawn, then run: its bootstrap finds no
        # request and removes its own folder (it does run, and does nothing).
        control = injector.prepare(pid, "patch", run, "both", 1.0)
        assert talk(program=control.program) == "queued 0"
        assert injector.await_ack(pid, control.folder, 0.3) is None
        assert talk(line="first") == "echo first"
        assert not os.path.exists(control.folder)
        preps = [injector.prepare(pid, "patch", run, "both", 1.0) for _ in range(3)]
        for p in preps:
            assert talk(program=p.program) == "queued 0"
        t0 = time.perf_counter()
        for p in preps:  # blocked outside Python: each times out and is withdrawn
            assert injector.await_ack(pid, p.folder, 0.3) is None
            assert os.path.exists(os.path.join(p.folder, WITHDRAWN_NAME))
        assert time.perf_counter() - t0 < 10
        parent = Path(preps[0].folder).parent
        assert parent == shared_tmp / "wsprof-0" and oct(parent.stat().st_mode)[-3:] == "700"
        boot = Path(preps[0].folder) / "bootstrap.py"

        # 1. The folders are left in place, in root's 0700 parent: nobody can change nothing.
        assert as_nobody(lambda: _plant(boot, markers[0])) == 1
        assert as_nobody(lambda: os.rename(parent, shared_tmp / "moved")) == 1
        assert as_nobody(lambda: (parent / "x").mkdir()) == 1
        # 2. Worst case: the parent vanished (a tmp cleaner) and nobody re-creates it, with
        #    a folder of its own (0777) and with a symlink to one, each with a bootstrap.
        shutil.rmtree(parent)

        def recreate() -> None:
            parent.mkdir()
            parent.chmod(0o777)
            own = Path(preps[0].folder)
            own.mkdir(mode=0o777)
            _plant(own / "bootstrap.py", markers[0])
            elsewhere = shared_tmp / "elsewhere"
            elsewhere.mkdir()
            _plant(elsewhere / "bootstrap.py", markers[1])
            Path(preps[1].folder).symlink_to(elsewhere)
            Path(preps[2].folder).symlink_to(own)

        assert as_nobody(recreate) == 0
        assert (Path(preps[0].folder) / "bootstrap.py").stat().st_uid == NOBODY
        # Released: the main thread runs the three queued calls, then echoes.
        assert talk(line="go") == "echo go"
        assert talk(line="again") == "echo again"  # it runs on, normally
    assert not any(m.exists() for m in markers), [m.read_text() for m in markers if m.exists()]
    assert not (tmp_path / "run").exists()  # nothing was patched


def test_a_planted_wsprof_in_the_working_folder_is_never_imported(
    tmp_path: Path, shared_tmp: Path
) -> None:
    """The target's working folder is world-writable and on its sys.path; nobody put a
    ``wsprof/`` there. The injection imports the injector's own wsprof: patched and
    unpatched for real, and the planted package never runs."""
    work = shared_tmp / "work"
    work.mkdir(mode=0o777)
    work.chmod(0o777)
    marker = shared_tmp / "pwned"
    os.chown(work, NOBODY, NOBODY)

    def plant() -> None:
        (work / "wsprof").mkdir()
        _plant(work / "wsprof" / "__init__.py", marker)

    assert as_nobody(plant) == 0
    out = tmp_path / "run"
    with blocked_target(cwd=str(work), via_cwd=True) as talk:
        acks = []
        for action in ("patch", "unpatch"):
            p = injector.prepare(talk.pid, action, str(out), "both", 60.0)  # type: ignore[attr-defined]
            assert talk(program=p.program) == "queued 0"
            assert talk(line=action) == f"echo {action}"  # the call ran at the safe point
            ack = injector.await_ack(talk.pid, p.folder, 60.0)  # type: ignore[attr-defined]
            assert ack is not None and os.path.exists(os.path.join(p.folder, ACK_NAME))
            shutil.rmtree(p.folder)
            acks.append(ack)
    assert acks[0]["ok"] is True, acks[0]
    assert acks[1]["ok"] is True and acks[1]["identical"] is True, acks[1]
    assert Path(acks[0]["trace"]).parent == out
    assert not marker.exists()
