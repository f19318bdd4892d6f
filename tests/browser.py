"""Open an HTML file in headless Chromium with the network blocked (for report tests).

``offline_check(path)`` returns every request the page attempted besides the file itself and
every console error or uncaught page error. Import it from any test that writes a report::

    from tests.browser import browser_skip_reason, offline_check
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
#: The first screen a report is judged by (issue 18: "the report reads in 30 seconds").
FIRST_SCREEN = {"width": 1400, "height": 900}


def browser_skip_reason() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)) and not shutil.which(
        CHROMIUM
    ):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (python) is not installed"
    return None


def offline_check(
    html_path: str | os.PathLike[str],
    on_page: Callable[[Page], None] | None = None,
    viewport: dict[str, int] | None = None,
) -> tuple[list[str], list[str]]:
    """Load ``html_path`` from file:// with every other request blocked.

    Args:
        html_path: the HTML file.
        on_page: called with the loaded page (assertions, screenshots) before it closes.
        viewport: the window size in CSS pixels (default :data:`VIEWPORT`;
            :data:`FIRST_SCREEN` for what a reader sees first).

    Returns:
        ``(requests_attempted, console_errors)``: distinct URLs the page tried to load
        besides itself (each was aborted); console errors, uncaught page errors and dialogs.
    """
    from playwright.sync_api import Request, Route, sync_playwright

    url = Path(html_path).resolve().as_uri()
    attempted: list[str] = []
    errors: list[str] = []

    def route(r: Route, request: Request) -> None:
        if request.url == url:
            r.continue_()
        else:
            if request.url not in attempted:
                attempted.append(request.url)
            r.abort()

    def on_request(request: Request) -> None:
        # Requests that bypass routing (none expected) are recorded too.
        if request.url != url and request.url not in attempted:
            attempted.append(request.url)

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            errors.append(f"console: {msg.text}")

    def on_pageerror(exc: Any) -> None:
        errors.append(f"pageerror: {exc}")

    def on_dialog(dialog: Any) -> None:
        errors.append(f"dialog: {dialog.type} {dialog.message}")
        dialog.dismiss()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport=viewport or VIEWPORT)  # type: ignore[arg-type]
            page = context.new_page()
            page.route("**/*", route)
            page.on("request", on_request)
            page.on("console", on_console)
            page.on("pageerror", on_pageerror)
            page.on("dialog", on_dialog)
            page.goto(url, wait_until="load")
            page.wait_for_load_state("networkidle")
            if on_page is not None:
                on_page(page)
            context.close()
        finally:
            browser.close()
    return attempted, errors
