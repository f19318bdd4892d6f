"""Output formats: one class per format behind a small protocol, one registry per command.

The CLI reads each command's ``--format`` choices (and their help) from its registry and
looks the renderer up by name; adding a format is adding a class here, never an ``if`` in a
command:

- :data:`ANALYZE_RENDERERS` (``wsprof analyze``): ``text``, ``json`` of an
  :class:`~wsprof.analysis.model.Analysis`;
- :data:`DIFF_RENDERERS` (``wsprof diff``): ``text``, ``json``, ``html`` of a
  :class:`~wsprof.analysis.diff.DiffResult`;
- :data:`REPORT_RENDERERS` (``wsprof report``): ``html`` of an analysis;
- :data:`EXPORTERS` (``wsprof export``): ``perfetto``, ``speedscope``, ``csv`` of a loaded
  input (:mod:`wsprof.inputs`), streamed to a file (a Perfetto trace of millions of calls is
  never one string in memory); ``tensorboard``, a folder of event files
  (:class:`FolderExporter`).

Each renderer module is imported when its format is used (the HTML ones load matplotlib).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from wsprof.errors import InputError

if TYPE_CHECKING:  # the registries are read at CLI start-up: no analysis imported for them
    from wsprof.analysis.diff import DiffResult
    from wsprof.analysis.model import Analysis
    from wsprof.inputs import Loaded, LoadedRun

R_contra = TypeVar("R_contra", contravariant=True)


class Renderer(Protocol[R_contra]):
    """One output format of a result.

    Attributes:
        name: the ``--format`` value.
        suffix: the file suffix of its output (``.html``).
        description: what it is for, after the name in ``--help`` (``for people``).
        writes_file: True when the output goes to a file by default (HTML), False when to
            stdout unless a file is named.
    """

    name: str
    suffix: str
    description: str
    writes_file: bool

    def render(self, result: R_contra, **opts: Any) -> str:
        """The output as text (``opts``: format-specific options, ignored where unknown)."""
        ...


class Exporter(Protocol):
    """One export format of a loaded input, written to an open text file.

    Attributes:
        name: the ``--format`` value.
        suffix: the file suffix of its output.
        description: what it holds, after the name in ``--help``.
    """

    name: str
    suffix: str
    description: str

    def write(self, loaded: Loaded, out: IO[str], say: Callable[[str], None]) -> str:
        """Write the export of ``loaded`` to ``out``; ``say`` takes notes for stderr.

        Returns:
            What was written, for the line the command prints (``12 trace events ...``).

        Raises:
            InputError: ``loaded`` holds nothing this format can export.
        """
        ...


@runtime_checkable
class FolderExporter(Protocol):
    """One export format of a loaded input written as a folder of files (``-o`` names the
    folder).

    Attributes:
        name: the ``--format`` value.
        suffix: empty (a folder).
        description: what it holds, after the name in ``--help``.
    """

    name: str
    suffix: str
    description: str

    def ready(self) -> None:
        """Check what it needs before anything is read.

        Raises:
            InputError: an optional package it needs is missing (one line: how to install).
        """
        ...

    def write_folder(self, loaded: Loaded, folder: str, say: Callable[[str], None]) -> str:
        """Write the export of ``loaded`` into ``folder``; ``say`` takes notes for stderr.

        Returns:
            What was written, for the line the command prints.

        Raises:
            InputError: ``loaded`` holds nothing this format can export, or ``folder``
                cannot be written.
        """
        ...


# --------------------------------------------------------------------------- analyze, report


class AnalysisText:
    """``wsprof analyze``: the verdict and the diagnoses first, 80 columns (opts ``colour``;
    ``max_findings``: also list that many findings, as ``--all`` does)."""

    name = "text"
    suffix = ".txt"
    description = "for people"
    writes_file = False

    def render(self, result: Analysis, **opts: Any) -> str:
        """The text report (:func:`wsprof.report.text.render_text`)."""
        from wsprof.report.text import render_text

        limit = opts.get("max_findings")
        return render_text(
            result,
            colour=bool(opts.get("colour", False)),
            max_findings=int(limit) if limit is not None else None,
        )


class AnalysisJson:
    """``wsprof analyze --format json``: the document of :func:`wsprof.report.jsonout.to_dict`
    (with its ``schema_version``), one newline at the end."""

    name = "json"
    suffix = ".json"
    description = "for machines"
    writes_file = False

    def render(self, result: Analysis, **opts: Any) -> str:
        """The JSON text and a newline."""
        from wsprof.report.jsonout import render_json

        return render_json(result) + "\n"


class AnalysisHtml:
    """``wsprof report``: the self-contained HTML growth-curve report."""

    name = "html"
    suffix = ".html"
    description = "for a page"
    writes_file = True

    def render(self, result: Analysis, **opts: Any) -> str:
        """The page (:func:`wsprof.report.html.render_html`)."""
        from wsprof.report.html import render_html

        return render_html(result)


# --------------------------------------------------------------------------- diff


class DiffText:
    """``wsprof diff``: the verdict first, 80 columns."""

    name = "text"
    suffix = ".txt"
    description = "for people"
    writes_file = False

    def render(self, result: DiffResult, **opts: Any) -> str:
        """The text diff (:func:`wsprof.report.diff_text.render_diff_text`)."""
        from wsprof.report.diff_text import render_diff_text

        return render_diff_text(result)


class DiffJson:
    """``wsprof diff --format json`` (:func:`wsprof.report.diff_json.diff_to_dict`)."""

    name = "json"
    suffix = ".json"
    description = "for machines"
    writes_file = False

    def render(self, result: DiffResult, **opts: Any) -> str:
        """The JSON text and a newline."""
        from wsprof.report.diff_json import render_diff_json

        return render_diff_json(result) + "\n"


class DiffHtml:
    """``wsprof diff --format html``: one self-contained page."""

    name = "html"
    suffix = ".html"
    description = "for a page"
    writes_file = True

    def render(self, result: DiffResult, **opts: Any) -> str:
        """The page (:func:`wsprof.report.diff_html.render_diff_html`)."""
        from wsprof.report.diff_html import render_diff_html

        return render_diff_html(result)


# --------------------------------------------------------------------------- export


def _run_of(loaded: Loaded, fmt: str) -> LoadedRun:
    """The run to export, or the one-line answer for a series file or a log."""
    from wsprof.inputs import LoadedLog, LoadedSeries

    if isinstance(loaded, LoadedSeries):
        raise InputError(
            f"{loaded.path}: a CSV series has no calls or samples to export as "
            f"{fmt}; give a run folder or a .wsprof trace"
        )
    if isinstance(loaded, LoadedLog):
        raise InputError(
            f"{loaded.path}: a training log has no calls or samples to export as "
            f"{fmt}; give a run folder or a .wsprof trace"
        )
    return loaded


class PerfettoExporter:
    """Chrome trace JSON for ui.perfetto.dev (:func:`wsprof.report.export.write_perfetto`);
    says the coverage audit's lines first."""

    name = "perfetto"
    suffix = ".json"
    description = "Chrome trace JSON for ui.perfetto.dev (calls, steps, phases, counters)"

    def write(self, loaded: Loaded, out: IO[str], say: Callable[[str], None]) -> str:
        """Write every trace of the run, on the run clock."""
        from wsprof.analysis.coverage import audit_run
        from wsprof.report.export import write_perfetto

        traces, problems = _run_of(loaded, self.name).read_all()
        for p in problems:
            say(f"wsprof: note: {p}")
        coverage = audit_run([(t.label, t) for t in traces])
        for line in coverage.lines():
            say(f"wsprof: coverage {coverage.status}: {line}")
        n = write_perfetto(traces, out, coverage)
        return f"{n:,} trace events (open in https://ui.perfetto.dev)"


class SpeedscopeExporter:
    """py-spy samples for speedscope.app (:func:`wsprof.report.export.speedscope`)."""

    name = "speedscope"
    suffix = ".json"
    description = "py-spy samples for speedscope.app"

    def write(self, loaded: Loaded, out: IO[str], say: Callable[[str], None]) -> str:
        """Write one profile per sampled thread."""
        from wsprof.report.export import speedscope

        run = _run_of(loaded, self.name)
        traces, problems = run.read_all()
        for p in problems:
            say(f"wsprof: note: {p}")
        doc = speedscope(traces, name=os.path.basename(os.path.abspath(run.path)))
        if not doc["profiles"]:
            raise InputError(
                f"{run.path}: no py-spy samples to export; sample a job with "
                "`wsprof attach PID` (or `wsprof demo --pyspy`) first"
            )
        json.dump(doc, out)
        return f"{len(doc['profiles'])} sampled profiles (open in https://speedscope.app)"


class StepCsvExporter:
    """The per-step table (:func:`wsprof.report.export.step_csv`) of a run or a series."""

    name = "csv"
    suffix = ".csv"
    description = "the per-step table (step, phase times, sync time, calls, counters)"

    def write(self, loaded: Loaded, out: IO[str], say: Callable[[str], None]) -> str:
        """Write the table of the analysis of ``loaded``."""
        from wsprof.analysis.run import analyze
        from wsprof.report.export import step_csv

        try:
            text = step_csv(analyze(loaded))
        except ValueError as e:
            raise InputError(f"{loaded.path}: {e}") from e
        out.write(text)
        return "per-step table"


class TensorBoardExporter:
    """Per-step scalars and the verdict as TensorBoard event files, one run per process
    (:mod:`wsprof.report.tensorboard_out`; needs the ``tensorboard`` extra)."""

    name = "tensorboard"
    suffix = ""
    description = (
        "a folder of TensorBoard event files: per-step scalars (wsprof/...) per rank and the "
        "verdict as text (needs wsprof[tensorboard])"
    )

    def ready(self) -> None:
        """The ``tensorboard`` package must be importable."""
        from wsprof.report.tensorboard_out import require_tensorboard

        require_tensorboard()

    def write_folder(self, loaded: Loaded, folder: str, say: Callable[[str], None]) -> str:
        """Write the analysis of ``loaded`` into ``folder``."""
        from wsprof.analysis.run import analyze
        from wsprof.report.tensorboard_out import export_tensorboard

        out = export_tensorboard(analyze(loaded), folder)
        runs = out.runs
        return (
            f"{out.points:,} scalars in {len(runs)} run(s) ({', '.join(runs)}); "
            f"`tensorboard --logdir {folder}`"
        )


def _registry(*items: Any) -> dict[str, Any]:
    return {r.name: r for r in items}


#: ``wsprof analyze --format``.
ANALYZE_RENDERERS: Mapping[str, Renderer[Analysis]] = _registry(AnalysisText(), AnalysisJson())
#: ``wsprof report`` (one format today).
REPORT_RENDERERS: Mapping[str, Renderer[Analysis]] = _registry(AnalysisHtml())
#: ``wsprof diff --format``.
DIFF_RENDERERS: Mapping[str, Renderer[DiffResult]] = _registry(DiffText(), DiffJson(), DiffHtml())
#: ``wsprof export --format``.
EXPORTERS: Mapping[str, Exporter | FolderExporter] = _registry(
    PerfettoExporter(), SpeedscopeExporter(), StepCsvExporter(), TensorBoardExporter()
)


def choices_help(
    registry: Mapping[str, Renderer[Any]] | Mapping[str, Exporter | FolderExporter],
    sep: str = " ",
) -> str:
    """The ``--help`` of a ``--format`` option: each name with its description
    (``text for people, json for machines``; with ``sep=": "`` joined by ``; ``)."""
    joiner = ", " if sep == " " else "; "
    return joiner.join(f"{name}{sep}{r.description}" for name, r in registry.items())
