"""``wsprof attach --inject PID...``: the in-process hooks put into running processes, py-spy
beside them, and everything taken out again at the end (:mod:`wsprof.capture.inject`)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import click

from wsprof.capture.inject.injector import (
    DEFAULT_ACK_TIMEOUT_S,
    InjectResult,
    Target,
    check,
    inject,
)
from wsprof.capture.inject.mechanism import running
from wsprof.errors import EXIT_OK, InputError


def _ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms"


def _say(line: str) -> None:
    click.echo(f"wsprof attach: {line}", err=True)


def _detach(done: Sequence[Target], out: str, layers: str) -> list[InjectResult]:
    """Unpatch every injected target (each once, best effort: one that exited is skipped)."""
    results: list[InjectResult] = []
    for t in done:
        if not running(t.pid):
            _say(f"pid {t.pid} has exited; its trace holds what it recorded until then")
            continue
        try:
            r = inject(t, "unpatch", out, layers)
        except InputError as e:
            _say(
                f"could not detach from pid {t.pid}: {e} (it unpatches itself within a second "
                "of this process's exit)"
            )
            continue
        results.append(r)
        ack = r.ack
        if not ack.get("ok"):
            _say(f"pid {t.pid}: {ack.get('message')}")
            continue
        same = (
            "exactly as it was"
            if ack.get("identical")
            else (
                f"with {len(ack.get('changed', []))} attribute(s) not restored: "
                f"{', '.join(ack.get('changed', [])[:3])}"
            )
        )
        _say(
            f"detached from pid {t.pid} ({r.mechanism}: paused {_ms(r.pause_s)}, unpatched in "
            f"{_ms(float(ack.get('in_target_s', 0.0)))}); left {same}"
        )
    return results


def run_injected(
    targets: Sequence[int],
    out: str,
    *,
    explicit: Sequence[int] = (),
    ack_timeout_s: float = DEFAULT_ACK_TIMEOUT_S,
    duration: float | None,
    layers: str,
    make_sampler: Callable[[], Any] | None,
    analyse: Callable[[], None],
) -> int:
    """Inject into every target, record until the end, detach from every one, analyse.

    Args:
        targets: the pids (resolved by ``wsprof attach``).
        ack_timeout_s: how long each target has to run the injected patch.
        explicit: the pids given on the command line: a check that fails for one of them is
            an error; a ``--match``ed Python process without torch is skipped with a line.
        out: the run folder (made by the caller).
        duration: seconds to record (None: until Ctrl-C or SIGTERM, or every target exits).
        layers: ``both`` or ``api``.
        make_sampler: builds the py-spy sampler that runs beside the hooks (None:
            ``--no-sample``).
        analyse: the verdict and report of the run folder at the end.

    Returns:
        0; a failure before recording raises (every target already injected is detached).

    Raises:
        InputError: a check failed (nothing was touched) or an injection failed (the targets
            injected before it are detached).
    """
    checked: list[Target] = []
    for pid in targets:  # every check before any target is touched
        try:
            checked.append(check(pid))
        except InputError as e:
            if pid in explicit or "torch is not loaded" not in str(e):
                raise
            _say(f"skipped pid {pid} (matched): {e}")  # a matched helper process
    if not checked:
        raise InputError("no process to inject into: every match was skipped")
    done: list[Target] = []

    class _Terminated(Exception):
        pass

    def on_early_sigterm(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_early_sigterm) if main else None
    try:
        for t in checked:
            r = inject(t, "patch", out, layers, ack_timeout_s=ack_timeout_s)
            if not r.ack.get("ok"):
                raise InputError(f"pid {t.pid}: {r.ack.get('message')}")
            done.append(t)
            _say(
                f"injected into pid {t.pid} ({r.mechanism}: paused {_ms(r.pause_s)}, patched "
                f"in {_ms(float(r.ack.get('in_target_s', 0.0)))}); trace {r.ack.get('trace')}"
            )
    except BaseException as e:
        _detach(done, out, layers)
        if main:
            signal.signal(signal.SIGTERM, previous)
        if isinstance(e, _Terminated):
            raise InputError(
                "terminated while injecting; every injected target was detached"
            ) from None
        raise
    sampler = make_sampler() if make_sampler is not None else None
    stop = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if main:
        signal.signal(signal.SIGTERM, on_sigterm)
    t0 = time.monotonic()
    why = "duration"
    try:
        if sampler is not None:
            sampler.start()
        until = f"for {duration:g} s" if duration else "until Ctrl-C"
        _say(f"recording {until}{' with py-spy beside the hooks' if sampler else ''}")
        while True:
            if stop.is_set():
                why = "terminated"
                break
            if duration is not None and time.monotonic() - t0 >= duration:
                break
            if not any(running(t.pid) for t in done):
                why = "every target exited"
                break
            if sampler is not None and sampler.wait(timeout_s=0.2) is not None:
                why = str(sampler.stop_reason)
                break
            if sampler is None:
                time.sleep(0.2)
    except KeyboardInterrupt:
        why = "interrupted"
    finally:
        if sampler is not None:
            sampler.stop()
        _detach(done, out, layers)
        if main:
            signal.signal(signal.SIGTERM, previous)
    _say(f"recorded {time.monotonic() - t0:.1f} s ({why}); run folder {out}")
    analyse()
    return EXIT_OK
