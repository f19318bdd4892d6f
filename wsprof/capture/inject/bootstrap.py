"""The script a target runs for ``wsprof attach --inject`` (copied into the injection's
private folder and run there with ``runpy.run_path``, in the target's main thread).

Standard library only until it has checked what the target needs; every exception is caught
and answered in ``ack.json`` beside it, never printed into the target's output. Without a
request beside it (the injector gave up and removed its folder) it does nothing.
"""

from __future__ import annotations


def _main() -> None:
    import json
    import os
    import sys
    import time

    here = os.path.dirname(os.path.abspath(__file__))

    def ack(**fields: object) -> None:
        fields.setdefault("pid", os.getpid())
        fields.setdefault("python", sys.executable)
        path = os.path.join(here, "ack.json")
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(fields, fh)
        os.replace(path + ".tmp", path)

    try:
        with open(os.path.join(here, "request.json"), encoding="utf-8") as fh:
            request = json.load(fh)
    except OSError:
        return  # withdrawn
    except ValueError as e:
        ack(ok=False, error="bad_request", message=f"the request is not JSON ({e})")
        return
    deadline = request.get("deadline_unix") if isinstance(request, dict) else None
    if not isinstance(deadline, (int, float)) or time.time() > deadline:
        ack(
            ok=False,
            error="expired",
            message="the target's main thread ran the injected call after the injector gave "
            "up (it was busy outside Python); nothing was done",
        )
        return
    if "torch" not in sys.modules:
        ack(
            ok=False,
            error="no_torch",
            message="torch is not loaded in this process: there is no collective to hook; "
            "inject into the processes that train or serve (the ranks)",
        )
        return
    try:
        from wsprof.capture.inject import target
    except BaseException as e:  # noqa: BLE001 - answered, never raised into the target
        ack(
            ok=False,
            error="no_wsprof",
            message=f"the target cannot import wsprof ({type(e).__name__}: {e}); install "
            f"wsprof into its environment ({sys.executable} -m pip install wsprof)",
        )
        return
    try:
        ack(**target.handle(here))
    except KeyboardInterrupt:  # the job's own Ctrl-C landed in here: its patch was undone
        ack(ok=False, error="internal", message="interrupted by the job's own Ctrl-C")
        __import__("_thread").interrupt_main()  # the job gets its KeyboardInterrupt back
    except BaseException as e:  # noqa: BLE001 - answered, never raised into the target
        ack(ok=False, error="internal", message=f"{type(e).__name__}: {e}")


with __import__("contextlib").suppress(BaseException):  # nothing escapes into the target
    _main()
