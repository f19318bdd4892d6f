"""Stand-in for ``accelerate.commands.accelerate_cli``: the ``accelerate`` console script's
``main`` (``accelerate launch ...``)."""

from __future__ import annotations

from accelerate.commands.launch import main

if __name__ == "__main__":
    main()
