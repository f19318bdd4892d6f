"""Replays a written slime timeline as a live writer would: each record is written as this
process's own (its pid and host), line-buffered, with a pause after every completed weight
sync, so that ``wsprof watch`` sees the file grow and then its writer exit.

    python slime_timeline_replay.py SRC.jsonl DST.jsonl PAUSE_S
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def main(argv: list[str]) -> None:
    src, dst, pause = argv[0], argv[1], float(argv[2])
    with open(src, encoding="utf-8") as inp, open(dst, "a", encoding="utf-8", buffering=1) as out:
        for line in inp:
            rec = json.loads(line)
            rec["pid"], rec["hostname"] = os.getpid(), socket.gethostname()
            out.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
            if rec["operation"] == "weight_sync_complete":
                time.sleep(pause)


if __name__ == "__main__":
    main(sys.argv[1:])
