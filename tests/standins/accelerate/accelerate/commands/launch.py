"""Stand-in for ``accelerate.commands.launch``, shaped like accelerate 1.x's
``multi_gpu_launcher``: it imports torch and runs ``torch.distributed.run.run`` in this same
process, which starts the workers (``accelerate launch --num_processes N script ...``).

Usage: python -m accelerate.commands.launch --num_processes N --main_process_port P SCRIPT ARGS
"""

from __future__ import annotations

import sys

import torch.distributed.run as distrib_run


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "launch":  # through the ``accelerate`` console script
        args = args[1:]
    n = args[args.index("--num_processes") + 1]
    port = args[args.index("--main_process_port") + 1]
    script = args[args.index("--main_process_port") + 2 :]
    parsed = distrib_run.get_args_parser().parse_args(
        ["--nproc-per-node", n, "--master-port", port, *script]
    )
    distrib_run.run(parsed)


if __name__ == "__main__":
    main()
