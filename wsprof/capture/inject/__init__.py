"""``wsprof attach --inject``: the full in-process hooks in a job that is already running.

Two sides and one exchange:

- :mod:`~wsprof.capture.inject.request` -- what the injector asks (``patch`` or ``unpatch``,
  with validated arguments) and what the target answers (the ack); JSON files in a private
  folder of the injector (mode 0700).
- :mod:`~wsprof.capture.inject.bootstrap` -- the fixed script the target runs: stdlib only
  until it has checked that ``torch`` is loaded and ``wsprof`` importable, catches everything,
  answers in one JSON file. No string from the user reaches the target: only this script's
  path (in the private folder) and the request file beside it.
- :mod:`~wsprof.capture.inject.target` -- inside the target: ``patch`` (the capture session
  with ``source: inject``, presets for the frameworks already imported, a watchdog that
  unpatches when the injector dies) and ``unpatch`` (everything restored, checked by identity).
- :mod:`~wsprof.capture.inject.mechanism` -- how the script gets run: ``sys.remote_exec`` on
  Python >= 3.14 (injector and target), else gdb: ``Py_AddPendingCall`` queues a call of
  ``PyRun_SimpleString`` that the target's main thread runs at its next safe point, with the
  GIL, as it would run a signal handler; gdb detaches at once, so the target is paused only
  while gdb attaches, writes 60 bytes and queues the call.
- :mod:`~wsprof.capture.inject.injector` -- the checks before anything touches the target
  (process, ptrace, Python build, torch loaded, gdb), the injection with a timeout on every
  step, the wait for the ack, and the pause measured from ``/proc/<pid>/stat``.
"""
