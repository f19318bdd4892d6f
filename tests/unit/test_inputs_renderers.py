"""The one input layer (``wsprof.inputs``), the renderer registries the CLI reads, the
headline computed once, the JSON ``schema_version`` and the import layers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from unit.test_diff import write_run

from wsprof import inputs
from wsprof.analysis.diff import StepRangeError, diff_loaded, diff_paths, measure
from wsprof.analysis.run import analyze, analyze_loaded_run
from wsprof.cli import cli, main
from wsprof.errors import InputError
from wsprof.inputs import LoadedLog, LoadedRun, LoadedSeries, load
from wsprof.report import diff_json, jsonout
from wsprof.report.renderers import (
    ANALYZE_RENDERERS,
    DIFF_RENDERERS,
    EXPORTERS,
    REPORT_RENDERERS,
    FolderExporter,
)

REPO = Path(__file__).resolve().parents[2]
VERL_LINE = "step:{i} - timing_s/gen:{g} - timing_s/update_weights:{s} - timing_s/step:{t}\n"


def _run(tmp_path: Path, name: str = "run", ranks: int = 2) -> Path:
    folder = tmp_path / name
    for r in range(ranks):
        write_run(
            folder / f"h-{100 + r}.wsprof", range(6), lambda s: 2.0 + s, 1.0, rank=r, pid=100 + r
        )
    return folder


def _log(tmp_path: Path) -> Path:
    p = tmp_path / "train.log"
    p.write_text(
        "".join(VERL_LINE.format(i=i, g=60 + i, s=10 + 5 * i, t=100 + 6 * i) for i in range(1, 8))
    )
    return p


# --------------------------------------------------------------------------- inputs


def test_load_tells_runs_series_and_logs_apart(tmp_path: Path) -> None:
    run = _run(tmp_path)
    csv = tmp_path / "m.csv"
    csv.write_text("step,weight_sync_s\n0,1\n1,2\n2,3\n")
    loaded = load(str(run))
    assert isinstance(loaded, LoadedRun) and len(loaded.trace_paths) == 2
    one = load(str(run / "h-100.wsprof"))
    assert isinstance(one, LoadedRun) and one.trace_paths == (str(run / "h-100.wsprof"),)
    series = load(str(csv))
    assert isinstance(series, LoadedSeries) and series.imported.series
    log = load(str(_log(tmp_path)))
    assert isinstance(log, LoadedLog) and log.imported.format == "verl"


@pytest.mark.parametrize(
    "make",
    [
        lambda d: d / "missing",
        lambda d: d,  # a folder with no trace
        lambda d: (d / "x.csv").write_text("a,b\n1,2\n") and d / "x.csv",
        lambda d: (d / "x.log").write_text("nothing here\n") and d / "x.log",
    ],
    ids=["missing", "empty-folder", "csv-no-step", "log-no-step"],
)
def test_load_errors_are_one_line_without_options(tmp_path: Path, make: object) -> None:
    with pytest.raises(InputError) as e:
        load(str(make(tmp_path)))  # type: ignore[operator]
    text = str(e.value)
    assert "\n" not in text and " --" not in text


def test_a_run_is_read_lazily_and_unreadable_traces_become_problems(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / "h-999.wsprof").write_bytes(b"not sqlite at all")
    loaded = load(str(run))
    assert isinstance(loaded, LoadedRun) and loaded.problems == []  # nothing read yet
    a = analyze(loaded)
    assert any("h-999" in p for p in loaded.problems)
    assert any("h-999" in n for n in a.notes)


def test_a_run_with_no_readable_trace_says_so(tmp_path: Path) -> None:
    (tmp_path / "a.wsprof").write_bytes(b"junk")
    (tmp_path / "b.wsprof").write_bytes(b"junk")
    with pytest.raises(InputError, match="none of its 2 traces could be read"):
        analyze(load(str(tmp_path)))


def test_diff_reads_every_trace_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trace is read once to be digested; the primary's alone is read a second time, for
    its calls (a digest holds none)."""
    before, after = _run(tmp_path, "before"), _run(tmp_path, "after")
    reads: list[str] = []
    real = inputs.read_trace

    def counting(path: str):  # type: ignore[no-untyped-def]
        reads.append(path)
        return real(path)

    monkeypatch.setattr(inputs, "read_trace", counting)
    r = diff_loaded(load(str(before)), load(str(after)))
    primaries = [str(p) for p in [*before.iterdir(), *after.iterdir()] if p.name == "h-100.wsprof"]
    assert len(primaries) == 2, primaries
    assert sorted(reads) == sorted(
        [*(str(p) for p in [*before.iterdir(), *after.iterdir()]), *primaries]
    )
    assert r.before.process == "rank 0" and r.before.n_calls > 0
    assert r.before.describe().startswith("rank 0 of ")


def test_primary_trace_keeps_its_calls(tmp_path: Path) -> None:
    res = analyze_loaded_run(load(str(_run(tmp_path))))  # type: ignore[arg-type]
    assert res.primary_trace is not None and res.primary_trace.rank == 0
    assert len(res.primary_trace.calls) == res.analysis.primary.calls.n_total  # type: ignore


def test_step_range_errors_name_the_side_not_the_option(tmp_path: Path) -> None:
    run = load(str(_run(tmp_path)))
    with pytest.raises(StepRangeError) as e:
        measure(run, (50, 60), "after")
    assert "--" not in str(e.value) and "after steps 50:60 selects none" in str(e.value)
    assert str(e.value.with_option("--after-steps")).startswith(
        f"AFTER {tmp_path / 'run'}: --after-steps 50:60 selects none of rank 0's steps"
    )


def test_diff_of_a_log_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="training log") as e:
        diff_paths(str(_log(tmp_path)), str(_log(tmp_path)))
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- renderers


def _choices(command: str) -> list[str]:
    cmd = cli.commands[command]
    opt = next(p for p in cmd.params if p.name == "fmt")
    assert isinstance(opt.type, click.Choice)
    return list(opt.type.choices)


def test_cli_format_choices_come_from_the_registries() -> None:
    assert _choices("analyze") == list(ANALYZE_RENDERERS) == ["text", "json"]
    assert _choices("diff") == list(DIFF_RENDERERS) == ["text", "json", "html"]
    assert _choices("export") == list(EXPORTERS) == ["perfetto", "speedscope", "csv", "tensorboard"]
    assert list(REPORT_RENDERERS) == ["html"]
    for reg in (ANALYZE_RENDERERS, DIFF_RENDERERS, REPORT_RENDERERS, EXPORTERS):
        for name, r in reg.items():
            # a folder exporter (TensorBoard: one run per rank) writes no file suffix
            folder = isinstance(r, FolderExporter)
            assert r.name == name and r.description
            assert r.suffix == "" if folder else r.suffix.startswith(".")


def test_every_analysis_renderer_renders(tmp_path: Path) -> None:
    a = analyze(load(str(_run(tmp_path))))
    text = ANALYZE_RENDERERS["text"].render(a, colour=False, max_findings=3)
    assert text.startswith("wsprof: ")
    doc = json.loads(ANALYZE_RENDERERS["json"].render(a))
    assert doc["source"] == a.source
    assert "<html" in REPORT_RENDERERS["html"].render(a)


# --------------------------------------------------------------------------- headline, schema


def test_json_has_the_schema_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path)
    assert main(["analyze", str(run), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == jsonout.SCHEMA_VERSION == 2
    assert list(doc)[0] == "schema_version"
    assert main(["diff", str(run), str(run), "--format", "json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["schema_version"] == diff_json.SCHEMA_VERSION == diff["version"]


def test_headline_is_computed_once_and_read_everywhere(tmp_path: Path) -> None:
    a = analyze(load(str(_run(tmp_path))))
    h = a.headline
    assert h is not None and h.process == "rank 0" and h.n_steps == 6
    finding = next(f for f in a.findings if f.kind == "rollout_share")
    assert finding.evidence.as_dict()["median_rollout_share"] == h.rollout_share_median
    assert finding.evidence.as_dict()["median_weight_sync_s"] == h.own_sync_median_s
    assert finding.evidence.as_dict()["median_step_s"] == h.step_median_s
    doc = jsonout.to_dict(a)
    assert doc["headline"]["rollout_share_median"] == h.rollout_share_median
    assert doc["headline"]["weight_sync_median_s"] == h.weight_sync_median_s
    html = REPORT_RENDERERS["html"].render(a)
    assert f"{h.rollout_share_median:.0%}" in html


def test_series_headline_comes_from_its_columns(tmp_path: Path) -> None:
    a = analyze(load(str(_log(tmp_path))))
    assert a.headline is not None and a.headline.process is None
    assert a.headline.weight_sync_median_s == 30.0  # timing_s/update_weights 15..45 s
    assert a.headline.source == f"the per-step series of {tmp_path / 'train.log'}"


# --------------------------------------------------------------------------- import layers


def test_import_layers_hold() -> None:
    """Every contract of ``[tool.importlinter]`` holds (import-linter is a test dependency)."""
    exe = str(Path(sys.executable).with_name("lint-imports"))
    res = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:]
