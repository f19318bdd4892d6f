"""Outputs another user cannot redirect: symbolic links planted at the predictable names in a
shared run folder are never written through, run folders are made user-only (0700), a run
folder another user owns or can write in is refused in one line (exit 2) unless allowed (a
folder writable by the user's own private group is the user's), ``wsprof run`` keeps to the
folder it checked when a link on the way is repointed, and ``report -o`` / ``export -o`` never
write through a link, hang on a FIFO or ignore the umask.

The hostile user is ``nobody`` (uid 65534): where the tests run as root, the shared folder
and the links in it are given to it (``chown``/``lchown``), as if it had made them; elsewhere
those tests skip.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TARGETS, free_port

from wsprof.cli import main
from wsprof.trace.model import TRACE_SUFFIX
from wsprof.trace.outputs import is_private_group
from wsprof.trace.writer import TraceWriter

NOBODY = 65534
JOB = str(TARGETS / "gated_job.py")
#: What each planted name is beside ``<host>-<pid>``.
PLANTS = {
    "trace": TRACE_SUFFIX,
    "ring": TRACE_SUFFIX + ".ring",
    "journal": TRACE_SUFFIX + ".journal",
    # SQLite's side files of the trace
    "wal": TRACE_SUFFIX + "-wal",
    "shm": TRACE_SUFFIX + "-shm",
    "sqlite-journal": TRACE_SUFFIX + "-journal",
}
TIMEOUT_S = 120

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="planting another user's files needs root (chown to nobody)"
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSPROF_")}
    return {**env, "PYTHONWARNINGS": "ignore", **extra}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def victims(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Files of this user's that a planted link points at; their bytes must never change."""
    folder = tmp_path / "victims"
    folder.mkdir(mode=0o700)
    files = {name: folder / f"precious-{name}" for name in PLANTS}
    for name, f in files.items():
        f.write_bytes(f"do not touch: {name}\n".encode() * 100)
    before = {name: _digest(f) for name, f in files.items()}
    yield files
    after = {name: _digest(f) for name, f in files.items()}
    assert after == before, "a victim file was written through a planted link"


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A shared folder that ``nobody`` owns, mode 1777 (``/tmp``-like, but another user's)."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    folder.chmod(0o1777)
    return folder


def _plant(folder: Path, pid: int, names: tuple[str, ...], victims: dict[str, Path]) -> None:
    base = folder / f"{socket.gethostname()}-{pid}"
    for name in names:
        link = Path(str(base) + PLANTS[name])
        link.symlink_to(victims[name])
        os.lchown(link, NOBODY, NOBODY)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _gated(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def _pid(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("pid "), line
    return int(line.split()[1])


def _release(proc: subprocess.Popen[str]) -> tuple[str, str]:
    out, err = proc.communicate("go\n", timeout=TIMEOUT_S)
    return out, err


def _traces_safe(folder: Path, planted: set[str]) -> list[Path]:
    """The traces written in ``folder``: regular files of this user's, mode 0600, none of them
    at a planted name."""
    traces = [p for p in folder.iterdir() if p.name.endswith(TRACE_SUFFIX)]
    for p in traces:
        st = p.lstat()
        if p.name in planted:
            assert stat.S_ISLNK(st.st_mode)  # still the link, untouched
            continue
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid(), p
        assert stat.S_IMODE(st.st_mode) == 0o600, p
    return [p for p in traces if p.name not in planted]


# -- wsprof run --------------------------------------------------------------------------------


@needs_root
def test_run_refuses_a_folder_another_user_owns(shared: Path, tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--out", str(shared), "--", sys.executable,
         "-c", f"open({str(mark)!r}, 'w')"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=_env(),
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    line = _one_line(res.stderr)
    assert line.startswith(f"wsprof: error: {shared}: run folder is owned by nobody"), line
    assert "--allow-shared-out" in line
    assert not mark.exists()  # refused before the command started
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize("allowed", ["no", "flag", "env"])
def test_run_refuses_a_world_writable_folder_unless_allowed(tmp_path: Path, allowed: str) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    mark = tmp_path / "ran"
    opts = ["--allow-shared-out"] if allowed == "flag" else []
    env = _env(WSPROF_ALLOW_SHARED_OUT="1") if allowed == "env" else _env()
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--out", str(folder), *opts, "--",
         sys.executable, "-c", f"open({str(mark)!r}, 'w')"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=env,
    )  # fmt: skip
    if allowed == "no":
        assert res.returncode == 2, res.stderr
        line = _one_line(res.stderr)
        assert "is writable by group or others (mode 0777)" in line, line
        assert not mark.exists()
    else:
        assert res.returncode == 0, res.stderr
        assert mark.exists()


def test_run_folders_are_created_user_only(tmp_path: Path) -> None:
    cmd = ["--", sys.executable, "-c", "pass"]
    given = tmp_path / "a" / "b"
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--out", str(given), *cmd],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=_env(),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    # the default, ./wsprof-out/<time>, under the current folder
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", *cmd],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=_env(),
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    [stamped] = list((tmp_path / "wsprof-out").iterdir())
    for d in (tmp_path / "a", given, tmp_path / "wsprof-out", stamped):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


@needs_root
def test_default_run_folder_under_a_planted_link_is_refused(shared: Path, tmp_path: Path) -> None:
    """``wsprof run`` in a shared working folder where ``nobody`` made ``wsprof-out`` a link to
    a folder of its own: the run folder is not made in there."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    theirs.chmod(0o777)
    link = shared / "wsprof-out"
    link.symlink_to(theirs)
    os.lchown(link, NOBODY, NOBODY)
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--", sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=_env(), cwd=shared,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    line = _one_line(res.stderr)
    assert "owned by nobody" in line and "--out" in line, line
    assert list(theirs.iterdir()) == []


@needs_root
@pytest.mark.parametrize("names", [("trace", "ring", "journal"), ("ring", "journal")])
def test_run_never_writes_through_links_planted_at_the_predictable_names(
    shared: Path, victims: dict[str, Path], names: tuple[str, ...]
) -> None:
    """``wsprof run --allow-shared-out`` in ``nobody``'s 1777 folder, with links at the names
    of the job's trace, ring and journal (``<host>-<pid>...``) planted after the job started
    and before it patched: the victims keep their bytes (the ``victims`` fixture) and the
    trace is written under a name of its own, or the job runs unprofiled with one line."""
    proc = _gated(
        [sys.executable, "-m", "wsprof", "run", "--out", str(shared), "--allow-shared-out",
         "--no-report", "--", sys.executable, JOB, str(free_port())],
        _env(),
    )  # fmt: skip
    pid = _pid(proc)
    _plant(shared, pid, names, victims)
    _, err = _release(proc)
    assert proc.returncode == 0, err[-3000:]
    base = f"{socket.gethostname()}-{pid}"
    planted = {base + PLANTS[n] for n in names}
    traces = _traces_safe(shared, planted)
    # any of the three names taken: the next name whose trace, ring and journal are all free
    assert [p.name for p in traces] == [f"{base}-2{TRACE_SUFFIX}"], err
    assert "not profiling" not in err
    assert "Traceback" not in err


@needs_root
@pytest.mark.parametrize("group", ["root", "users"])
def test_run_in_a_group_writable_project_folder_under_umask_002(tmp_path: Path, group: str) -> None:
    """``wsprof run`` from a 0775 project folder (``mkdir`` under umask 002): the job runs when
    the group is the user's private group (root's ``root``), and is refused in one line when
    it is a group others are in (``users``)."""
    import grp

    project = tmp_path / "project"
    project.mkdir()
    gid = grp.getgrnam(group).gr_gid
    if group == "root" and not is_private_group(0, 0):
        pytest.skip("root's group is not its private group here (it has members)")
    os.chown(project, 0, gid)
    project.chmod(0o775)
    mark = tmp_path / "ran"
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--", sys.executable, "-c",
         f"open({str(mark)!r}, 'w')"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=_env(),
        cwd=project, umask=0o002,
    )  # fmt: skip
    if group == "root":
        assert res.returncode == 0, res.stderr
        assert mark.exists()
        [stamped] = list((project / "wsprof-out").iterdir())
        for d in (project / "wsprof-out", stamped):
            assert stat.S_IMODE(d.stat().st_mode) == 0o700, d  # whatever the umask
    else:
        assert res.returncode == 2, res.stderr
        line = _one_line(res.stderr)
        assert line.startswith(f"wsprof: error: {project}: is writable by group or others"), line
        assert "group users" in line and "--out" in line, line
        assert not mark.exists()
        assert list(project.iterdir()) == []


@needs_root
def test_run_skips_a_trace_name_whose_sqlite_side_files_are_planted(
    shared: Path, victims: dict[str, Path]
) -> None:
    """``--allow-shared-out`` in ``nobody``'s 1777 folder, with links planted at the job's
    ``<host>-<pid>.wsprof-wal`` and ``-shm``: SQLite refused them ("unable to open database
    file"), the job ran unprofiled and an empty trace was left. Now the trace is written under
    the next name whose side files are free; the victims keep their bytes."""
    proc = _gated(
        [sys.executable, "-m", "wsprof", "run", "--out", str(shared), "--allow-shared-out",
         "--no-report", "--", sys.executable, JOB, str(free_port())],
        _env(),
    )  # fmt: skip
    pid = _pid(proc)
    _plant(shared, pid, ("wal", "shm", "sqlite-journal"), victims)
    _, err = _release(proc)
    assert proc.returncode == 0, err[-3000:]
    base = f"{socket.gethostname()}-{pid}"
    assert "not profiling" not in err and "Traceback" not in err, err
    traces = _traces_safe(shared, set())
    assert [p.name for p in traces] == [f"{base}-2{TRACE_SUFFIX}"], err
    assert not (shared / f"{base}{TRACE_SUFFIX}").exists()


@needs_root
def test_run_reads_the_folder_it_checked_when_a_link_on_the_way_is_repointed(
    shared: Path, tmp_path: Path
) -> None:
    """``--out <nobody's link>/run``: the link (owned by ``nobody``, in its 1777 folder) points
    at this user's folder when the run starts, and at ``nobody``'s own folder by the time the
    job patches and the run ends. The job's trace, the closing analysis and its report stay in
    the folder that was checked; nothing lands in ``nobody``'s folder."""
    mine = tmp_path / "mine"
    (mine / "run").mkdir(parents=True, mode=0o700)
    mine.chmod(0o700)
    theirs = tmp_path / "theirs"
    (theirs / "run").mkdir(parents=True)
    for d in (theirs, theirs / "run"):
        os.chown(d, NOBODY, NOBODY)
        d.chmod(0o777)
    link = shared / "lnk"
    link.symlink_to(mine)
    os.lchown(link, NOBODY, NOBODY)
    proc = _gated(
        [sys.executable, "-m", "wsprof", "run", "--out", str(link / "run"), "--",
         sys.executable, JOB, str(free_port())],
        _env(),
    )  # fmt: skip
    pid = _pid(proc)  # the run folder was checked; the job has not patched yet
    swapped = shared / "lnk.new"
    swapped.symlink_to(theirs)
    os.lchown(swapped, NOBODY, NOBODY)
    os.replace(swapped, link)
    _, err = _release(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "no trace in" not in err and "not profiling" not in err, err
    assert err.rstrip().endswith(
        f"wsprof: run folder {mine / 'run'} (wsprof analyze {mine / 'run'})"
    )
    names = sorted(p.name for p in (mine / "run").iterdir())
    assert f"{socket.gethostname()}-{pid}{TRACE_SUFFIX}" in names, names
    assert any(n.endswith(".html") for n in names), names  # the closing report
    assert list((theirs / "run").iterdir()) == []


# -- in-process patch() ---------------------------------------------------------------------


@needs_root
def test_patch_into_another_users_folder_runs_unprofiled_with_one_line(shared: Path) -> None:
    proc = _gated([sys.executable, JOB, str(free_port()), "patch"], _env(WSPROF_OUT=str(shared)))
    _pid(proc)
    out, err = _release(proc)
    assert proc.returncode == 0, err[-3000:]  # training goes on
    assert "trace None" in out
    line = _one_line(err)
    assert line.startswith("wsprof: not profiling:") and "owned by nobody" in line, line
    assert list(shared.iterdir()) == []


@needs_root
def test_patch_allowed_into_a_shared_folder_never_writes_through_links(
    shared: Path, victims: dict[str, Path]
) -> None:
    """Links at the ring's and journal's names (the trace's own name free): the job trains on,
    traced under a name of its own whose ring and journal are free; the victims keep their
    bytes (the ``victims`` fixture)."""
    proc = _gated(
        [sys.executable, JOB, str(free_port()), "patch"],
        _env(WSPROF_OUT=str(shared), WSPROF_ALLOW_SHARED_OUT="1", WSPROF_QUIET="1"),
    )
    pid = _pid(proc)
    _plant(shared, pid, ("ring", "journal"), victims)
    out, err = _release(proc)
    assert proc.returncode == 0, err[-3000:]  # training goes on
    base = f"{socket.gethostname()}-{pid}"
    traces = _traces_safe(shared, {base + PLANTS[n] for n in ("ring", "journal")})
    assert "not profiling" not in err
    assert f"trace {shared / base}-2{TRACE_SUFFIX}" in out, (out, err)
    assert [p.name for p in traces] == [f"{base}-2{TRACE_SUFFIX}"]


def test_trace_writer_never_opens_an_existing_name(tmp_path: Path) -> None:
    """The writer itself: a name that exists, a dangling link above all, is refused."""
    victim = tmp_path / "victim"
    link = tmp_path / f"h-1{TRACE_SUFFIX}"
    link.symlink_to(victim)  # dangling: os.path.exists() says False
    with pytest.raises(FileExistsError):
        TraceWriter(str(link))
    assert not victim.exists()


def test_trace_writer_that_fails_removes_the_file_it_created(tmp_path: Path) -> None:
    """Links at the trace's ``-wal`` and ``-shm`` names (the trace's own name free): SQLite
    cannot set the trace up; the writer fails and leaves no empty trace behind, and the
    link targets keep their bytes."""
    trace = tmp_path / f"h-1{TRACE_SUFFIX}"
    targets = {}
    for side in ("-wal", "-shm"):
        target = tmp_path / f"precious{side}"
        target.write_bytes(b"do not touch\n" * 100)
        targets[target] = target.read_bytes()
        Path(f"{trace}{side}").symlink_to(target)
    with pytest.raises((OSError, sqlite3.Error)):
        TraceWriter(str(trace))
    assert not os.path.lexists(trace)
    for target, data in targets.items():
        assert target.read_bytes() == data


# -- report -o ------------------------------------------------------------------------------


def _small_trace(folder: Path) -> Path:
    path = folder / f"host-1{TRACE_SUFFIX}"
    w = TraceWriter(str(path))
    w.set_meta({"host": "host", "pid": 1, "rank": 0, "world_size": 1})
    w.write(
        {"spans": [("step", "0", 0, 1_000_000, 0, 0), ("step", "1", 1_000_000, 2_000_000, 1, 0)]}
    )
    w.close()
    return path


def test_report_output_that_is_a_link_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _small_trace(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "report.html"
    link.symlink_to(victim)
    assert main(["report", str(trace), "-o", str(link)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"wsprof: error: {link}: is a symbolic link"), line
    assert victim.read_text() == "precious\n"
    assert link.is_symlink()
    # a regular file there is the user's choice: replaced
    plain = tmp_path / "plain.html"
    plain.write_text("old")
    assert main(["report", str(trace), "-o", str(plain)]) == 0
    assert plain.read_text().startswith("<!")


def test_export_never_writes_through_a_link_at_its_temporary_name(tmp_path: Path) -> None:
    """``export -o out.csv`` wrote ``out.csv.part`` first, opened with plain ``open()``: a
    link planted there was written through. Now a private ``mkstemp`` name: the link and its
    target keep their bytes, the export lands at ``-o`` and nothing else is left."""
    trace = _small_trace(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out" / "calls.csv"
    out.parent.mkdir()
    (out.parent / "calls.csv.part").symlink_to(victim)
    assert main(["export", str(trace), "--format", "csv", "-o", str(out)]) == 0
    assert victim.read_text() == "precious\n"
    assert out.is_file() and not out.is_symlink()
    assert sorted(p.name for p in out.parent.iterdir()) == ["calls.csv", "calls.csv.part"]


#: ``report`` and ``export`` write ``-o`` through one function (``report.files.output_file``).
OUTPUT_COMMANDS = {
    "report": ["report"],
    "export": ["export", "--format", "csv"],
}


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
def test_an_output_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path, command: str) -> None:
    """``mkfifo x.html; wsprof report t.wsprof -o x.html`` hung until killed (export replaced
    the FIFO). Now one line and exit 2, in a child so that a hang fails instead of blocking."""
    trace = _small_trace(tmp_path)
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", *OUTPUT_COMMANDS[command], str(trace), "-o", str(fifo)],
        capture_output=True, text=True, timeout=60, check=False, env=_env(),
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    line = _one_line(res.stderr)
    assert (
        line == f"wsprof: error: {fifo}: is a FIFO, not a regular file; choose another path with -o"
    )
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.html", trace.name])


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
@pytest.mark.parametrize("kind", ["device", "folder", "link"])
def test_an_output_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, command: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _small_trace(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    if kind == "device":
        # a null device of the test's own: where a regression replaces it, no system file
        # (``/dev/null``) is lost
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        out = tmp_path / "null"
        os.mknod(out, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "folder":
        out = tmp_path / "out"
        out.mkdir()
    else:
        out = tmp_path / "out.html"
        out.symlink_to(victim)
    assert main([*OUTPUT_COMMANDS[command], str(trace), "-o", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(out) in line and "-o" in line, line
    if kind == "device":
        assert line.endswith(
            "is a character device, not a regular file; choose another path with -o"
        )
    elif kind == "link":
        assert line.startswith(f"wsprof: error: {out}: is a symbolic link; not written through")
        assert out.is_symlink()
    assert victim.read_text() == "precious\n"
    if kind == "device":
        assert stat.S_ISCHR(out.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({trace.name, victim.name, out.name})


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
@pytest.mark.parametrize("umask", [0o002, 0o027])
def test_an_output_replaces_a_hard_link_and_takes_the_umask_mode(
    tmp_path: Path, command: str, umask: int
) -> None:
    """``-o`` a hard link to a file of the user's: ``report`` wrote through it (0644 whatever
    the umask), ``export`` made it 0600. Now the link is replaced, its other name keeps its
    bytes, and the new file has the mode the umask gives (``0o666 & ~umask``)."""
    trace = _small_trace(tmp_path)
    folder = tmp_path / "outs"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = folder / "out.txt"
    os.link(victim, out)
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", *OUTPUT_COMMANDS[command], str(trace), "-o", str(out)],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=_env(),
        umask=umask,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == "precious\n" and victim.stat().st_nlink == 1
    st = out.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1
    assert stat.S_IMODE(st.st_mode) == 0o666 & ~umask
    assert out.read_text() != "precious\n"
    assert [p.name for p in folder.iterdir()] == ["out.txt"]  # no temporary file left
