"""The HTML report's and diff's Content-Security-Policy in headless Chromium: the real pages
still render every figure (inline SVG, data: images) with no policy violation, and a script
put into the page is refused: the "no scripts" promise is the browser's, not only ours."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.browser import browser_skip_reason, offline_check
from tests.report_fixtures import make_run_analysis
from tests.unit.test_report_html import with_diagnoses
from wsprof.cli import main
from wsprof.report.html import write_html

if TYPE_CHECKING:
    from playwright.sync_api import Page

_SKIP = browser_skip_reason()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""),
]

#: Puts an inline script into the loaded page (as an injected name would, had it escaped
#: Jinja2's autoescape) and says whether it ran.
_INJECT = """() => {
  const s = document.createElement('script');
  s.textContent = 'window.__ran = 1';
  document.body.appendChild(s);
  return window.__ran === 1;
}"""


def _figures_drawn(page: Page) -> int:
    """Inline SVG figures laid out with a size (a blocked style would collapse none, but a
    broken page shows none)."""
    return int(
        page.evaluate(
            "() => [...document.querySelectorAll('svg')].filter(s => "
            "{ const r = s.getBoundingClientRect(); return r.width > 100 && r.height > 50; })"
            ".length"
        )
    )


def test_the_report_renders_its_figures_and_refuses_a_script(tmp_path: Path) -> None:
    path = write_html(with_diagnoses(make_run_analysis()), tmp_path / "report.html")
    seen: dict[str, object] = {}

    def on_page(page: Page) -> None:
        seen["figures"] = _figures_drawn(page)
        seen["styled"] = page.evaluate(
            "() => getComputedStyle(document.querySelector('header.top')).backgroundColor"
        )

    attempted, errors = offline_check(path, on_page)
    assert attempted == [] and errors == []  # no CSP violation on the page as written
    assert int(str(seen["figures"])) >= 3, seen
    assert seen["styled"] not in ("rgba(0, 0, 0, 0)", "transparent"), seen  # inline CSS applies

    def inject(page: Page) -> None:
        seen["ran"] = page.evaluate(_INJECT)

    _, errors = offline_check(path, inject)
    assert seen["ran"] is False
    assert any("Content Security Policy" in e for e in errors), errors


def test_the_diff_page_renders_and_refuses_a_script(tmp_path: Path) -> None:
    sides = []
    for name, grow in (("before", 0.5), ("after", 0.1)):
        p = tmp_path / f"{name}.csv"
        p.write_text("step,weight_sync_s\n" + "".join(f"{k},{1 + grow * k}\n" for k in range(12)))
        sides.append(str(p))
    out = tmp_path / "diff.html"
    assert main(["diff", *sides, "--format", "html", "-o", str(out)]) == 0
    assert 'http-equiv="Content-Security-Policy"' in out.read_text()
    seen: dict[str, object] = {}
    attempted, errors = offline_check(out)
    assert attempted == [] and errors == []

    def inject(page: Page) -> None:
        seen["ran"] = page.evaluate(_INJECT)

    _, errors = offline_check(out, inject)
    assert seen["ran"] is False and any("Content Security Policy" in e for e in errors), errors
