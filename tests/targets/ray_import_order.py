"""Import real ``ray.util.collective`` and torch in a given order under ``wsprof run``.

Usage: wsprof run --out DIR -- python ray_import_order.py {torch_first|ray_first}

No Ray cluster is started. Prints one JSON line: whether torch was imported before the imports,
whether the bootstrap patched, and whether ``allreduce`` is hooked under both of its names;
then unpatches, which writes the trace into DIR.
"""

from __future__ import annotations

import importlib
import json
import sys

from ray_actors import IMPORT_ORDERS


def main(order: str) -> None:
    """Import in ``order``, report, unpatch."""
    torch_before = "torch" in sys.modules
    names = IMPORT_ORDERS.get(order)
    if names is None:
        raise SystemExit(f"unknown order {order!r}")
    for name in names:  # import_module: an import sorter cannot reorder these
        importlib.import_module(name)
    import ray.util.collective as col
    import ray.util.collective.collective as impl

    import wsprof
    from wsprof.capture import collectives

    print(
        json.dumps(
            {
                "torch_before": torch_before,
                "trace": wsprof.trace_path(),
                "hooked": collectives.is_hook(col.allreduce) and col.allreduce is impl.allreduce,
            }
        ),
        flush=True,
    )
    wsprof.unpatch()


if __name__ == "__main__":
    main(sys.argv[1])
