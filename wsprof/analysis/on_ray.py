"""Digest a run's traces where they are: one Ray task per node that holds traces.

A 1,000-GPU RL job is a Ray cluster of 100+ nodes, and ``wsprof run`` (or ``WSPROF_OUT``)
writes each process's trace on its own node, usually to local disk. :func:`digest_on_ray` asks
every alive node which trace files it holds (a task pinned to the node with
``NodeAffinitySchedulingStrategy(node_id, soft=False)``), then runs one task per node that holds
some, pinned the same way, which digests them with the node's cores
(:func:`~wsprof.analysis.pool.digest_files`). Only the digests travel to the driver; the
run-level analysis merges them (:func:`~wsprof.analysis.run.analyze_digests`).

Which folder a node holds: ``RUN_DIR`` as that node sees it, unless its workers' environment
has ``WSPROF_NODE_RUN_DIR`` (:data:`NODE_RUN_DIR_ENV`), which names the node's folder instead
(a node whose traces are elsewhere; a one-machine test cluster giving each node its own
folder). A file that several nodes list (a shared file system: same device, inode, size and
modification time) is digested once, by the first node that lists it (nodes in id order).

A node that dies, or whose task fails, is named; its traces are counted as not read (lines
``skipped <path>: ...``, which the verdict and the coverage name), never a traceback.

Ray is an optional extra (``pip install 'wsprof[ray]'``), imported only here, only when called.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wsprof.analysis.digest import Digest
from wsprof.analysis.pool import default_workers, digest_files
from wsprof.errors import InputError
from wsprof.trace.reader import find_traces

#: A node's own trace folder, when it is not the ``RUN_DIR`` given (read on the node).
NODE_RUN_DIR_ENV = "WSPROF_NODE_RUN_DIR"


@dataclass(frozen=True)
class NodeFiles:
    """What one node holds: its id and address, its folder, and its trace files.

    Attributes:
        node_id: Ray's node id (hex).
        ip: the node's address.
        folder: the folder it listed.
        files: per trace file: path, size (bytes), device, inode, modification time (ns).
        error: why the folder could not be listed (None: it was).
    """

    node_id: str
    ip: str
    folder: str
    files: tuple[tuple[str, int, int, int, int], ...]
    error: str | None = None


def list_node(run_dir: str) -> tuple[str, tuple[tuple[str, int, int, int, int], ...], str | None]:
    """On a node (a Ray task pinned to it): the folder it holds and that folder's trace files.

    Args:
        run_dir: the run folder given to ``--ray``; :data:`NODE_RUN_DIR_ENV` in this worker's
            environment names the node's folder instead.

    Returns:
        ``(folder, files, error)``: per file, its path, size (bytes), device, inode and
        modification time (ns); ``error``: why the folder gave no files, or a file could not be
        stat'ed (None: listed). Never raises: a missing or unreadable folder is ``error``.
    """
    folder = os.environ.get(NODE_RUN_DIR_ENV) or run_dir
    try:
        paths = find_traces(folder)
    except InputError as e:
        return folder, (), str(e)
    out: list[tuple[str, int, int, int, int]] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as e:
            return folder, tuple(out), f"{p}: {e.strerror}"
        out.append((p, st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns))
    return folder, tuple(out), None


def digest_node(paths: Sequence[str], workers: int | None) -> list[Digest | str]:
    """On a node (a Ray task pinned to it): per path, in order, its digest or the one-line
    reason it could not be read (:func:`~wsprof.analysis.pool.digest_files`).

    Args:
        paths: the node's trace files.
        workers: processes that digest them (None: the cores this worker may run on).
    """
    n = workers or default_workers()
    return [d if isinstance(d, Digest) else str(d) for d in digest_files(paths, None, n)]


def digest_on_ray(
    run_dir: str, address: str | None = "auto", workers_per_node: int | None = None
) -> tuple[list[Digest], list[str]]:
    """The digests of a run's traces, made on the Ray nodes that hold them.

    Args:
        run_dir: the run folder as each node sees it.
        address: the Ray cluster's address (``auto``: the one this machine is part of); not
            used when Ray is already initialised in this process.
        workers_per_node: processes each node digests with (None: its cores).

    Returns:
        ``(digests, problems)``: digests in the run's order (by path within the node's folder,
        then node id; ``index`` set to that place), and one ``skipped ...`` line per trace not
        read (unreadable, or on a node that was lost).

    Raises:
        InputError: Ray is not installed, the cluster cannot be reached, or no trace could be
            read on any node.
    """
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'wsprof[ray]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(
                address=address,
                logging_level=logging.ERROR,
                log_to_driver=False,
                include_dashboard=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise InputError(
                f"--ray {address}: cannot connect to a Ray cluster ({str(e).splitlines()[0]}); "
                "start one (ray start --head) or give its address"
            ) from None
    try:
        return _digest(ray, NodeAffinitySchedulingStrategy, run_dir, workers_per_node)
    finally:
        if started:
            ray.shutdown()


def _digest(
    ray: Any, affinity: Any, run_dir: str, workers: int | None
) -> tuple[list[Digest], list[str]]:
    """:func:`digest_on_ray` once connected (``ray``: the module; ``affinity``: its
    ``NodeAffinitySchedulingStrategy``)."""
    nodes = sorted(
        ((str(n["NodeID"]), str(n["NodeManagerAddress"])) for n in ray.nodes() if n["Alive"]),
        key=lambda n: n[0],
    )
    lister = ray.remote(num_cpus=0, max_retries=0)(list_node)
    digester = ray.remote(num_cpus=0, max_retries=0)(digest_node)

    def pinned(fn: Any, node_id: str) -> Any:
        return fn.options(scheduling_strategy=affinity(node_id=node_id, soft=False))

    problems: list[str] = []
    listed: list[NodeFiles] = []
    refs = [pinned(lister, nid).remote(run_dir) for nid, _ in nodes]
    for (nid, ip), ref in zip(nodes, refs):
        try:
            folder, files, error = ray.get(ref)
        except ray.exceptions.RayError as e:
            problems.append(f"node {ip} ({nid[:8]}) could not list its traces ({_why(e)})")
            continue
        listed.append(NodeFiles(nid, ip, folder, files, error))
    # Each file once: the first node (by id) that lists it; its place in the run's order.
    seen: set[tuple[int, int, int, int]] = set()
    mine: dict[str, list[tuple[str, str]]] = {}  # node id -> (path, order key)
    for nf in listed:
        for path, size, dev, ino, mtime in nf.files:
            ident = (dev, ino, size, mtime)
            if ident in seen:
                continue
            seen.add(ident)
            mine.setdefault(nf.node_id, []).append((path, os.path.relpath(path, nf.folder)))
    by_id = {nf.node_id: nf for nf in listed}
    tasks = {
        nid: pinned(digester, nid).remote([p for p, _ in files], workers)
        for nid, files in mine.items()
    }
    got: list[tuple[str, str, Digest | str]] = []  # (order key, node id, digest or line)
    for nid, ref in tasks.items():
        nf = by_id[nid]
        try:
            out = ray.get(ref)
        except ray.exceptions.RayError as e:
            for path, rel in mine[nid]:
                got.append(
                    (
                        rel,
                        nid,
                        f"{path}: node {nf.ip} ({nid[:8]}) was lost while its traces were "
                        f"digested ({type(e).__name__}): not read",
                    )
                )
            continue
        for (_path, rel), d in zip(mine[nid], out):
            got.append((rel, nid, d))
    got.sort(key=lambda g: (g[0], g[1]))
    digests: list[Digest] = []
    for i, (_rel, _nid, d) in enumerate(got):
        if isinstance(d, Digest):
            d.index = i  # as digest_files does: the place among all the run's files
            digests.append(d)
        else:
            problems.append(f"skipped {d}")
    empty = [nf for nf in listed if nf.error is not None]
    if not digests:
        first = problems[0] if problems else (empty[0].error if empty else None)
        raise InputError(
            f"{run_dir}: no trace could be read on any of the {len(nodes)} Ray node(s)"
            + (
                f" (the first problem: {first})"
                if first
                else "; is it the run folder each node wrote?"
            )
        )
    return digests, problems


def _why(e: BaseException) -> str:
    """A Ray error in one line: its type and its first line."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:160]}" if first else type(e).__name__
