"""The parts of ``attach --inject`` that need no target: the request's validation, the one
program written into a target, the ELF addresses (of this very process), preset removal."""

from __future__ import annotations

import os
import sys
import types

import pytest

from wsprof.capture import presets
from wsprof.capture.inject import elf, mechanism, request


def _doc(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "action": "patch",
        "version": "1",
        "out": "/tmp/run",
        "layers": "both",
        "injector_pid": 123,
        "deadline_unix": 1.0,
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
    r = request.Request("unpatch", "1", "/tmp/run", "api", 5, 2.0)
    r.write(str(tmp_path))
    assert request.read_request(str(tmp_path))["action"] == "unpatch"
    with pytest.raises(ValueError, match="action"):
        request.Request("exec", "1", "/tmp/run", "api", 5, 2.0)


@pytest.mark.parametrize("path", ["/tmp/a'b/boot.py", "/tmp/a b/x.py", "relative.py", "/t/\n.py"])
def test_only_safe_paths_reach_the_program(path: str) -> None:
    with pytest.raises(mechanism.InjectFailed):
        mechanism.program(path)


def test_the_program_and_gdb_commands_hold_nothing_but_the_path() -> None:
    text = mechanism.program("/tmp/wsprof-inject-1-abc/bootstrap.py")
    assert text == (
        "try:\n __import__('runpy').run_path('/tmp/wsprof-inject-1-abc/bootstrap.py',"
        "run_name='__wsprof_inject__')\nexcept BaseException:\n pass\n"
    )
    # A withdrawn request (its bootstrap file gone) raises nothing out of the program.
    exec(compile(mechanism.program("/tmp/wsprof-no-such-folder/bootstrap.py"), "p", "exec"), {})
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
