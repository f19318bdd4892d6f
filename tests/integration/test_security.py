"""What a trace never holds: environment values and tensor contents; and who may read it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from helpers import free_port, running_target

TOKEN = "wsprof-secret-7f3a9c"

_CHILD = f"""
import os, sys, warnings
warnings.simplefilter("ignore")
import torch, torch.distributed as dist
import wsprof
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
wsprof.patch(sys.argv[1])
wsprof.step()
payload = torch.tensor(list({TOKEN!r}.encode()), dtype=torch.uint8)
for _ in range(5):
    dist.broadcast(payload, 0)
    dist.all_reduce(payload.float())
wsprof.counter("loss", 1.5)
wsprof.unpatch()
"""


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())


def test_no_environment_value_and_no_tensor_content_in_a_trace(tmp_path: Path) -> None:
    env = {**os.environ, "WSPROF_TEST_SECRET": TOKEN, "HF_TOKEN": TOKEN}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    traces = list(tmp_path.glob("*.wsprof"))
    assert traces
    raw = _all_bytes(tmp_path)
    assert TOKEN.encode() not in raw, "a secret from the environment or a tensor leaked"
    for p in traces:
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p


def test_attach_traces_are_user_only_and_hold_no_environment(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "WSPROF_TEST_SECRET": TOKEN}
    with running_target() as target:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from wsprof.cli import main; sys.exit(main())",
                "attach",
                str(target.pid),
                "--duration",
                "2",
                "--window",
                "1",
                "--out",
                str(out),
                "--no-report",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    files = list(out.glob("*.wsprof"))
    assert len(files) == 2
    for p in files:
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
    assert TOKEN.encode() not in _all_bytes(out)
