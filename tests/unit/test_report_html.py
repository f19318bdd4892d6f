"""The HTML report: sections, escaping of hostile names, self-containment, size."""

from __future__ import annotations

import dataclasses
import gc
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from tests.report_fixtures import call_points, make_run_analysis, make_series_analysis
from wsprof.analysis.model import Analysis, CallPoints, CounterTrack, SeriesResult
from wsprof.report import figures
from wsprof.report.html import (
    SECTIONS,
    counter_steps,
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    render_html,
    shown_counters,
    step_table,
    write_html,
)

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "{{7*7}}",
)
PAYLOAD = "".join(HOSTILE) + r" $\frac{1}{0}$ ${x}"


class _Tags(HTMLParser):
    """Every start tag with its attributes, and section ids."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.data: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.data.append(data)


def _parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    p.close()
    return p


def _section_ids(html: str) -> list[str]:
    return [dict(attrs).get("id") or "" for tag, attrs in _parse(html).tags if tag == "section"]


def _assert_self_contained(html: str) -> None:
    tags = _parse(html).tags
    for tag, attrs in tags:
        assert tag not in ("script", "iframe", "object", "embed", "link", "img", "base"), tag
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
                v = (value or "").strip().lower()
                assert not v.startswith(("http:", "https:", "//", "ftp:", "javascript:")), (
                    tag,
                    name,
                    v[:80],
                )
                assert v.startswith(("#", "data:image/png;base64,")), (tag, name, v[:80])
    lowered = html.lower()
    assert "@import" not in lowered
    # Only local references (SVG clip paths) in url(...).
    assert not re.search(r"""url\(\s*(?!['"]?#)""", lowered)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", lowered)


@pytest.fixture(scope="module")
def run_html() -> str:
    return render_html(make_run_analysis())


@pytest.fixture(scope="module")
def hostile_html() -> str:
    return render_html(make_run_analysis(payload=PAYLOAD))


def test_run_report_has_every_section_in_order(run_html: str) -> None:
    assert _section_ids(run_html) == list(SECTIONS)
    assert run_html.count("How to read this:") == len(SECTIONS)
    assert run_html.lstrip().startswith("<!DOCTYPE html>")


def test_verdict_comes_first_with_findings(run_html: str) -> None:
    verdict = run_html.index('id="verdict"')
    assert verdict < run_html.index('id="two-numbers"')
    title = "Weight sync grows 0.44 s per step"
    assert verdict < run_html.index(title) < run_html.index('id="two-numbers"')
    for text in ("accumulating_slowdown", "critical", "fsdp_vllm.py:160", "slope_s_per_step"):
        assert text in run_html
    # Most severe first.
    assert run_html.index('class="finding critical"') < run_html.index('class="finding warning"')
    assert run_html.index('class="finding warning"') < run_html.index('class="finding info"')


def test_run_report_content(run_html: str) -> None:
    # Two numbers: median rollout share and weight sync of rank 0.
    assert "53%" in run_html
    assert "2.4 s" in run_html
    # Figures: weight sync growth, stacked bars, per-op, between layers, counters, hot frames.
    assert run_html.count("<svg") >= 6
    assert 'aria-label="weight_sync_s per step with fitted superlinear curve"' in run_html
    assert 'aria-label="stacked time per step' in run_html
    assert 'aria-label="per-call collective latency over call index"' in run_html
    assert 'aria-label="time between layers per call over call index"' in run_html
    assert 'aria-label="counter cuda.segment.all.current"' in run_html
    assert 'aria-label="hottest leaf frames by share of samples"' in run_html
    # Tables: ops, series verdicts, steps, metadata.
    for text in ("all_gather_into_tensor", "torch.distributed._all_gather_base", "superlinear"):
        assert text in run_html
    assert "12.8 s at step 15" in run_html  # projection of weight_sync_s
    assert "expandable_segments:True" in run_html
    assert "rank 2: 3 calls after the last step" in run_html
    # The empty counter gets no figure.
    assert 'aria-label="counter empty_counter"' not in run_html
    _assert_self_contained(run_html)


def test_series_report_renders_without_processes() -> None:
    html = render_html(make_series_analysis())
    assert _section_ids(html) == list(SECTIONS)
    assert "Not applicable: this report was built from a series" in html
    assert "No py-spy samples" in html
    assert 'aria-label="weight_sync_s per step with fitted exponential curve"' in html
    assert "61%" in html  # median of the rollout_share series
    assert "gen_tokens_per_s" in html
    _assert_self_contained(html)


def test_empty_analysis_renders() -> None:
    html = render_html(Analysis(source="empty", kind="run", processes=(), series=(), findings=()))
    assert _section_ids(html) == list(SECTIONS)
    assert "No findings" in html
    _assert_self_contained(html)


def test_process_without_data_renders() -> None:
    a = make_run_analysis(n_processes=1)
    p = dataclasses.replace(
        a.processes[0],
        steps=(),
        ops=(),
        calls=CallPoints((), (), (), (), (), 0),
        counters=(CounterTrack("x", (), ()),),
        hot_frames=(),
        hot_stacks=(),
        n_samples=0,
        meta={},
    )
    html = render_html(dataclasses.replace(a, processes=(p,), series=(), findings=()))
    assert _section_ids(html) == list(SECTIONS)
    assert "No collective calls recorded" in html
    assert "No counters were recorded" in html
    assert "No py-spy samples" in html


def test_hostile_names_are_escaped(hostile_html: str) -> None:
    parsed = _parse(hostile_html)
    _assert_self_contained(hostile_html)
    assert not [t for t, _ in parsed.tags if t == "script"]
    assert not [t for t, _ in parsed.tags if t == "img"]
    # The payload is shown as text, escaped in the source.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile_html
    assert "&lt;img src=x onerror=alert(1)&gt;" in hostile_html
    assert "<script>" not in hostile_html
    assert "<img" not in hostile_html
    # Jinja never evaluates data.
    assert "{{7*7}}" in hostile_html
    text = "".join(parsed.data)
    for piece in HOSTILE:
        assert piece in text
    # In findings, op/frame names, paths, metadata keys and values, series, notes and figures.
    assert text.count("<script>alert(1)</script>") >= 15


def test_hostile_text_inside_figures(hostile_html: str) -> None:
    # Op names reach the legend, frame names the bar labels, counter names the axis labels.
    svgs = "".join(re.findall(r"<svg\b.*?</svg>", hostile_html, flags=re.DOTALL))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svgs
    assert "<script" not in svgs


def test_no_network_references_in_svg(run_html: str) -> None:
    assert "<!DOCTYPE svg" not in run_html
    assert "<?xml" not in run_html
    assert "w3.org/Graphics" not in run_html


def test_report_size_with_100k_points(tmp_path: Path) -> None:
    a = make_run_analysis(n_processes=1)
    big = call_points(n_per_step=12_500, n_steps=8)  # 100k points
    assert len(big.index) == 100_000
    p = dataclasses.replace(a.processes[0], calls=big)
    path = write_html(dataclasses.replace(a, processes=(p,)), tmp_path / "big.html")
    size = Path(path).stat().st_size
    assert size < 5 * 1024 * 1024, size


def test_write_html_creates_parent_dirs(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "report.html"
    path = write_html(make_series_analysis(), out)
    assert path == str(out)
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_figures_are_freed() -> None:
    a = make_run_analysis(n_processes=1)
    render_html(a)
    gc.collect()
    before = sum(isinstance(o, Figure) for o in gc.get_objects())
    render_html(a)
    gc.collect()
    after = sum(isinstance(o, Figure) for o in gc.get_objects())
    assert after <= before


def test_rendering_leaves_matplotlib_global_state_alone() -> None:
    import sys

    import matplotlib

    backend = matplotlib.get_backend()
    rc = dict(matplotlib.rcParams)
    render_html(make_run_analysis(n_processes=1))
    assert matplotlib.get_backend() == backend
    assert dict(matplotlib.rcParams) == rc
    assert "matplotlib.pyplot" not in sys.modules or backend == matplotlib.get_backend()


def test_cap_indices_keeps_the_slowest() -> None:
    import numpy as np

    values = np.arange(100_000, dtype=np.float64)
    values[12_345] = 1e12
    idx = figures.cap_indices(values, cap=1000)
    assert len(idx) <= 1000
    assert 12_345 in idx
    assert list(idx) == sorted(idx)


def test_counters_pair_with_latency_from_counter_series() -> None:
    a = make_run_analysis()
    per_step = counter_steps(a)
    assert set(per_step) == {"cuda.segment.all.current", "rss_bytes"}
    assert per_step["cuda.segment.all.current"][0] == 52.0
    p = a.processes[0]
    pairs = figures.counter_latency_pairs(p.steps, per_step["cuda.segment.all.current"])
    assert [s for s, _, _ in pairs] == [r.step for r in p.steps]
    r0 = p.steps[0]
    assert pairs[0][2] == pytest.approx(r0.collective_s / r0.n_calls * 1e6)


def test_counter_without_per_step_values_is_drawn_over_time() -> None:
    p = make_run_analysis(n_processes=1).processes[0]
    assert figures.counter_latency_pairs(p.steps, None) == []
    svg = figures.counter_figure(p.counters[0], p.steps, None)
    assert svg is not None and "per step: counter vs latency" not in svg
    svg = figures.counter_figure(p.counters[0], p.steps, {r.step: 1.0 for r in p.steps})
    assert svg is not None and "per step: counter vs latency" in svg


def test_only_the_primary_process_gets_counter_scatter(run_html: str) -> None:
    counters = run_html[run_html.index('id="counters"') : run_html.index('id="stacks"')]
    # rank 0 has per-step counter series; ranks 1 and 2 draw only counters a finding names
    # (none here), and say how many more their traces hold.
    assert counters.count("per step: counter vs latency") == 2
    assert "over time only" not in counters
    for rank in ("rank 1", "rank 2"):
        block = counters[counters.index(f"<summary>{rank}") :]
        summary = block[: block.index("</summary>")]
        assert "0 counter(s) · 3 more in the trace" in summary, summary


def test_growth_figure_without_fit_or_projection() -> None:
    r = make_series_analysis().series[1]
    bare = SeriesResult(
        r.series, dataclasses.replace(r.verdict, fitted=(), projection=None, change_point=3)
    )
    assert figures.growth_figure(bare) is not None
    empty = SeriesResult(
        dataclasses.replace(r.series, steps=(), values=()),
        dataclasses.replace(r.verdict, fitted=()),
    )
    assert figures.growth_figure(empty) is None


def test_formatters() -> None:
    assert fmt_duration(None) == "—"
    assert fmt_duration(0.0) == "0 s"
    assert fmt_duration(12e-6) == "12 µs"
    assert fmt_duration(0.0456) == "45.6 ms"
    assert fmt_duration(2.5) == "2.5 s"
    assert fmt_pct(0.534) == "53%"
    assert fmt_pct(0.05) == "5.0%"
    assert fmt_bytes(3 * 2**30) == "3 GiB"
    assert fmt_bytes(512) == "512 B"


def test_step_table_folds_long_runs() -> None:
    steps = make_run_analysis(n_processes=1).processes[0].steps
    assert step_table(steps).gap_after is None
    long = tuple(dataclasses.replace(steps[0], step=i) for i in range(100))
    t = step_table(long, max_rows=20)
    assert len(t.rows) == 20 and t.gap_after == 10 and t.n_total == 100
    assert [r.step for r in t.rows][9:11] == [9, 90]


def test_a_process_with_dozens_of_counters_draws_the_named_ones_first() -> None:
    """What patch() records (allocator, NVML, psutil, gc, wsprof's own probe costs): a
    finding's counter first, then gauges; never wsprof's own or cumulative counts; at most 8."""
    p = make_run_analysis().processes[0]
    names = (
        [f"wsprof.probe_us.p{i}" for i in range(5)]
        + ["cuda0.num_device_alloc"]
        + [f"gc.type.mod.T{i}" for i in range(20)]
        + ["cuda0.mappings"]
    )
    tracks = tuple(CounterTrack(n, (0.0, 1.0), (1.0, 2.0)) for n in names)
    p = dataclasses.replace(p, counters=tracks)
    shown = [c.name for c in shown_counters(p, named=["cuda0.mappings"])]
    assert shown[0] == "cuda0.mappings" and len(shown) == 8
    assert not any(n.startswith("wsprof.") or n.endswith("num_device_alloc") for n in shown)
    assert [c.name for c in shown_counters(p, ["cuda0.mappings"], only_named=True)] == [
        "cuda0.mappings"
    ]


def _section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}"')
    return html[start : html.index("</section>", start)]


def test_wrapper_audit_lists_every_wrapper_and_its_time(run_html: str) -> None:
    table = _section(run_html, "wrappers")
    assert table.count("<tr><td><code>dist.") == 2
    assert "_all_gather_wrapper" in table and "/verl/workers/fsdp_workers.py:412" in table
    assert "2.4 s" in table and "no calls" in table and "after patch()" in table


def test_ranks_heatmap_names_every_rank(run_html: str) -> None:
    ranks = _section(run_html, "ranks")
    assert 'aria-label="weight-sync time per rank and step"' in ranks
    for r in range(3):
        assert f"rank {r}" in ranks


def test_ranks_heatmap_marks_the_outlier_rank_red() -> None:
    a = make_run_analysis()
    rank1 = a.ranks[1]
    outlier = dataclasses.replace(
        a.findings[0], kind="outlier_rank", evidence={"label": rank1.label}
    )
    html = render_html(dataclasses.replace(a, findings=(*a.findings, outlier)))
    plain_html = render_html(a)
    red = figures._C_GAINED
    assert red in _section(html, "ranks") and red not in _section(plain_html, "ranks")


def test_flame_charts_early_and_late(run_html: str) -> None:
    stacks = _section(run_html, "stacks")
    assert stacks.count('aria-label="Early: ') == 3 and stacks.count('aria-label="Late: ') == 3


def test_hostile_names_in_wrappers_are_escaped(hostile_html: str) -> None:
    table = _section(hostile_html, "wrappers")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in table and "<script" not in table


def test_growth_figure_draws_a_band_around_the_fit() -> None:
    r = make_series_analysis().series[0]
    noisy = dataclasses.replace(
        r.series, values=tuple(v * (1.05 if i % 2 else 0.95) for i, v in enumerate(r.series.values))
    )
    svg = figures.growth_figure(SeriesResult(noisy, r.verdict))
    assert svg is not None and "band: fit ± 2σ" in svg
    exact = figures.growth_figure(
        SeriesResult(dataclasses.replace(r.series, values=r.verdict.fitted), r.verdict)
    )
    assert exact is not None and "band: fit" not in exact  # no residuals, no band


def test_per_site_latency_figure(run_html: str) -> None:
    ops = _section(run_html, "ops")
    assert 'aria-label="per-call collective latency by caller site over call index"' in ops
    assert "sync_weights (fsdp_workers.py:161)" in ops
    assert figures.site_latency_figure(call_points()) is not None
    no_sites = dataclasses.replace(call_points(), site=())
    assert figures.site_latency_figure(no_sites) is None


def test_a_large_run_draws_figures_for_the_first_ranks_and_the_named_ones() -> None:
    a = make_run_analysis(n_processes=7)
    named = dataclasses.replace(
        a.findings[0],
        kind="outlier_rank",
        title="rank 6: grows",
        evidence={"label": "rank 6", "rank": 6},
    )
    html = render_html(dataclasses.replace(a, findings=(*a.findings, named)))
    ops = _section(html, "ops")
    assert ops.count('aria-label="per-call collective latency over call index"') == 5  # 0-3, 6
    assert ops.count("Figures are drawn for the first ranks") == 2  # ranks 4 and 5
