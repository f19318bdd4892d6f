"""The alias table: every name that reaches a collective, mapped to one canonical op.

Names differ between torch versions (2.13 has ``dist.all_gather_single`` and no
``dist._allgather_base``; older versions route ``all_gather_into_tensor`` to
``ProcessGroup._allgather_base``), so the table lists every name known and :func:`build`
keeps those that exist in the installed torch. A name that exists but is in neither
:data:`API_OPS`/:data:`BACKEND_OPS` nor the exclusion tables is reported by
:func:`unclassified` (a test fails on it), so a new collective in a future torch cannot slip
through unhooked.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Any

#: ``torch.distributed`` module functions -> canonical op.
API_OPS: dict[str, str] = {
    "broadcast": "broadcast",
    "all_gather": "all_gather",
    "all_gather_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather_into_tensor",
    "_all_gather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all_single",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "monitored_barrier": "barrier",
    "send": "send",
    "recv": "recv",
    "batch_isend_irecv": "batch_p2p",
    "broadcast_object_list": "broadcast",
    "all_gather_object": "all_gather",
    "gather_object": "gather",
    "scatter_object_list": "scatter",
    "send_object_list": "send",
    "recv_object_list": "recv",
}

#: The coalescing context manager: the block it opens is one logical call (op ``coalesced``).
COALESCING = "_coalescing_manager"

#: ``ProcessGroup`` methods -> canonical op.
BACKEND_OPS: dict[str, str] = {
    "broadcast": "broadcast",
    "allgather": "all_gather",
    "allgather_coalesced": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "all_gather_single_coalesced": "all_gather_into_tensor",
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "all_to_all_single": "all_to_all_single",
    "gather": "gather",
    "scatter": "scatter",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv",
    "barrier": "barrier",
    "monitored_barrier": "barrier",
}

#: Public ``torch.distributed`` functions that are not collectives, with the reason.
API_EXCLUDED: dict[str, str] = {
    "isend": "compared by identity inside torch (P2POp, batch_isend_irecv) with references users "
    "take before patch(): left unpatched; its ProcessGroup.send is seen by the backend layer",
    "irecv": "compared by identity inside torch (P2POp, batch_isend_irecv): left unpatched; its "
    "ProcessGroup.recv is seen by the backend layer",
    "breakpoint": "debugging helper",
    "destroy_process_group": "group lifecycle",
    "get_backend": "query",
    "get_backend_config": "query",
    "get_debug_level": "query",
    "get_default_backend_for_device": "query",
    "GroupName": "type alias",
    "get_global_rank": "query",
    "get_group_rank": "query",
    "get_node_local_rank": "query",
    "get_pg_count": "query",
    "get_process_group_ranks": "query",
    "get_rank": "query",
    "get_world_size": "query",
    "init_device_mesh": "group lifecycle",
    "init_process_group": "group lifecycle",
    "is_available": "query",
    "is_backend_available": "query",
    "is_gloo_available": "query",
    "is_initialized": "query",
    "is_mpi_available": "query",
    "is_nccl_available": "query",
    "is_torchelastic_launched": "query",
    "is_ucc_available": "query",
    "is_xccl_available": "query",
    "new_group": "group lifecycle (its barrier, if any, is seen by the backend layer)",
    "new_subgroups": "group lifecycle",
    "new_subgroups_by_enumeration": "group lifecycle",
    "record_comm": "annotation helper, no communication",
    "register_rendezvous_handler": "setup",
    "rendezvous": "setup",
    "shrink_group": "group lifecycle",
    "split_group": "group lifecycle",
    "supports_complex": "query",
}

#: Public ``ProcessGroup`` methods that are not collectives, with the reason.
BACKEND_EXCLUDED: dict[str, str] = {
    "abort": "lifecycle",
    "boxed": "conversion",
    "bound_device_id": "query",
    "get_group_store": "query",
    "group_desc": "query",
    "group_name": "query",
    "merge_remote_group": "group lifecycle",
    "name": "query",
    "rank": "query",
    "set_timeout": "configuration",
    "shutdown": "lifecycle",
    "size": "query",
    "split_group": "group lifecycle",
    "unbox": "conversion",
    "use_pg_for_symm_mem_rendezvous": "configuration",
}


@dataclass(frozen=True)
class AliasTable:
    """The names hooked in the installed torch: (name, canonical op) pairs per layer."""

    api: tuple[tuple[str, str], ...]
    backend: tuple[tuple[str, str], ...]


def build(dist: Any) -> AliasTable:
    """Keep the names of :data:`API_OPS` and :data:`BACKEND_OPS` that the installed torch has.

    Args:
        dist: the ``torch.distributed`` module.
    """
    pg = dist.ProcessGroup
    api = tuple((n, op) for n, op in API_OPS.items() if callable(getattr(dist, n, None)))
    backend = tuple((n, op) for n, op in BACKEND_OPS.items() if n in pg.__dict__)
    return AliasTable(api, backend)


def unclassified(dist: Any) -> tuple[list[str], list[str]]:
    """Names in the installed torch that are neither hooked nor excluded.

    Public (no leading underscore) functions of ``torch.distributed`` defined in its
    ``distributed_c10d`` module, and public methods of ``ProcessGroup``, plus every private
    name that looks like a collective (``_all*``, ``_reduce*``, ``_broadcast*``).

    Returns:
        (api names, backend names), each sorted.
    """

    def looks_collective(name: str) -> bool:
        return name.startswith(("_all", "_reduce", "_broadcast", "_scatter", "_gather"))

    api: list[str] = []
    for name in dir(dist):
        if name.startswith("_") and not looks_collective(name):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated names warn on access (reduce_op)
            obj = getattr(dist, name)
            if not inspect.isfunction(obj) and not callable(obj):
                continue
            if getattr(obj, "__module__", "") != "torch.distributed.distributed_c10d":
                continue
            if inspect.isclass(obj):
                continue
        if name not in API_OPS and name not in API_EXCLUDED:
            api.append(name)
    backend: list[str] = []
    for name, obj in vars(dist.ProcessGroup).items():
        if name.startswith("_") and not looks_collective(name):
            continue
        if not callable(obj) or isinstance(obj, type) or name.isupper():
            continue
        if name not in BACKEND_OPS and name not in BACKEND_EXCLUDED:
            backend.append(name)
    return sorted(api), sorted(backend)
