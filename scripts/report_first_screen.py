"""What a reader sees first: render each run's report and measure it in headless Chromium.

    python scripts/report_first_screen.py RUN [RUN ...] [--shots DIR]

For each run folder (or trace, CSV, log): the diagnoses and the findings behind them, the
warning-or-worse items the terminal shows (``wsprof analyze`` without ``--all``), and in
Chromium at 1400x900 the page height, where the first diagnosis's next step ends (the first
screen is 900 px) and whether the page scrolls sideways. With ``--shots DIR`` a screenshot of
the first screen per run. Prints one table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.browser import FIRST_SCREEN, offline_check
from wsprof.analysis.run import analyze_path
from wsprof.report.html import write_html
from wsprof.report.text import render_text


def measure(run: str, shots: str | None) -> dict[str, object]:
    a = analyze_path(run)
    text = render_text(a)
    tagged = [ln for ln in text.splitlines() if "[critical]" in ln or "[warning]" in ln]
    row: dict[str, object] = {
        "run": os.path.basename(os.path.normpath(run)),
        "diagnoses": len(a.diagnoses),
        "findings": len(a.findings),
        "warning+ findings": a.verdict.n_findings,
        "warning+ lines in text": len(tagged),
    }
    with tempfile.TemporaryDirectory() as tmp:
        html = write_html(a, os.path.join(tmp, "r.html"))

        def on_page(page: object) -> None:
            ev = page.evaluate  # type: ignore[attr-defined]
            row["page px"] = ev("document.documentElement.scrollHeight")
            row["sideways px"] = ev(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            nxt = page.locator("section#diagnoses article.diag li.link.next")  # type: ignore[attr-defined]
            if nxt.count():
                box = nxt.first.bounding_box()
                row["first next step ends at px"] = round(box["y"] + box["height"])
            else:
                row["first next step ends at px"] = "-"
            if shots:
                os.makedirs(shots, exist_ok=True)
                page.screenshot(path=os.path.join(shots, f"{row['run']}-1400x900.png"))  # type: ignore[attr-defined]

        attempted, errors = offline_check(html, on_page, viewport=FIRST_SCREEN)
        row["blocked requests"] = len(attempted) + len(errors)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--shots", default=None)
    args = ap.parse_args()
    rows = [measure(r, args.shots) for r in args.runs]
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r.get(k, "")) for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
