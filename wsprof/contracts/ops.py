"""Every name that reaches a collective, mapped to one canonical op: the one place a new
collective alias goes.

Names differ between torch versions (2.13 has ``dist.all_gather_single`` and no
``dist._allgather_base``; older versions route ``all_gather_into_tensor`` to
``ProcessGroup._allgather_base``), so the tables list every name known; capture keeps those
the installed torch has (:func:`wsprof.capture.aliases.build`), and a name that exists but is
in neither the op tables nor the exclusion tables is reported by
:func:`wsprof.capture.aliases.unclassified` (a test fails on it), so a new collective in a
future torch cannot slip through unhooked. Analysis reads the same tables to tell which ops
move tensors (:mod:`wsprof.analysis.phases`). Pure data.
"""

from __future__ import annotations

import functools

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

#: C++ helpers exposed in ``torch.distributed`` that issue collectives from C++ on the group
#: passed first (DDP syncs module state and checks parameters through them): hooked as API
#: names; the number of collectives each call issued is read from c10d's count.
CPP_HELPERS: dict[str, str] = {
    "_broadcast_coalesced": "broadcast",
    "_verify_params_across_processes": "all_gather",
}

#: Backend methods that can issue more collectives than one (gloo's ``monitored_barrier`` is a
#: send/recv round; its ``reduce_scatter`` and coalesced reduce-scatter issue one collective
#: per rank or tensor, seen running torch's own ``test_c10d_gloo.py``): their hook reads
#: c10d's count before and after. The per-parameter hot paths are not among them.
COUNTED = frozenset({"monitored_barrier", "reduce_scatter", "reduce_scatter_tensor_coalesced"})

#: Canonical ops that move tensors from rank to rank: what a weight push is made of (a
#: trainer's per-parameter broadcasts and full-weight gathers, point-to-point sends). Left
#: out: the reductions (all_reduce, reduce, reduce_scatter: outside backward they reduce
#: metrics), barrier (waiting, not work), gather (to one rank: metrics and objects) and
#: all_to_all (MoE token dispatch inside a forward).
WEIGHT_MOVING_OPS = frozenset(
    {"broadcast", "all_gather", "all_gather_into_tensor", "scatter", "send", "recv", "batch_p2p"}
)

#: Group lifecycle functions hooked only to read c10d's counts before a group goes away.
LIFECYCLE = ("destroy_process_group",)

#: Canonical "op" of the completion of a functional collective (``wait_tensor``).
COMPLETION = "completion"

#: Dispatcher ops (``torch.ops.<namespace>.<name>``) -> canonical op, hooked at their Python
#: entry (:mod:`wsprof.capture.functional`). ``_c10d_functional`` is what functional
#: collectives, DTensor, FSDP2 and compiled graphs call; ``_c10d_functional_autograd`` and
#: ``_dtensor`` reach the backend from C++; ``c10d`` ops are what ``ProcessGroup`` methods run
#: in C++ (seen there by the backend layer), hooked for Python callers of ``torch.ops.c10d``.
FUNCTIONAL_OPS: dict[str, dict[str, str]] = {
    "_c10d_functional": {
        "all_gather_into_tensor": "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
        "all_gather_into_tensor_out": "all_gather_into_tensor",
        "all_reduce": "all_reduce",
        "all_reduce_": "all_reduce",
        "all_reduce_coalesced": "all_reduce",
        "all_reduce_coalesced_": "all_reduce",
        "all_to_all_single": "all_to_all_single",
        "batch_p2p_ops": "batch_p2p",
        "broadcast": "broadcast",
        "broadcast_": "broadcast",
        "irecv": "recv",
        "isend": "send",
        "reduce_scatter_tensor": "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
        "reduce_scatter_tensor_out": "reduce_scatter_tensor",
        "wait_tensor": COMPLETION,
    },
    "_c10d_functional_autograd": {
        "all_gather_into_tensor": "all_gather_into_tensor",
        "all_to_all_single": "all_to_all_single",
        "reduce_scatter_tensor": "reduce_scatter_tensor",
    },
    "_dtensor": {
        "shard_dim_alltoall": "all_to_all_single",
    },
    "c10d": {
        "_allgather_base_": "all_gather_into_tensor",
        "_reduce_scatter_base_": "reduce_scatter_tensor",
        "allgather_": "all_gather",
        "allgather_coalesced_": "all_gather",
        "allgather_into_tensor_coalesced_": "all_gather_into_tensor",
        "allreduce_": "all_reduce",
        "allreduce_coalesced_": "all_reduce",
        "alltoall_": "all_to_all",
        "alltoall_base_": "all_to_all_single",
        "barrier": "barrier",
        "broadcast_": "broadcast",
        "gather_": "gather",
        "monitored_barrier_": "barrier",
        "recv_": "recv",
        "recv_any_source_": "recv",
        "reduce_": "reduce",
        "reduce_scatter_": "reduce_scatter",
        "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor",
        "scatter_": "scatter",
        "send": "send",
    },
}

#: Dispatcher ops of those namespaces that are not collectives, with the reason.
FUNCTIONAL_EXCLUDED: dict[str, str] = {
    "c10d::check_for_nan": "a local NaN check, no communication",
    "_c10d_functional::_wrap_tensor_autograd": "wraps a result for autograd, no communication",
    "_dtensor::mesh_get_process_group": "query",
}

#: Whole namespaces left unhooked, with the reason.
FUNCTIONAL_EXCLUDED_NAMESPACES: dict[str, str] = {
    "c10d_functional": "the legacy namespace: its Python implementations call the hooked "
    "_c10d_functional ops, which record the call once",
}

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

#: ``torch.distributed.Backend`` (and C++ backend class) methods that are not collectives.
BACKEND_CLASS_EXCLUDED: dict[str, str] = {
    "_end_coalescing": "coalescing bracket (the ops inside it are hooked)",
    "_start_coalescing": "coalescing bracket (the ops inside it are hooked)",
    "_get_backend_name": "query",
    "_get_sequence_number_for_group": "query (the coverage audit reads it)",
    "_set_sequence_number_for_group": "configuration",
    "_set_default_timeout": "configuration",
    "_verify_work_timeout": "query",
    "_add_ephemeral_timeout": "configuration",
    "_is_initialized": "query",
    "_shutdown": "lifecycle",
    "_group_start": "p2p group bracket (the ops inside it are hooked)",
    "_group_end": "p2p group bracket (the ops inside it are hooked)",
    "_set_enable_nan_check": "configuration",
    "_start_time_estimate": "estimation mode",
    "_end_time_estimate": "estimation mode",
    "allocate_tensor": "memory allocation, no communication",
    "supports_tensor_alloc": "query",
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

#: The ``layer`` of a call taken from c10d's Flight Recorder (issued where no Python hook
#: sees: :mod:`wsprof.capture.flight`, :mod:`wsprof.trace.flight_dumps`).
FLIGHT_LAYER = "c10d"

#: Flight Recorder names (the op part of ``<backend>:<op>``) that neither :data:`API_OPS` nor
#: :data:`BACKEND_OPS` hold -> canonical op. gloo names some ops by what it runs:
#: ``all_gather_into_tensor`` is recorded as ``gloo:all_gather``, ``reduce_scatter_tensor`` as
#: ``gloo:all_reduce``, ``all_to_all_single`` as ``gloo:all_to_all``.
FLIGHT_OPS: dict[str, str] = {
    "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "allreduce_coalesced": "all_reduce",
    "alltoall_base": "all_to_all_single",
    "coalesced": "batch_p2p",
    "recv_any_source": "recv",
}


@functools.lru_cache(maxsize=1024)
def flight_op(profiling_name: str) -> str:
    """The canonical op of a Flight Recorder entry's ``profiling_name`` (``nccl:all_reduce``,
    ``nccl:send 0->1``); the name's op part itself when no table knows it."""
    _, _, rest = profiling_name.partition(":")
    name = (rest or profiling_name).split(" ", 1)[0].strip()
    return API_OPS.get(name) or BACKEND_OPS.get(name) or FLIGHT_OPS.get(name) or name


# ----------------------------------------------------------------------------- payload sizes

#: The gathers (all-gather family) and the reduce-scatters: a recorded call's payload is the
#: first tensor (or tensor list) among its first arguments (:mod:`wsprof.capture.collectives`),
#: which is the whole gathered buffer for some names and one rank's share for others.
GATHER_OPS = frozenset({"all_gather", "all_gather_into_tensor"})
REDUCE_SCATTER_OPS = frozenset({"reduce_scatter", "reduce_scatter_tensor"})

#: Namespaces whose calls take the *input* first (``_c10d_functional.all_gather_into_tensor(
#: input, group_size, group_name)``); the Flight Recorder's calls (layer :data:`FLIGHT_LAYER`)
#: carry their input sizes too.
INPUT_FIRST_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd", "_dtensor"})

#: Gather names (after the namespace) whose first tensor argument is the whole output buffer
#: (``dist.all_gather(tensor_list, tensor)``, ``dist.all_gather_into_tensor(output, input)``,
#: ``ProcessGroup._allgather_base(output, input)``, ``c10d::_allgather_base_(output, input)``);
#: every other gather outside :data:`INPUT_FIRST_NAMESPACES` (``ProcessGroup.allgather``,
#: ``c10d::allgather_``, ``dist.all_gather_coalesced``: their outputs are lists of lists, so
#: the inputs are what was recorded) records one rank's input.
WHOLE_FIRST_GATHERS = frozenset(
    {
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_single",
        "_allgather_base",
        "_allgather_base_",
        "allgather_into_tensor_coalesced",
        "allgather_into_tensor_coalesced_",
        "all_gather_single_coalesced",
    }
)


def payload_is_one_rank(op: str, api: str, layer: str) -> bool:
    """Whether a recorded call's payload bytes are one rank's share of the buffer the
    collective moves (so the whole is that times the group size), per the argument order of
    the name it was called by: a gather recorded from its input (the functional ops,
    ``ProcessGroup.allgather``, the Flight Recorder's input sizes), a reduce-scatter recorded
    from its output (``dist.reduce_scatter_tensor(output, input)``, ``ProcessGroup`` and
    ``c10d`` methods). Every other op's payload is the whole buffer."""
    namespace, _, name = api.rpartition(".")
    input_first = layer == FLIGHT_LAYER or namespace in INPUT_FIRST_NAMESPACES
    if op in GATHER_OPS:
        return input_first or name not in WHOLE_FIRST_GATHERS
    if op in REDUCE_SCATTER_OPS:
        return not input_first
    return False
