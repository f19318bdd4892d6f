"""wsprof's process bootstrap, put on ``PYTHONPATH`` by ``wsprof run -- CMD``.

Python imports ``sitecustomize`` at start-up in every interpreter whose path holds it, so every
Python process CMD starts (the trainer, its workers, Ray actors started on this machine with the
inherited environment) patches itself (:func:`wsprof.bootstrap.start`) and writes into the run
folder named by ``$WSPROF_OUT``. A ``sitecustomize`` of the user's that this one shadows is run
afterwards, as if this one were not there. Nothing here ever raises into the process.
"""

from __future__ import annotations


def _run() -> None:
    import os
    import sys

    try:
        from wsprof import bootstrap

        bootstrap.start()
    except Exception as e:  # noqa: BLE001 - a profiler must never stop the program
        sys.stderr.write(f"wsprof: bootstrap failed ({type(e).__name__}: {e}); not profiling\n")
    # Chain: the next sitecustomize on the path (a venv's, a distribution's), once.
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None and spec.origin != __file__:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(
            f"wsprof: the program's own sitecustomize failed: {type(e).__name__}: {e}\n"
        )


_run()
