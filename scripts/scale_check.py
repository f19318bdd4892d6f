"""Scale: what does analysing a 1,024-rank run cost, on one core, on all cores, and on Ray?

Generates ``--traces`` synthetic traces (default 1,024, the many-ranks benchmark's generator:
``--calls`` calls each over ``--steps`` steps, one outlier rank whose wrapper grows) spread over
``--nodes`` folders (default 8), one per simulated node, plus a folder that hard-links them all
(the union, as if copied to one machine). Then, each in a fresh process so that its memory is
its own:

- ``1 worker``: ``analyze_loaded_run(union, workers=1)``, the traces read one after another;
- ``N workers``: the same with a pool of this machine's cores (:mod:`wsprof.analysis.pool`);
- ``Ray``: a real local Ray cluster of ``--nodes`` nodes (``ray.cluster_utils.Cluster``, on
  127.0.0.1), each node told its folder (``WSPROF_NODE_RUN_DIR``), digested where the traces
  are by :func:`wsprof.analysis.on_ray.digest_on_ray`; the nodes share this machine's cores.

Per mode: wall time (s), the driver's peak RSS (MiB; the pool's workers apart), the bytes that
travel to the driver (digests, pickled; the traces' bytes for comparison), and a hash of the
analysis's JSON: the three must be equal. ``--skip-ray`` leaves the cluster out.

Usage: python scripts/scale_check.py [--traces 1024] [--calls 20000] [--nodes 8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
#: The first this many traces again, alone: the per-call cost of a small run of the same shape.
SMALL_RUN = 64


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _doc_hash(analysis: Any, source: str) -> str:
    from wsprof.report.jsonout import to_dict

    doc = to_dict(analysis)
    text = json.dumps(doc, sort_keys=True).replace(source, "RUN")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure(mode: str, folder: str, nodes: int) -> dict[str, Any]:
    """One mode, in this process: wall, peak RSS, bytes moved, the JSON's hash."""
    from wsprof.analysis.run import analyze_digests
    from wsprof.inputs import LoadedRun, load

    union = os.path.join(folder, "union64" if mode == "one64" else "union")
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    moved = 0
    if mode in ("one", "pool", "one64"):
        run = load(union)
        assert isinstance(run, LoadedRun)
        from wsprof.analysis.pool import default_workers, digest_files

        # analyze_loaded_run's two steps, timed apart: digest every trace, then merge.
        workers = default_workers() if mode == "pool" else 1
        made = digest_files(run.trace_paths, run.reader(), workers)
        digests = list(run.admit(zip(run.trace_paths, made), lambda d: d.trace.rank))
        merge_t0 = time.perf_counter()
        analysis = analyze_digests(digests, run.path, list(run.problems), None, workers)
        wall = time.perf_counter() - t0
        merge_s = time.perf_counter() - merge_t0
        source = union
    else:
        # On loopback only, HOME and Ray's files in a private folder (as the tests do).
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
        os.makedirs(os.path.join(tmp, "home"))
        os.environ["HOME"] = os.path.join(tmp, "home")
        # Cluster writes its address under RAY_TMPDIR/ray (default /tmp/ray): keep it here.
        os.makedirs(os.path.join(tmp, "ray"))
        os.environ["RAY_TMPDIR"] = tmp
        import ray
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        from wsprof.analysis.on_ray import NODE_RUN_DIR_ENV, digest_on_ray
        from wsprof.analysis.pool import default_workers

        ray_constants.ENABLE_RAY_CLUSTER = False
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "node_ip_address": "127.0.0.1",
                "num_cpus": 1,
                "temp_dir": os.path.join(tmp, "t"),
                "include_dashboard": False,
            },
        )
        try:
            for k in range(nodes):
                cluster.add_node(
                    node_ip_address="127.0.0.1",
                    num_cpus=1,
                    env_vars={NODE_RUN_DIR_ENV: os.path.join(folder, f"node{k}")},
                )
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
            assert all(n["NodeManagerAddress"].startswith("127.") for n in ray.nodes())
            t0 = time.perf_counter()
            digests, problems = digest_on_ray(os.path.join(folder, "empty"), cluster.address, 1)
            merge_t0 = time.perf_counter()
            analysis = analyze_digests(digests, "RUN", list(problems), None, default_workers())
            wall = time.perf_counter() - t0
            merge_s = time.perf_counter() - merge_t0
            assert not problems, problems[:3]
            moved = sum(len(pickle.dumps(d)) for d in digests)
        finally:
            ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)
        source = "RUN"
    if mode != "ray":
        from wsprof.analysis.digest import digest_trace
        from wsprof.trace.reader import find_traces, read_trace

        # Bytes a digest weighs (measured after the timing, on a sample of the traces).
        paths = find_traces(union)
        sample = paths[:: max(1, len(paths) // 16)]
        per = [len(pickle.dumps(digest_trace(read_trace(p), i))) for i, p in enumerate(sample)]
        moved = int(sum(per) / len(per) * len(paths))
    return {
        "mode": mode,
        "wall_s": round(wall, 1),
        "merge_s": round(merge_s, 1),
        "driver_rss_mib": round(_rss_mib(), 0),
        "rss_before_mib": round(rss0, 0),
        "digest_bytes": moved,
        "findings": sorted({f.kind for f in analysis.findings}),
        "json": _doc_hash(analysis, source),
    }


def generate(folder: str, traces: int, calls: int, steps: int, nodes: int) -> int:
    """The run: node folders and the union; returns the traces' bytes."""
    sys.path.insert(0, str(SCRIPTS))
    import bench_many_ranks as bench

    gen = os.path.join(folder, "gen")
    run = bench.generate_run(gen, traces, calls, steps, 4, (traces // 3,), 5.0, 3.0)
    union = os.path.join(folder, "union")
    os.makedirs(union)
    os.makedirs(os.path.join(folder, "union64"))
    os.makedirs(os.path.join(folder, "empty"))
    size = 0
    for spec in run.ranks:
        node = os.path.join(folder, f"node{spec.rank % nodes}")
        os.makedirs(node, exist_ok=True)
        name = os.path.basename(spec.path)
        os.rename(spec.path, os.path.join(node, name))
        os.link(os.path.join(node, name), os.path.join(union, name))
        if spec.rank < SMALL_RUN:
            os.link(os.path.join(node, name), os.path.join(folder, "union64", name))
        size += os.path.getsize(os.path.join(node, name))
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--keep", help="generate into this folder and keep it")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.folder, args.nodes)))
        return
    folder = args.keep or tempfile.mkdtemp(prefix="wsprof-scale-")
    try:
        t0 = time.perf_counter()
        size = generate(folder, args.traces, args.calls, args.steps, args.nodes)
        print(
            f"generated {args.traces} traces x {args.calls:,} calls over {args.nodes} node "
            f"folders in {time.perf_counter() - t0:.0f} s: {size / 2**20:.0f} MiB of traces"
        )
        rows = []
        modes = ["one64", "one", "pool"] + ([] if args.skip_ray else ["ray"])
        for mode in modes:
            res = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--measure",
                    mode,
                    "--folder",
                    folder,
                    "--nodes",
                    str(args.nodes),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if res.returncode != 0:
                print(f"{mode}: failed\n{res.stderr[-3000:]}")
                continue
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        n_calls = args.traces * args.calls
        small = min(SMALL_RUN, args.traces)
        print(
            "\n| mode | wall (s) | of it, merge (s) | ns per call | driver peak RSS (MiB) | "
            "bytes to the driver |"
        )
        print("|---|---|---|---|---|---|")
        names = {
            "one64": f"{small} traces, 1 worker",
            "one": "1 worker",
            "pool": f"{os.cpu_count()} workers",
            "ray": f"Ray, {args.nodes} nodes",
        }
        for r in rows:
            calls = small * args.calls if r["mode"] == "one64" else n_calls
            print(
                f"| {names[r['mode']]} | {r['wall_s']} | {r['merge_s']} | "
                f"{r['wall_s'] / calls * 1e9:.0f} | "
                f"{r['driver_rss_mib']:.0f} | {r['digest_bytes'] / 2**20:.1f} MiB of digests "
                f"(traces: {size / 2**20:.0f} MiB) |"
            )
        rows = [r for r in rows if r["mode"] != "one64"] + [r for r in rows if r["mode"] == "one64"]
        hashes = {r["json"] for r in rows if r["mode"] != "one64"}
        print(
            f"\nJSON identical across modes: {'yes' if len(hashes) == 1 else 'NO'} "
            f"({', '.join(r['mode'] + '=' + r['json'] for r in rows if r['mode'] != 'one64')}); "
            "findings: "
            f"{rows[0]['findings'] if rows else []}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
