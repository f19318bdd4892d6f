"""Shared weight buckets kept alive (issue 35): the per-update reading of the ``share.*``
counters (:mod:`wsprof.analysis.sharing`), the rule that names the leak with bytes an update and
its holder (:mod:`wsprof.analysis.rules.sharing`)."""

from __future__ import annotations

import numpy as np
import pytest
import rule_kit

from wsprof.analysis.rules.sharing import SharedBucketsKept
from wsprof.analysis.sharing import engine_step_specs, sharing_of
from wsprof.analysis.worlds import find_worlds
from wsprof.contracts.counters import proc_counter, share_counter
from wsprof.contracts.events import EventKind, ShareHolder, ShareSite, parse_event

pytestmark = pytest.mark.pure

MB = 1_000_000
UPDATE = 5.78 * MB


def _counters(kept: list[float], side: str = "export", n: int = 8) -> dict:
    """Counters as the capture records them: one row per update that has a next one."""
    k = len(kept)
    t = np.arange(1, k + 1, dtype=np.int64) * 600_000_000
    names = (
        ("exports", "update_exports", "update_exported_bytes", "kept_bytes")
        if side == "export"
        else ("imports", "update_imports", "update_imported_bytes", "imported_kept_bytes")
    )
    return {
        share_counter(names[0]): (t, np.arange(1, k + 1, dtype=float) * n),
        share_counter(names[1]): (t, np.full(k, float(n))),
        share_counter(names[2]): (t, np.full(k, UPDATE)),
        share_counter(names[3]): (t, np.asarray(kept, dtype=float)),
        proc_counter("shm_total_bytes"): (t[:1], np.array([24e9])),
    }


def _events(side: str = "export", path: str | None = None) -> list:
    site = ShareSite(
        side=side,
        api="_share_fd_cpu_",
        device="cpu",
        nbytes=722_432,
        site="MultiprocessingSerializer.serialize (sglang/utils.py:10)",
        caller="_send_to_colocated_engine (update_weight_from_tensor.py:301)",
    )
    out = [parse_event(1, EventKind.SHARE_SITE, site.encode())]
    if path is not None:
        holder = ShareHolder(side=side, path=path, nbytes=722_432, alive=40, alive_bytes=10)
        out.append(parse_event(2, EventKind.SHARE_HOLDER, holder.encode()))
    return out


def _findings(counters: dict, events: list, label: str = "trainer rank 0") -> list:
    sh = sharing_of(counters, events)
    pa = rule_kit.process(label=label, sharing=sh)
    return SharedBucketsKept().match(rule_kit.facts(processes=[pa]))


def test_share_events_read_back_typed() -> None:
    ev = _events(path="UpdateWeightFromTensor.long_lived_tensors[3]['flattened_tensor']")
    assert isinstance(ev[0], ShareSite) and ev[0].side == "export" and ev[0].nbytes == 722_432
    assert isinstance(ev[1], ShareHolder) and ev[1].path.endswith("['flattened_tensor']")
    # a hostile detail stays a plain event
    bad = parse_event(3, "share_holder", '{"side": "sideways"}')
    assert not isinstance(bad, ShareHolder)


def test_kept_buckets_are_named_with_bytes_an_update_and_their_holder() -> None:
    path = "UpdateWeightFromTensor.long_lived_tensors[62]['flattened_tensor']"
    kept = [UPDATE * (i + 1) for i in range(12)]
    (f,) = _findings(_counters(kept), _events(path=path))
    assert f.kind == "shared_buckets_kept" and f.severity == "warning"
    assert f.evidence.kept_per_update_bytes == pytest.approx(UPDATE, rel=0.01)
    assert f.evidence.holder == path and f"held by {path}" in f.title
    assert f.evidence.role == "trainer"
    # the serializer is named by its caller: the code that sends the buckets
    assert f.where == "_send_to_colocated_engine (update_weight_from_tensor.py:301)"
    assert f.evidence.updates_to_full is not None and f.evidence.updates_to_full > 1000


def test_an_engine_that_keeps_what_it_opened_is_named_as_the_engine() -> None:
    kept = [UPDATE * (i + 1) for i in range(12)]
    (f,) = _findings(
        _counters(kept, "import"), _events("import", "ModelRunner.kept[0]"), label="rank 2"
    )
    assert f.evidence.side == "import" and f.evidence.role == "engine"
    assert "(engine)" in f.title and "held by ModelRunner.kept[0]" in f.title


@pytest.mark.parametrize("steps", [12, 30])
def test_healthy_sharing_is_silent(steps: int) -> None:
    # one update in flight at most (the engine still holds the last bucket): no leak
    rng = np.random.default_rng(steps)
    kept = list(rng.choice([0.0, 722_432.0], size=steps))
    assert _findings(_counters(kept), _events()) == []


def test_a_kept_bucket_that_stops_growing_is_no_leak() -> None:
    # a cache of the last three updates: rises, then flat
    kept = [UPDATE * min(i + 1, 3) for i in range(12)]
    assert _findings(_counters(kept), _events()) == []


def test_no_holder_found_on_cuda_is_torchs_ipc_cache() -> None:
    kept = [UPDATE * (i + 1) for i in range(12)]
    c = _counters(kept)
    c[share_counter("exports_since_collect")] = (np.array([1]), np.array([96.0]))
    ev = _events(path=None)
    ev[0] = parse_event(
        1,
        EventKind.SHARE_SITE,
        ShareSite(side="export", api="_share_cuda_", device="cuda", site="send (a.py:3)").encode(),
    )
    ev.append(parse_event(2, EventKind.SHARE_HOLDER, ShareHolder(side="export").encode()))
    (f,) = _findings(c, ev)
    assert "torch's CUDA IPC cache: no torch.cuda.ipc_collect() since 96 exports" in f.title
    assert "ipc_collect" in f.next_step


def test_reopened_handles_are_named_on_the_engine() -> None:
    c = _counters([0.0] * 12, "import")
    c[share_counter("reopens")] = (np.array([1]), np.array([96.0]))
    found = _findings(c, _events("import"), label="rank 2")
    assert [f.kind for f in found] == ["shared_handle_reopened"]
    assert "opened twice, closed once" in found[0].title


def test_a_process_that_shared_nothing_has_no_sharing() -> None:
    assert sharing_of({}, []) is None


def test_an_engine_steps_at_the_updates_it_opened() -> None:
    c = _counters([0.0] * 6, "import")
    t = c[share_counter("update_imports")][0]
    c[share_counter("update_import_span_us")] = (t, np.full(len(t), 20_000.0))
    c[share_counter("update_import_us")] = (t, np.full(len(t), 5_000.0))
    specs = engine_step_specs(sharing_of(c, _events("import")))
    # update 0 is the initial push: 6 updates, 5 steps, each ending at its update's last open
    assert [s[0] for s in specs] == [0, 1, 2, 3, 4]
    assert [s[2] for s in specs] == [int(x) for x in t[1:]]
    assert all(s[3] == pytest.approx(0.02) for s in specs)
    assert specs[0][1] == int(t[0])
    # a trainer (it sends) gets none
    assert engine_step_specs(sharing_of(_counters([0.0] * 6), _events())) == []


def test_sharing_names_the_worlds() -> None:
    metas = [
        {"pid": 1, "rank": 0, "world": {"size": 1, "store": "127.0.0.1:1"}},
        {"pid": 2, "rank": 0, "world": {"size": 1, "store": "127.0.0.1:2"}},
    ]
    worlds, idx = find_worlds(metas, ["engine", "trainer"])
    roles = {w.pids[0]: w.role for w in worlds}
    assert roles == {1: "inference engine", 2: "trainer"}, worlds
    assert any("opens weight buckets" in e for w in worlds for e in w.evidence)
    # a process that opens what no recorded process sent (a DataLoader's batches from workers
    # wsprof does not record) is no engine
    worlds, _ = find_worlds(metas, ["engine", None])
    assert not any("weight buckets" in e for w in worlds for e in w.evidence), worlds


def test_an_update_cut_in_two_by_a_pause_is_one_update() -> None:
    c = _counters([0.0] * 8)
    t, n = c[share_counter("update_exports")]
    b = c[share_counter("update_exported_bytes")][1].copy()
    n = n.copy()
    # the 4th update was cut after 3 of its 8 buckets: two rows of 3 and 5
    n[3], b[3] = 3.0, UPDATE * 3 / 8
    t2 = np.insert(t, 4, t[3] + 50_000_000)
    n2 = np.insert(n, 4, 5.0)
    b2 = np.insert(b, 4, UPDATE * 5 / 8)
    c[share_counter("update_exports")] = (t2, n2)
    c[share_counter("update_exported_bytes")] = (t2, b2)
    c[share_counter("kept_bytes")] = (t2, np.zeros(len(t2)))
    side = sharing_of(c, _events()).exports
    assert side is not None and len(side.count) == 8
    assert side.count[3] == 8.0 and side.nbytes[3] == pytest.approx(UPDATE)


def test_the_counters_kept_buckets_raise_join_their_diagnosis() -> None:
    from dataclasses import replace

    from wsprof.analysis.chains import diagnose
    from wsprof.analysis.model import Finding, Severity
    from wsprof.analysis.rules.counters import CounterGrowthEvidence

    path = "UpdateWeightFromTensor.long_lived_tensors[0]['flattened_tensor']"
    kept = [UPDATE * (i + 1) for i in range(12)]
    sh = sharing_of(_counters(kept), _events(path=path))
    pa = rule_kit.process(label="trainer rank 0", sharing=sh)
    f = rule_kit.facts(processes=[pa])
    (k,) = SharedBucketsKept().match(f)
    shm = Finding(
        "memory_growth",
        Severity.WARNING,
        "proc.rss_shmem_bytes grows +5.5 MiB/step",
        CounterGrowthEvidence(
            counter="proc.rss_shmem_bytes",
            slope_per_step=UPDATE,
            first=UPDATE,
            last=12 * UPDATE,
            kind="bytes",
        ),
        "proc.rss_shmem_bytes",
        "find who allocates it",
    )
    other = replace(
        shm,
        title="cuda0.segment.all.current grows",
        evidence=replace(shm.evidence, counter="cuda0.segment.all.current"),
    )
    found = [replace(k, id="F1"), replace(shm, id="F2"), replace(other, id="F3")]
    ds = diagnose(found, f)
    # the shared memory the buckets hold is their why; an allocator's segments are not
    assert [d.cause for d in ds] == ["shared_buckets", "finding"], [d.title for d in ds]
    assert ds[0].finding_ids == ("F1", "F2")
    assert ds[0].where is not None and path in ds[0].where.text
    assert [w.text for w in ds[0].why] == [shm.title]


def test_a_hostile_trace_s_sharing_counters_read_as_nothing_wrong() -> None:
    # NaN, infinities and absurd values in a corrupt or crafted trace: read as 0, no error
    c = _counters([float("nan"), float("inf"), 1e300, -1e300, 0.0])
    c[share_counter("reopens")] = (np.array([1]), np.array([float("nan")]))
    c[share_counter("update_export_span_us")] = (
        c[share_counter("update_exports")][0],
        np.array([float("inf"), float("nan"), 1e300, 5.0, 5.0]),
    )
    sh = sharing_of(c, _events())
    assert sh is not None and sh.exports is not None and sh.reopens == 0
    assert all(np.isfinite(sh.exports.kept_bytes)) and all(np.isfinite(sh.exports.span_s))
    assert _findings(c, _events()) == []
