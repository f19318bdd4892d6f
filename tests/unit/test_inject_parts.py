"""The parts of ``attach --inject`` that need no target: the request's validation, the one
program written into a target, the ELF addresses (of this very process), preset removal."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from wsprof.capture import presets
from wsprof.capture.inject import elf, injector, mechanism, request
from wsprof.capture.inject.bootstrap import untrusted, untrusted_tree
from wsprof.errors import InputError


def _doc(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "action": "patch",
        "version": "1",
        "out": "/tmp/run",
        "layers": "both",
        "injector_pid": 123,
        "deadline_unix": 1.0,
        "wsprof_root": "/opt/site",
    }
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"action": "exec"}, "action"),
        ({"layers": "all"}, "layers"),
        ({"out": "relative/run"}, "absolute"),
        ({"out": "/tmp/a\0b"}, "absolute"),
        ({"wsprof_root": "."}, "wsprof_root"),
        ({"injector_pid": True}, "injector_pid"),
        ({"injector_pid": 0}, "pid"),
        ({"extra": "__import__('os').system('x')"}, "unexpected"),
    ],
)
def test_bad_requests_are_refused(over: dict[str, object], why: str) -> None:
    problem = request.validate(_doc(**over))
    assert problem is not None and why in problem


def test_a_good_request_round_trips(tmp_path: object) -> None:
    assert request.validate(_doc()) is None
    r = request.Request("unpatch", "1", "/tmp/run", "api", 5, 2.0, "/opt/site")
    r.write(str(tmp_path))
    name = request.REQUEST_NAME
    assert request.read_request(str(tmp_path), name)["action"] == "unpatch"
    with pytest.raises(ValueError, match="action"):
        request.Request("exec", "1", "/tmp/run", "api", 5, 2.0, "/opt/site")
    # Withdrawn once; a second time (or after the target claimed it) there is nothing left.
    assert request.withdraw(str(tmp_path)) and not request.withdraw(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        request.read_request(str(tmp_path), name)


@pytest.mark.parametrize("folder", ["/tmp/a'b/f", "/tmp/a b/f", "relative", "/t/\n", "/a/../b"])
def test_only_safe_paths_reach_the_program(folder: str) -> None:
    with pytest.raises(mechanism.InjectFailed):
        mechanism.program(folder, 0)


def test_the_program_fits_and_gdb_commands_hold_nothing_but_it() -> None:
    folder = "/run/user/1000/wsprof/inject-4194304-18446744073709-abcdefgh"
    text = mechanism.program(folder, 1000)
    assert len(text) + 1 <= mechanism.MAX_PROGRAM_BYTES
    assert text.startswith("try:\n exec(") and text.endswith("except BaseException:\n pass\n")
    # A withdrawn or missing folder raises nothing out of the program and binds nothing.
    ns: dict[str, object] = {}
    exec(compile(mechanism.program("/tmp/wsprof-no-such/inject-1-2-x", 0), "p", "exec"), ns)
    assert set(ns) == {"__builtins__"}
    cmds = mechanism.gdb_commands(
        text, {"mmap": 1, "Py_AddPendingCall": 2, "PyRun_SimpleString": 3}
    )
    pokes = [c for c in cmds if c.startswith("set {char}")]
    written = bytes(int(c.rsplit("=", 1)[1]) for c in pokes)
    assert written == text.encode() + b"\0"
    assert all("mmap" not in c and "Py_" not in c for c in cmds)  # called by address only


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_addresses_of_this_process_are_its_own_functions() -> None:
    import ctypes

    addrs = elf.addresses(os.getpid())
    assert addrs is not None, "this CPython's libc and C API should be found"
    libc = ctypes.CDLL(None)
    api = ctypes.pythonapi
    assert addrs["mmap"] == ctypes.cast(libc.mmap, ctypes.c_void_p).value
    for name in ("Py_AddPendingCall", "PyRun_SimpleString"):
        assert addrs[name] == ctypes.cast(getattr(api, name), ctypes.c_void_p).value


def test_presets_uninstall_restores_the_same_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    from wsprof.frameworks import EntryPoint

    mod = types.ModuleType("wsprof_fake_fw")

    class Worker:
        def update_weights(self) -> int:
            return 1

    mod.Worker = Worker  # type: ignore[attr-defined]
    original = Worker.__dict__["update_weights"]
    monkeypatch.setitem(sys.modules, "wsprof_fake_fw", mod)
    entry = EntryPoint(phase="weight_sync", paths=("wsprof_fake_fw:Worker.update_weights",))
    monkeypatch.setitem(presets.PRESETS, "fakefw", (entry,))
    presets.install("fakefw")
    assert Worker.__dict__["update_weights"] is not original
    assert Worker().update_weights() == 1
    restored = presets.uninstall()
    assert "wsprof_fake_fw:Worker.update_weights" in restored
    assert Worker.__dict__["update_weights"] is original
    assert presets._finder is None and not presets._pending and not presets.wrapped


# -- Nothing another user can write is run: the program's and the installation's checks. --


def _injection(tmp_path: Path) -> tuple[str, Path]:
    """A parent (0700), an injection folder (0700) and a bootstrap that writes a marker."""
    parent = tmp_path / "wsprof-u"
    folder = parent / "inject-1-2-abc"
    folder.mkdir(parents=True, mode=0o700)
    parent.chmod(0o700)
    marker = tmp_path / "ran"
    (folder / "bootstrap.py").write_text(f"open({str(marker)!r}, 'w').write(__name__)\n")
    (folder / "bootstrap.py").chmod(0o600)
    return str(folder), marker


def _runs(folder: str, uid: int) -> dict[str, object]:
    """Run the program as the target would (PyRun_SimpleString in a namespace)."""
    ns: dict[str, object] = {}
    exec(compile(mechanism.program(folder, uid), "<string>", "exec"), ns)
    return ns


def _other_owner(path: Path) -> int:
    """Make ``path`` another user's: chowned to nobody as root, else trust another uid."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534, follow_symlinks=False)
        return 0
    return os.geteuid() + 1


def test_the_program_runs_a_checked_bootstrap(tmp_path: Path) -> None:
    folder, marker = _injection(tmp_path)
    assert set(_runs(folder, os.geteuid())) == {"__builtins__"}  # nothing bound
    assert marker.read_text() == "__wsprof_inject__"


@pytest.mark.parametrize(
    "attack",
    [
        "folder_0777",
        "parent_0777",
        "file_0666",
        "file_group_writable",
        "folder_other_owner",
        "parent_other_owner",
        "file_other_owner",
        "folder_symlink",
        "parent_symlink",
        "file_symlink",
        "file_fifo",
    ],
)
def test_the_program_refuses_what_another_user_could_write(tmp_path: Path, attack: str) -> None:
    folder, marker = _injection(tmp_path)
    f, p = Path(folder), Path(folder).parent
    uid = os.geteuid()
    if attack == "folder_0777":
        f.chmod(0o777)
    elif attack == "parent_0777":
        p.chmod(0o777)
    elif attack == "file_0666":
        (f / "bootstrap.py").chmod(0o666)
    elif attack == "file_group_writable":
        (f / "bootstrap.py").chmod(0o620)
    elif attack.endswith("other_owner"):
        uid = _other_owner({"folder": f, "parent": p, "file": f / "bootstrap.py"}[attack[:-12]])
    elif attack == "folder_symlink":  # the folder's name now leads to a good copy elsewhere
        f.rename(p / "elsewhere")
        f.symlink_to(p / "elsewhere")
    elif attack == "parent_symlink":
        p.rename(tmp_path / "elsewhere")
        p.symlink_to(tmp_path / "elsewhere")
    elif attack == "file_symlink":
        (f / "bootstrap.py").rename(f / "real.py")
        (f / "bootstrap.py").symlink_to(f / "real.py")
    elif attack == "file_fifo":
        (f / "bootstrap.py").unlink()
        os.mkfifo(f / "bootstrap.py", 0o600)
    t0 = time.perf_counter()
    _runs(folder, uid)  # raises nothing into the target
    assert time.perf_counter() - t0 < 5  # a FIFO is not waited on
    assert not marker.exists(), attack


def test_untrusted_names_what_is_wrong(tmp_path: Path) -> None:
    me = (os.geteuid(),)
    good = tmp_path / "pkg"
    (good / "sub").mkdir(parents=True)
    (good / "sub" / "m.py").write_text("")
    for p in (tmp_path, good, good / "sub"):
        p.chmod(0o755)
    (good / "sub" / "m.py").chmod(0o644)
    assert untrusted_tree(str(good), me) is None
    (good / "sub" / "m.py").chmod(0o646)
    assert "writable by others" in str(untrusted_tree(str(good), me))
    (good / "sub" / "m.py").chmod(0o644)
    (good / "link").symlink_to("/nonexistent/wsprof")  # a link to what nobody checked
    assert untrusted_tree(str(good), me) is not None
    assert "symlink" in str(untrusted(str(good / "link"), me))
    assert "owned by uid" in str(untrusted(str(good), (os.geteuid() + 1,)))
    assert "not a regular file" in str(untrusted(str(good), me, stat.S_ISREG))


@pytest.mark.parametrize("hijack", ["symlink", "mode_0777", "other_owner"])
def test_a_private_root_another_user_prepared_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hijack: str
) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    base = shared / f"wsprof-{os.geteuid()}"
    assert injector.private_root() == str(base)  # made 0700 when missing
    assert stat.S_IMODE(base.stat().st_mode) == 0o700
    base.rmdir()
    if hijack == "symlink":
        (tmp_path / "theirs").mkdir(mode=0o700)
        base.symlink_to(tmp_path / "theirs")
    else:
        base.mkdir()
        base.chmod(0o777 if hijack == "mode_0777" else 0o700)
        if hijack == "other_owner":
            if os.geteuid() != 0:
                pytest.skip("chown to another user needs root")
            os.chown(base, 65534, 65534)
    with pytest.raises(InputError, match="0700 folder of uid"):
        injector.private_root()


def test_xdg_runtime_dir_is_used_only_when_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    xdg = tmp_path / "run"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert injector.private_root() == str(xdg / "wsprof")
    xdg.chmod(0o755)
    assert injector.private_root() == str(tmp_path / f"wsprof-{os.geteuid()}")


def test_stale_folders_go_and_pending_ones_stay(tmp_path: Path) -> None:
    me, ticks = os.getpid(), injector.start_ticks(os.getpid())
    pending = tmp_path / f"inject-{me}-{ticks}-a"  # this process runs, no answer: kept
    reused = tmp_path / f"inject-{me}-{ticks + 1}-b"  # the pid now names another process
    answered = tmp_path / f"inject-{me}-{ticks}-c"
    other = tmp_path / "not-ours"
    for d in (pending, reused, answered, other):
        d.mkdir()
    (answered / "ack.json").write_text("{}")
    later = time.time() + injector.ANSWERED_KEEP_S + 1
    assert sorted(injector.clean_stale(str(tmp_path), now=later)) == sorted(
        [str(reused), str(answered)]
    )
    assert pending.exists() and other.exists()
    assert injector.clean_stale(str(tmp_path)) == []
