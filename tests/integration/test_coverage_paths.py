"""Coverage of the capture layer on every collective path of RL weight sync (real gloo jobs).

``scripts/coverage_table.py`` runs ``tests/targets/coverage_paths.py`` once bare and once under
``wsprof.patch()`` (world 2; ``dtensor_2d`` world 4), with ``torch.profiler`` on in both; the
profiler's top-level ``c10d::`` op events (gloo's ``gloo:`` events for a ``Backend`` object
called directly) are the ground truth of the collectives issued. Per path, wsprof must:

* change nothing: results bit-identical, exceptions identical (type and message), the same
  collectives issued;
* record the collectives: its calls in each step window cover >= 95 % of the ground truth, per
  op kind too, with no collective recorded twice; a call covers ``max(n_backend, 1)``
  collectives (one logical call may issue several: ``dist._broadcast_coalesced``'s buckets);
  a coalescing block is one call with the bytes of its whole payload.

One measurement (4 jobs, about 35 s on 2 cores) serves every test of the module.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import REPO


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "coverage_table", REPO / "scripts" / "coverage_table.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


COV = _script()
PATHS = list(COV.PATHS)
#: Table rows judged for coverage: every path that issues a collective, and the variants.
COVERED = [
    n
    for n in [*COV.PATHS, *COV.VARIANTS]
    if COV.VARIANTS.get(n, (n, 0))[0] not in COV.NO_COLLECTIVE
]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    measured, _jobs, _wall = COV.measure(Path(tmp_path_factory.mktemp("coverage")))
    return {r.name: r for r in measured}


def _ranks(rows: dict[str, Any], name: str) -> list[Any]:
    row = rows[name]
    assert row.problem is None, row.problem
    assert len(row.ranks) == row.world
    for r in row.ranks:
        # The harness itself: the bare run ran every step and produced results.
        steps, n_results = r.steps, r.n_results
        assert steps >= 1 and n_results > 0, f"rank {r.rank}: the bare run produced nothing"
    return list(row.ranks)


@pytest.mark.parametrize("name", PATHS)
def test_results_bit_identical(rows: dict[str, Any], name: str) -> None:
    for r in _ranks(rows, name):
        same = r.results_same
        assert same, f"rank {r.rank}: results differ with wsprof (sha256 of every result)"


@pytest.mark.parametrize("name", PATHS)
def test_exceptions_identical(rows: dict[str, Any], name: str) -> None:
    for r in _ranks(rows, name):
        if name == "pg_subclass":  # the harness: a ProcessGroup with no backend raises bare
            assert r.exc_bare is not None and r.exc_bare[0] == "RuntimeError", r.exc_bare
        else:
            assert r.exc_bare is None, f"rank {r.rank}: path fails bare: {r.exc_bare}"
        bare, ws, same_steps = r.exc_bare, r.exc_wsprof, r.errors_same
        assert ws == bare, f"rank {r.rank}: bare raised {bare}, with wsprof {ws}"
        assert same_steps, f"rank {r.rank}: per-step exceptions differ with wsprof"


@pytest.mark.parametrize("name", PATHS)
def test_same_collectives_issued(rows: dict[str, Any], name: str) -> None:
    for r in _ranks(rows, name):
        c10d_bare, c10d_ws, gloo_bare, gloo_ws = (
            r.c10d_bare,
            r.c10d_wsprof,
            r.gloo_bare,
            r.gloo_wsprof,
        )
        assert c10d_ws == c10d_bare, (
            f"rank {r.rank}: c10d ops per step bare {c10d_bare} vs wsprof {c10d_ws}"
        )
        assert gloo_ws == gloo_bare, (
            f"rank {r.rank}: gloo work per step bare {gloo_bare} vs wsprof {gloo_ws}"
        )


@pytest.mark.parametrize("name", COVERED)
def test_recorded_calls_cover_ground_truth(rows: dict[str, Any], name: str) -> None:
    for r in _ranks(rows, name):
        recorded, truth, short = r.covered, r.truth, r.missing_kinds
        assert truth > 0, f"rank {r.rank}: the profiler saw no collective (harness broken)"
        assert recorded >= COV.needed(truth), (
            f"rank {r.rank}: wsprof's calls cover {recorded} of {truth} collectives "
            f"({recorded / truth:.0%}; truth {dict(r.truth_bare)}, covered "
            f"{dict(r.covered_ops)} in {r.rows} calls)"
        )
        assert not short, (
            f"rank {r.rank}: op kinds under-recorded (recorded, truth): {short}; "
            f"covered {dict(r.covered_ops)}"
        )


@pytest.mark.parametrize("name", COVERED)
def test_no_collective_recorded_twice(rows: dict[str, Any], name: str) -> None:
    for r in _ranks(rows, name):
        recorded, truth = r.covered, r.truth
        most = math.floor(truth / COV.MIN_COVERAGE + 1e-9)
        assert recorded <= most, (
            f"rank {r.rank}: {r.rows} calls recorded covering {recorded} collectives, "
            f"{truth} issued (calls {dict(r.recorded_ops)}, truth {dict(r.truth_bare)}; "
            f"recorded by {dict(r.recorded_by)})"
        )


def test_coalescing_block_is_one_call_with_its_payload(rows: dict[str, Any]) -> None:
    for r in _ranks(rows, "coalescing_by_name"):
        blocks = r.steps * r.expect["blocks_per_step"]
        recorded, payload, row_bytes = r.rows, r.expect["coalesced_bytes"], r.row_bytes
        assert recorded == blocks, (
            f"rank {r.rank}: {recorded} calls for {blocks} coalescing blocks "
            f"(recorded {dict(r.recorded_ops)}, bytes {row_bytes})"
        )
        assert row_bytes == [payload] * blocks, (
            f"rank {r.rank}: bytes {row_bytes}, the block's payload is {payload}"
        )
