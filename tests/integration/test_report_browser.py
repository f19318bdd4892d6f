"""The HTML report in headless Chromium: offline, error-free, every section visible.

Screenshots of each section land in ``test-artifacts/report/`` at the repository root.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.browser import browser_skip_reason, offline_check
from tests.report_fixtures import make_run_analysis, make_series_analysis
from wsprof.report.html import SECTIONS, write_html

if TYPE_CHECKING:
    from playwright.sync_api import Page

_SKIP = browser_skip_reason()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""),
]

_NO_STICKY = "nav.toc { position: static !important; }"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "report"


def _check_sections(shots: Path | None) -> Callable[[Page], None]:
    """Assert every section is there and visible; screenshot each into ``shots``."""

    def on_page(page: Page) -> None:
        for section in SECTIONS:
            loc = page.locator(f"section#{section}")
            assert loc.count() == 1, section
            assert loc.is_visible(), f"section {section} is not visible"
            box = loc.bounding_box()
            assert box is not None and box["width"] > 600 and box["height"] > 50, (section, box)
            if shots is not None:
                # The sticky navigation bar would cover the top of long sections.
                loc.screenshot(path=str(shots / f"{section}.png"), style=_NO_STICKY)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"page scrolls horizontally by {overflow}px"

    return on_page


def test_run_report_offline_and_visible(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = write_html(make_run_analysis(), tmp_path / "report.html")
    attempted, errors = offline_check(path, _check_sections(ARTIFACTS))
    assert attempted == []
    assert errors == []
    for section in SECTIONS:
        assert (ARTIFACTS / f"{section}.png").stat().st_size > 1000


def test_series_report_offline_and_visible(tmp_path: Path) -> None:
    shots = ARTIFACTS / "series"
    shots.mkdir(parents=True, exist_ok=True)
    path = write_html(make_series_analysis(), tmp_path / "series.html")
    attempted, errors = offline_check(path, _check_sections(shots))
    assert attempted == []
    assert errors == []


def test_hostile_report_runs_nothing(tmp_path: Path) -> None:
    payload = '<script>alert(1)</script>"><img src=x onerror=alert(1)>{{7*7}}'
    path = write_html(make_run_analysis(payload=payload), tmp_path / "hostile.html")

    def on_page(page: Page) -> None:
        assert page.locator("script").count() == 0
        assert page.locator("img").count() == 0
        assert payload in page.locator("section#verdict").inner_text()

    attempted, errors = offline_check(path, on_page)
    assert attempted == []
    assert errors == []  # includes alert() dialogs


def test_offline_check_records_blocked_requests(tmp_path: Path) -> None:
    """The helper itself: an external image is recorded and aborted, never loaded."""
    page = tmp_path / "leaky.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>x</title></head>'
        '<body><img src="https://example.invalid/pixel.png" alt=""></body></html>',
        encoding="utf-8",
    )
    attempted, _ = offline_check(page)
    assert attempted == ["https://example.invalid/pixel.png"]
