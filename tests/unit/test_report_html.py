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
from wsprof.analysis.evidence import FreeEvidence
from wsprof.analysis.headline import headline
from wsprof.analysis.model import (
    Analysis,
    CallPoints,
    CounterTrack,
    Diagnosis,
    Finding,
    FrameShift,
    Link,
    SeriesResult,
    Verdict,
    WindowShift,
    WindowSummary,
)
from wsprof.report import figures
from wsprof.report.html import (
    SECTIONS,
    counter_steps,
    finding_rows,
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


CULPRIT_FRAME = "_record_tensor_meta (verl/utils/tensor_registry.py)"


def with_diagnoses(a: Analysis, payload: str = "") -> Analysis:
    """``a`` as analysis leaves it: finding ids, and two diagnoses grouping its findings (a
    wrapper with every link, given second; a slowdown nothing explains, with missing links)."""
    findings = tuple(dataclasses.replace(f, id=f"F{i + 1}") for i, f in enumerate(a.findings))
    p0 = a.processes[0]
    windows = tuple(
        WindowSummary(
            t_start_ns=i,
            t_end_ns=i + 1,
            n_samples=100,
            n_active=90,
            top_frame=None,
            common_frame=None,
            phase_shares={},
            rollout_share=0.1,
            weight_sync_share=0.1 + 0.15 * i,
        )
        for i in range(6)
    )
    shift = WindowShift(
        k=2,
        n_windows=6,
        early_total=180,
        late_total=180,
        gained=(FrameShift(CULPRIT_FRAME, 0.13, 0.71, 23, 128),),
        lost=(),
    )
    p0 = dataclasses.replace(p0, windows=windows, shift=shift)
    wrapper = Diagnosis(
        id="D1",
        cause="wrapper",
        severity="critical",
        confidence=0.9,
        title=f"a wrapper on the collective names makes every call slower{payload}",
        symptom=Link(
            "symptom",
            f"weight-sync time grows (superlinear): 800 ms -> 4.7 s over 8 steps{payload}",
            ("F1",),
            (
                ("first step (0)", "800 ms"),
                ("slope (Theil-Sen)", "+440 ms/step"),
                (payload, payload),
            ),
        ),
        where=Link(
            "where",
            f"_all_gather_wrapper{payload} (fsdp_workers.py:412) sits on dist.all_gather",
            ("F2",),
            (("between layers per step", "120 ms -> 1.01 s"), ("share of the growth", "62%")),
        ),
        why=(
            Link(
                "why",
                f"{CULPRIT_FRAME}: 13% of the samples in the first 2 windows -> 71% in the last 2",
                ("F2",),
                (("share of samples, late", "71% (128)"),),
            ),
            Link(
                "why",
                f"cuda.segment.all.current{payload} grows +12/step",
                ("F3",),
                (("counter growth", "+12/step"),),
            ),
        ),
        next_step=f"take _all_gather_wrapper off the per-call path{payload}",
        finding_ids=("F1", "F2", "F3"),
        symptom_series="weight_sync_s",
        culprit_frame=CULPRIT_FRAME,
        culprit_counter=f"cuda.segment.all.current{payload}",
        process=p0.label,
    )
    unexplained = Diagnosis(
        id="D2",
        cause="unexplained",
        severity="warning",
        confidence=0.29,
        title="step time grows and no recorded fact says where",
        symptom=Link("symptom", "step time grows (linear): +450 ms/step", ("F1",)),
        where=None,
        why=(),
        next_step="sample the slow phase with py-spy, then analyse again",
        missing=(
            "where: no wrapper, per-call or call-count growth explains it; record calls "
            "with wsprof.patch()",
            "why: no py-spy samples; run with --pyspy to see which frame gains share",
        ),
        finding_ids=("F1", "F4"),
        symptom_series="step_s",
        process=p0.label,
    )
    return dataclasses.replace(
        a,
        processes=(p0, *a.processes[1:]),
        findings=findings,
        diagnoses=(unexplained, wrapper),  # given out of order: the report sorts by severity
        verdict=Verdict("problems", 2, (), 3),
    )


@pytest.fixture(scope="module")
def run_html() -> str:
    return render_html(make_run_analysis())


@pytest.fixture(scope="module")
def diag_html() -> str:
    return render_html(with_diagnoses(make_run_analysis()))


@pytest.fixture(scope="module")
def hostile_html() -> str:
    return render_html(with_diagnoses(make_run_analysis(payload=PAYLOAD), PAYLOAD))


def test_run_report_has_every_section_in_order(run_html: str) -> None:
    assert _section_ids(run_html) == list(SECTIONS)
    assert run_html.count("How to read this:") == len(SECTIONS)
    assert run_html.lstrip().startswith("<!DOCTYPE html>")


def test_verdict_comes_first_with_findings(run_html: str) -> None:
    assert run_html.index('id="diagnoses"') < run_html.index('id="verdict"')
    verdict = run_html.index('id="verdict"')
    assert verdict < run_html.index('id="two-numbers"')
    title = "Weight sync grows 0.44 s per step"
    assert verdict < run_html.index(title) < run_html.index('id="two-numbers"')
    for text in ("accumulating_slowdown", "critical", "fsdp_vllm.py:160"):
        assert text in run_html
    # Evidence is a table with units, not the raw key and value.
    findings = _section(run_html, "verdict")
    assert '<th scope="row">slope per step</th><td>440 ms/step</td>' in findings
    assert "slope_s_per_step" not in findings and "0.44<" not in findings
    # Most severe first.
    assert run_html.index('class="finding critical"') < run_html.index('class="finding warning"')
    assert run_html.index('class="finding warning"') < run_html.index('class="finding info"')


def test_the_verdict_of_a_hand_made_analysis_counts_its_findings(run_html: str) -> None:
    # No diagnoses and the default verdict: judged from the findings, never "no problem".
    lead = _section(run_html, "diagnoses")
    assert "Verdict:" in lead and "no accumulating problem" not in lead
    assert "problems found" in lead or "problem found" in lead
    assert "No diagnosis grouped the findings" in lead


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
        a.findings[0], kind="outlier_rank", evidence=FreeEvidence({"label": rank1.label})
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
        evidence=FreeEvidence({"label": "rank 6", "rank": 6}),
    )
    html = render_html(dataclasses.replace(a, findings=(*a.findings, named)))
    ops = _section(html, "ops")
    assert ops.count('aria-label="per-call collective latency over call index"') == 5  # 0-3, 6
    assert ops.count("Figures are drawn for the first ranks") == 2  # ranks 4 and 5


# --------------------------------------------------------------------------- diagnoses


def _hrefs_and_ids(html: str) -> tuple[set[str], set[str]]:
    tags = _parse(html).tags
    hrefs = {str(dict(a)["href"])[1:] for t, a in tags if t == "a" and dict(a).get("href")}
    ids = {str(dict(a)["id"]) for _, a in tags if dict(a).get("id")}
    return hrefs, ids


def test_diagnoses_section_comes_first_and_is_in_sections(diag_html: str) -> None:
    assert SECTIONS[0] == "diagnoses" and "verdict" in SECTIONS
    assert _section_ids(diag_html) == list(SECTIONS)
    lead = _section(diag_html, "diagnoses")
    assert "Verdict:" in lead and "2 problems found" in lead
    assert "2 diagnoses from 3 findings at warning or above" in lead


def test_two_diagnoses_render_most_severe_first_with_their_chains(diag_html: str) -> None:
    lead = _section(diag_html, "diagnoses")
    d1, d2 = lead.index('id="diag-D1"'), lead.index('id="diag-D2"')
    assert d1 < d2  # the analysis gave D2 first; critical comes before warning
    first, second = lead[d1:d2], lead[d2:]
    # D1: title, severity, confidence, symptom -> where -> why -> next step, in that order.
    order = [
        "a wrapper on the collective names makes every call slower",
        "high confidence",
        "weight-sync time grows (superlinear)",
        "_all_gather_wrapper (fsdp_workers.py:412) sits on dist.all_gather",
        "13% of the samples in the first 2 windows",
        "cuda.segment.all.current grows +12/step",
        "take _all_gather_wrapper off the per-call path",
    ]
    at = [first.index(text) for text in order]
    assert at == sorted(at), at
    assert 'class="badge critical"' in first and 'class="badge warning"' in second
    assert "step time grows and no recorded fact says where" in second
    assert "low confidence" in second and "29%" in second
    # Figures beside each chain: the symptom's growth curve; the culprit frame's share of
    # samples and the counter against the symptom.
    assert first.count("<svg") == 3
    assert 'aria-label="weight_sync_s per step with fitted superlinear curve"' in first
    assert f'aria-label="share of samples in {CULPRIT_FRAME} per sampling window"' in first
    assert 'aria-label="counter cuda.segment.all.current against weight_sync_s per step"' in first
    assert second.count("<svg") == 1
    assert 'aria-label="step_s per step with fitted linear curve"' in second


def test_a_diagnosis_with_missing_links_renders_them(diag_html: str) -> None:
    lead = _section(diag_html, "diagnoses")
    second = lead[lead.index('id="diag-D2"') :]
    assert "Missing links" in second
    assert "where: no wrapper, per-call or call-count growth explains it" in second
    assert "why: no py-spy samples; run with --pyspy" in second
    # The chain still reads symptom -> where -> next step: the where says it was not found.
    assert "not found in what was recorded (see the missing links)" in second
    first = lead[lead.index('id="diag-D1"') : lead.index('id="diag-D2"')]
    assert "Missing links" not in first and "not found in what was recorded" not in first


def test_diagnoses_and_findings_link_to_each_other(diag_html: str) -> None:
    hrefs, ids = _hrefs_and_ids(diag_html)
    assert hrefs <= ids, hrefs - ids  # every in-page link lands somewhere
    for fid in ("F1", "F2", "F3", "F4"):
        assert f"finding-{fid}" in hrefs and f"finding-{fid}" in ids
    assert {"diag-D1", "diag-D2"} <= hrefs
    findings = _section(diag_html, "verdict")
    # Each finding shows its id and the diagnoses it belongs to; F1 is in both.
    f1 = findings[findings.index('id="finding-F1"') : findings.index('id="finding-F2"')]
    assert '<span class="fid-label">F1</span>' in f1
    assert 'href="#diag-D1">D1</a>' in f1 and 'href="#diag-D2">D2</a>' in f1
    f4 = findings[findings.index('id="finding-F4"') :]
    assert 'href="#diag-D2">D2</a>' in f4.split("</summary>")[0]
    assert 'href="#diag-D1"' not in f4.split("</summary>")[0]


def test_link_rows_are_tables_with_units(diag_html: str) -> None:
    lead = _section(diag_html, "diagnoses")
    assert '<th scope="row">slope (Theil-Sen)</th><td>+440 ms/step</td>' in lead
    assert '<th scope="row">between layers per step</th><td>120 ms -&gt; 1.01 s</td>' in lead
    assert "{" not in re.sub(r"<svg\b.*?</svg>|<style.*?</style>", "", lead, flags=re.S)


def test_evidence_rows_show_units_not_raw_floats_or_json() -> None:
    a = make_run_analysis(n_processes=1)
    series = {r.series.name: r.series for r in a.series}
    growth = Finding(
        kind="accumulating_slowdown",
        severity="critical",
        title="weight-sync time grows",
        evidence=FreeEvidence(
            {
                "series": "weight_sync_s",
                "first": 0.384469578,
                "last": 1.562459598,
                "slope_per_step": 0.15130394687499998,
                "projection": {"step": 15, "value": 2.9243456741663447, "model": "linear"},
                "added_s": 1.059127628125,
                "share_of_sync_growth": 0.8473033104505959,
                "gpu_total_bytes": 64 * 2**20,
                "broadcast": {"first_us": 2601.182, "last_us": 11752.729},
                "gone": None,
            }
        ),
        where=None,
        next_step="-",
        id="F1",
    )
    rows = dict(finding_rows(growth, series))
    assert rows == {
        "series": "weight_sync_s",
        "first": "384 ms",
        "last": "1.56 s",
        "slope per step": "+151 ms/step",
        "projection": "2.92 s at step 15",
        "added": "1.06 s",
        "share of sync growth": "85%",
        "gpu total": "64 MiB",
        "broadcast": "first 2.6 ms, last 11.8 ms",
    }
    corr = Finding(
        kind="counter_correlation",
        severity="warning",
        title="between layers tracks a counter",
        evidence=FreeEvidence(
            {
                "counter": "demo.allocator_segments",
                "series": "between_layers_s",
                "slope_per_unit": 5.303452908095239e-06,
                "unit": "1,000",
            }
        ),
        where=None,
        next_step="-",
        id="F2",
    )
    rows = dict(finding_rows(corr, series))
    assert rows["slope per unit"] == "5.3 ms per 1,000 demo.allocator_segments"
    assert "unit" not in rows
    memory = Finding(
        kind="memory_growth",
        severity="warning",
        title="rss grows",
        evidence=FreeEvidence({"counter": "proc.rss_bytes", "first": 2**30, "last": 3 * 2**30}),
        where=None,
        next_step="-",
        id="F3",
    )
    rows = dict(finding_rows(memory, series))
    assert rows["first"] == "1 GiB" and rows["last"] == "3 GiB"
    html = render_html(dataclasses.replace(a, findings=(growth, corr, memory)))
    findings = _section(html, "verdict")
    table = re.sub(r"<svg\b.*?</svg>", "", findings, flags=re.S)
    for raw in ("0.3845", "1.562", "0.1513", "5.303e-06", "{", "}", "2.924"):
        assert raw not in table, raw
    assert "2.92 s at step 15" in table and "64 MiB" in table


def test_healthy_analysis_shows_no_diagnosis() -> None:
    a = make_run_analysis(n_processes=1)
    quiet = tuple(
        dataclasses.replace(f, severity="info", id=f"F{i}") for i, f in enumerate(a.findings)
    )
    html = render_html(dataclasses.replace(a, findings=quiet, verdict=Verdict("no_problem")))
    lead = _section(html, "diagnoses")
    assert "no accumulating problem" in lead
    assert "No diagnosis" in lead and 'class="diag ' not in lead


def test_headline_line_and_rollout_card_say_where_the_number_comes_from() -> None:
    a = make_run_analysis()
    head = headline(a)
    html = render_html(a)
    lead = _section(html, "diagnoses")
    assert (
        "Rollout share" in lead
        and "53%" in lead
        and "steps of rank 0 (node-0, pid 4100), markers" in lead
    )
    assert "Weight sync" in lead and fmt_duration(head.weight_sync_median_s) in lead
    tiles = _section(html, "two-numbers")
    assert "no rollout phase was marked" not in tiles and "from steps of rank 0" in tiles
    none = dataclasses.replace(
        head, rollout_share_median=None, rollout_share_first=None, rollout_share_last=None
    )
    html = render_html(dataclasses.replace(a, headline=none))
    assert "no rollout phase was marked or sampled on any rank" in _section(html, "two-numbers")


def test_rollout_share_from_another_rank_is_named() -> None:
    """The trainer (rank 0) marks no rollout; the rollout ranks do: the card says whose."""
    a = make_run_analysis()
    other = dataclasses.replace(
        headline(a), rollout_share_median=0.61, rollout_source="steps of rank 1"
    )
    html = render_html(dataclasses.replace(a, headline=other))
    assert "61%" in _section(html, "two-numbers")
    assert "from steps of rank 1" in _section(html, "two-numbers")
    assert "from steps of rank 1" in _section(html, "diagnoses")


def test_many_diagnoses_fold_after_the_first_ones() -> None:
    a = with_diagnoses(make_run_analysis(n_processes=1))
    base = a.diagnoses[1]
    many = tuple(dataclasses.replace(base, id=f"D{i + 1}") for i in range(5))
    html = render_html(dataclasses.replace(a, diagnoses=many))
    lead = _section(html, "diagnoses")
    fold = lead.index("2 more diagnoses")
    assert lead.index('id="diag-D3"') < fold < lead.index('id="diag-D4"')


def test_sections_after_the_first_screen_are_folded(diag_html: str) -> None:
    for sid in SECTIONS[2:]:
        body = _section(diag_html, sid)
        if "<svg" in body:  # every figure below the first screen is inside a closed <details>
            before = body[: body.index("<svg")]
            assert before.count("<details") > before.count("</details>"), sid
    assert not re.search(r"<details[^>]*\bopen\b", diag_html)


# --------------------------------------------------------------------------- figures


def _geometry(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """Record every figure's layout as it is rendered: titles, legends, axes, colour bars."""
    seen: list[dict[str, object]] = []
    to_svg = figures._to_svg

    def spy(fig: Figure, label: str) -> str:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        cbars = [ax for ax in fig.axes if getattr(ax, "_colorbar", None) is not None]
        data = [ax for ax in fig.axes if ax not in cbars]
        titles = [
            t.get_window_extent(r)
            for ax in data
            for t in (ax.title, ax._left_title, ax._right_title)
            if t.get_text()
        ]
        legends = [lg.get_window_extent(r) for lg in fig.legends]
        legends += [ax.get_legend().get_window_extent(r) for ax in data if ax.get_legend()]
        seen.append(
            {
                "label": label,
                "titles": titles,
                "legends": legends,
                "axes": [ax.get_window_extent(r) for ax in data],
                "cbar_ticks": [list(ax.get_yticks()) for ax in cbars if ax.get_ylabel() == "step"],
                "step_ticks": [
                    [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
                    for ax in data
                    if ax.get_xlabel() in ("step", "sampling window")
                ],
            }
        )
        return to_svg(fig, label)

    monkeypatch.setattr(figures, "_to_svg", spy)
    return seen


def test_no_figure_has_a_legend_over_its_title_or_its_axes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _geometry(monkeypatch)
    a = with_diagnoses(make_run_analysis())
    # Calls outside any step (step -1), and caller sites with long names.
    p0 = a.processes[0]
    calls = p0.calls
    steps = (-1,) * 30 + calls.step[30:]
    sites = tuple(f"a_rather_long_function_name_{i % 7} (some/module.py:{i % 7})" for i in steps)
    p0 = dataclasses.replace(p0, calls=dataclasses.replace(calls, step=steps, site=sites))
    render_html(dataclasses.replace(a, processes=(p0, *a.processes[1:])))
    assert len(seen) >= 15
    for fig in seen:
        for lg in fig["legends"]:  # type: ignore[attr-defined]
            for t in fig["titles"]:  # type: ignore[attr-defined]
                assert not lg.overlaps(t), f"legend over the title in {fig['label']}"
            for ax in fig["axes"]:  # type: ignore[attr-defined]
                assert not lg.overlaps(ax), f"legend over the axes in {fig['label']}"


def test_colour_bars_and_step_axes_are_over_real_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _geometry(monkeypatch)
    a = make_run_analysis(n_processes=1)
    p0 = a.processes[0]
    calls = p0.calls
    # The first calls are outside any step (step -1); the steps present are 0..7.
    p0 = dataclasses.replace(
        p0, calls=dataclasses.replace(calls, step=(-1,) * 50 + calls.step[50:])
    )
    render_html(dataclasses.replace(a, processes=(p0,)))
    ticks = [t for fig in seen for bar in fig["cbar_ticks"] for t in bar]  # type: ignore[attr-defined]
    assert ticks and min(ticks) >= 0 and max(ticks) <= 7
    assert all(float(t).is_integer() for t in ticks)
    steps = [t for fig in seen for ax in fig["step_ticks"] for t in ax]  # type: ignore[attr-defined]
    assert steps and all(float(t).is_integer() for t in steps)
    svg = figures.op_latency_figure(p0.calls)
    assert svg is not None and "outside any step" in svg


def test_ranks_heatmap_columns_are_the_real_steps() -> None:
    svg = figures.ranks_figure(["rank 0", "rank 1"], [0, 5, 10], [[1.0, 2.0, 3.0], [1.0, 2.5, 3.5]])
    assert svg is not None
    xticks = re.findall(r'<g id="xtick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, flags=re.S)
    assert xticks == ["0", "5", "10"]


def test_frame_share_figure_draws_windows_when_known() -> None:
    shift = FrameShift(CULPRIT_FRAME, 0.13, 0.71, 23, 128)
    bare = figures.frame_share_figure(CULPRIT_FRAME, shift, 2, 6)
    full = figures.frame_share_figure(
        CULPRIT_FRAME, shift, 2, 6, per_window=[0.1, 0.15, 0.3, 0.5, 0.7, 0.72]
    )
    assert bare is not None and "share per window" not in bare and "13% (first 2)" in bare
    assert full is not None and "share per window" in full and "71% (last 2)" in full
    assert figures.frame_share_figure(CULPRIT_FRAME, shift, 0, 0) is None


def test_an_outlier_rank_diagnosis_draws_that_rank_against_the_others() -> None:
    a = make_run_analysis()
    outlier = Diagnosis(
        id="D1",
        cause="outlier_rank",
        severity="warning",
        confidence=0.67,
        title="rank 1 differs from the other ranks",
        symptom=Link("symptom", "rank 1: weight sync 2.9 s median, others 2.4 s"),
        where=Link("where", "rank 1", (), (("process", "rank 1"),)),
        why=(),
        next_step="look at what rank 1 does that the others do not",
        process="rank 1",
    )
    lead = _section(render_html(dataclasses.replace(a, diagnoses=(outlier,))), "diagnoses")
    assert 'aria-label="weight-sync time per step of rank 1 against the other ranks"' in lead
    assert "rank 1 differs from the other ranks" in lead


def test_the_wire_is_on_the_first_screen_and_in_its_figure() -> None:
    """Bytes per sync, bandwidth and the link limit: the headline's third number on the first
    screen, the wire and limit tiles, and the figure with the limit as a line."""
    from dataclasses import replace

    from wsprof.analysis.headline import headline_of
    from wsprof.analysis.link_limit import LinkLimit
    from wsprof.analysis.model import SyncWire

    a = make_run_analysis()
    pa = a.processes[0]
    steps = tuple(
        replace(r, wire=SyncWire(100, 14_200_000_000, 14_200_000_000.0, 1.2, 0, (), ("0",)))
        for r in pa.steps
    )
    pa = replace(pa, steps=steps)
    limit = LinkLimit(45e9, "NIC mlx5_0 port 1 (400 Gb/s InfiniBand)", "NCCL across hosts")
    head = headline_of(pa, a.series, a.source, [pa], limit)
    html = render_html(replace(a, processes=(pa, *a.processes[1:]), headline=head))
    first = html[html.index('<p class="headline">') : html.index('<p class="how">')]
    assert "On the wire" in first and "14.2 GB" in first
    assert "11.8 GB/s" in first and "26% of the 45 GB/s NIC mlx5_0" in first
    assert 'id="wire"' in html and "Bytes per weight sync" in html
    assert "limit: NIC mlx5_0 port 1" in html  # the limit's line in the figure's legend


def test_a_problems_verdicts_limits_follow_its_diagnoses() -> None:
    # The first screen shows the cause first: a limit of a "problems" verdict (a growth that
    # rests on the newest step) comes after the diagnoses; an inconclusive verdict's reasons
    # are its content, and come first.
    limit = "weight-sync time grows only with its newest step: judged again with the next"
    a = with_diagnoses(make_run_analysis())
    html = render_html(dataclasses.replace(a, verdict=Verdict("problems", 2, (limit,), 3)))
    lead = _section(html, "diagnoses")
    assert lead.index('class="diag') < lead.index('id="limits"') < lead.index(limit)
    assert 'id="inconclusive"' not in lead
    unsure = render_html(dataclasses.replace(a, verdict=Verdict("inconclusive", 0, (limit,), 0)))
    lead = _section(unsure, "diagnoses")
    assert lead.index('id="inconclusive"') < lead.index(limit) < lead.index('class="diag')
    assert 'id="limits"' not in lead
