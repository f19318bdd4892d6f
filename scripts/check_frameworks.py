"""Check wsprof's framework registry (:mod:`wsprof.frameworks`) against the frameworks' released
sources: every preset entry point and every sampled-phase pattern must still exist.

The released wheels (an sdist where there is no wheel) of every framework on PyPI are
downloaded with ``pip download --no-deps`` into a temporary folder and read with :mod:`ast`:
nothing is imported or installed. Checked:

- an entry point (``module:Class.method``): the module's file, the class and the method
  (defined in the class or in a base class of the same package); it passes when one of its
  alternative paths exists, and the line says which;
- a phase pattern: it must match a py-spy frame (``Class.method (pkg/file.py:1)`` or
  ``method (pkg/file.py:1)``) of some function of the release; a pattern marked ``legacy``
  (older releases only) is reported but not required;
- log lines and keys (informational): the step line's text and each metric key (or
  the timer name it is built from) are looked for in the sources.

The versions checked are pinned below (the latest releases when they were last checked);
``--latest`` checks whatever PyPI has now. A framework that is not on PyPI (slime) is said so
and skipped; ``--source NAME=DIR`` checks a source checkout instead (a folder holding the
framework's top-level package).

Usage::

    python scripts/check_frameworks.py [--latest] [--source slime=../slime] [--keep DIR]

Exit codes: 0 everything found, 1 one line per problem (``PROBLEM ...``), 3 the package index
could not be reached (nothing checked).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wsprof import frameworks
from wsprof.frameworks import EntryPoint, Framework, PhasePattern, split_path

#: Versions checked by default: the latest releases when the registry was last checked.
PINNED = {"verl": "0.9.1", "openrlhf": "0.11.2", "areal": "1.0.4", "trl": "1.16.0"}
#: Seconds one ``pip`` call may take.
PIP_TIMEOUT_S = 150
#: pip's words (``-vv``) for a package index it could not reach.
_UNREACHABLE = re.compile(
    r"Could not fetch URL \S+: connection error|Failed to establish a new connection|"
    r"Temporary failure in name resolution|Network is unreachable|ConnectTimeout|"
    r"Name or service not known",
    re.IGNORECASE,
)
#: How deep a method is looked for in base classes.
MAX_BASE_DEPTH = 8
EXIT_UNREACHABLE = 3


class IndexUnreachable(Exception):
    """pip could not reach the package index."""


# ---------------------------------------------------------------------------- getting sources


def _pip(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )


def download(dist: str, version: str | None, into: Path) -> Path:
    """The downloaded file of ``dist`` (``==version``, else the latest): a wheel, else an sdist.

    Raises:
        IndexUnreachable: pip could not reach the index.
        RuntimeError: no such release (pip's last line).
    """
    into.mkdir(parents=True, exist_ok=True)
    req = f"{dist}=={version}" if version else dist
    tries = [
        ["--only-binary=:all:"],
        # a wheel built for one CPython only (openrlhf): ask for it by its tags
        [
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--platform",
            "manylinux1_x86_64",
            "--platform",
            "manylinux2014_x86_64",
        ],
        ["--no-binary=:all:", "--no-build-isolation"],
    ]
    last = ""
    for extra in tries:
        # -vv: pip names a connection error only in its verbose output
        res = _pip(["download", "--no-deps", "-vv", "-d", str(into), *extra, req])
        got = sorted(p for p in into.iterdir() if p.is_file())
        if res.returncode == 0 and got:
            return got[0]
        text = res.stdout + res.stderr
        why = _UNREACHABLE.search(text)
        if why:
            raise IndexUnreachable(f"{req}: {why.group(0)}")
        errors = [ln for ln in text.splitlines() if ln.startswith("ERROR:")]
        last = (errors or text.strip().splitlines() or ["pip failed"])[-1]
    raise RuntimeError(f"{req}: {last[:300]}")


def index_versions(dist: str) -> list[str] | None:
    """The versions PyPI lists for ``dist``, None when it has none.

    Raises:
        IndexUnreachable: pip could not reach the index.
    """
    res = _pip(["index", "versions", dist])
    text = res.stdout + res.stderr
    m = re.search(r"Available versions: (.*)", text)
    if m:
        return [v.strip() for v in m.group(1).split(",")]
    if _UNREACHABLE.search(text):
        raise IndexUnreachable(f"{dist}: {text.strip().splitlines()[-1][:200]}")
    return None


_DATA_DIR = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")


def unpack(archive: Path, into: Path, modules: tuple[str, ...]) -> Path:
    """Unpack a wheel or sdist; the folder that holds the framework's top-level packages."""
    into.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                name = _DATA_DIR.sub("", info.filename)
                if not name.endswith(".py") or ".." in name.split("/"):
                    continue
                target = into / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
    else:
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                if member.isfile() and member.name.endswith(".py") and ".." not in member.name:
                    target = into / member.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = tf.extractfile(member)
                    if src is not None:
                        target.write_bytes(src.read())
    for root in (into, *sorted(p for p in into.rglob("*") if p.is_dir())):
        if any((root / m / "__init__.py").is_file() for m in modules):
            return root
    return into


# ------------------------------------------------------------------------------ the ast index


@dataclass
class ClassInfo:
    """A class of the release: its methods, its bases (as written), whether Ray wraps it."""

    methods: set[str] = field(default_factory=set)
    bases: list[str] = field(default_factory=list)
    ray_actor: bool = False


@dataclass
class ModuleInfo:
    """A module of the release: top-level classes and functions, names imported from."""

    classes: dict[str, ClassInfo] = field(default_factory=dict)
    functions: set[str] = field(default_factory=set)
    imported: dict[str, str] = field(default_factory=dict)  # name -> module


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Subscript):
        return _dotted(node.value)
    return ""


class Release:
    """The parsed sources of one release (or checkout).

    Args:
        root: the folder holding the top-level packages.
        modules: the framework's top-level packages.
    """

    def __init__(self, root: Path, modules: tuple[str, ...]) -> None:
        self.root = root
        self.modules: dict[str, ModuleInfo] = {}
        self.frames: list[str] = []
        self.text: list[str] = []
        for top in modules:
            base = root / top
            if not base.is_dir():
                continue
            for path in sorted(base.rglob("*.py")):
                rel = path.relative_to(root).as_posix()
                self._read(rel, path.read_text(encoding="utf-8", errors="replace"))

    def _read(self, rel: str, source: str) -> None:
        self.text.append(source)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return
        name = rel[:-3].replace("/", ".")
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        info = self.modules[name] = ModuleInfo()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    info.imported[alias.asname or alias.name] = node.module
            elif isinstance(node, ast.ImportFrom) and node.level:
                pkg = name.rsplit(".", node.level - (1 if rel.endswith("__init__.py") else 0))[0]
                mod = f"{pkg}.{node.module}" if node.module else pkg
                for alias in node.names:
                    info.imported[alias.asname or alias.name] = mod
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.functions.add(node.name)
            elif isinstance(node, ast.ClassDef):
                info.classes[node.name] = self._class(node)
        self._frames(tree, rel)

    @staticmethod
    def _class(node: ast.ClassDef) -> ClassInfo:
        cls = ClassInfo(
            bases=[_dotted(b) for b in node.bases],
            ray_actor=any(
                _dotted(d).endswith("ray.remote") or _dotted(d) == "remote"
                for d in node.decorator_list
            ),
        )
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                cls.methods.add(item.name)
            elif isinstance(item, ast.Assign):
                cls.methods.update(t.id for t in item.targets if isinstance(t, ast.Name))
        return cls

    def _frames(self, tree: ast.Module, rel: str) -> None:
        """py-spy frames of every function: qualified name (Python >= 3.11) and bare name."""
        self.frames.append(f"<module> ({rel}:1)")

        def walk(body: list[ast.stmt], prefix: str) -> None:
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qual = prefix + node.name
                    self.frames.append(f"{qual} ({rel}:{node.lineno})")
                    if qual != node.name:
                        self.frames.append(f"{node.name} ({rel}:{node.lineno})")
                    walk(node.body, qual + ".<locals>.")
                elif isinstance(node, ast.ClassDef):
                    walk(node.body, prefix + node.name + ".")
                elif isinstance(node, (ast.If, ast.Try, ast.With)):
                    walk(node.body, prefix)

        walk(tree.body, "")

    def find_method(self, module: str, cls: str, method: str, depth: int = 0) -> str | None:
        """Where ``module:cls.method`` is defined (``module:Class``), else None."""
        info = self.modules.get(module)
        if info is None or depth > MAX_BASE_DEPTH:
            return None
        if cls not in info.classes:
            origin = info.imported.get(cls)
            return self.find_method(origin, cls, method, depth + 1) if origin else None
        klass = info.classes[cls]
        if method in klass.methods:
            return f"{module}:{cls}"
        for base in klass.bases:
            head, _, last = base.rpartition(".")
            where = info.imported.get(last, module) if not head else info.imported.get(head, head)
            found = self.find_method(where, last, method, depth + 1)
            if found:
                return found
        return None


# ------------------------------------------------------------------------------------ checks


@dataclass
class Result:
    """What checking one framework said: lines to print and problems."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def check_path(release: Release, path: str) -> tuple[bool, str]:
    """(found, why) of one ``module:qualname`` path."""
    module, qualname = split_path(path)
    if module not in release.modules:
        return False, f"no module {module} ({module.replace('.', '/')}.py)"
    parts = qualname.split(".")
    info = release.modules[module]
    if len(parts) == 1:
        ok = parts[0] in info.functions or parts[0] in info.classes
        return ok, "function found" if ok else f"no function {parts[0]} in {module}"
    cls, method = parts[0], parts[-1]
    if cls not in info.classes and cls not in info.imported:
        return False, f"no class {cls} in {module}"
    where = release.find_method(module, cls, method)
    if where is None:
        return False, f"no method {method} in class {cls} (nor its bases in the package)"
    klass = info.classes.get(cls)
    ray = (
        " (a Ray actor class: presets wrap the class Ray instantiates)"
        if (klass and klass.ray_actor)
        else ""
    )
    inherited = "" if where == f"{module}:{cls}" else f", inherited from {where}"
    return True, f"found{inherited}{ray}"


def check_entry_point(release: Release, label: str, entry: EntryPoint, out: Result) -> None:
    """One entry point: passes when one of its paths exists."""
    found = False
    for path in entry.paths:
        ok, why = check_path(release, path)
        mark = "ok  " if ok else "--  "
        out.lines.append(f"  {mark}entry point {entry.phase}: {path}: {why}")
        found = found or ok
    if not found:
        out.problems.append(
            f"PROBLEM {label}: entry point {entry.phase} "
            f"({' | '.join(entry.paths)}) exists at none of its paths"
        )
    elif len(entry.paths) > 1:
        first = next(p for p in entry.paths if check_path(release, p)[0])
        out.lines.append(f"  ok  entry point {entry.phase} passes by {first}")


def check_pattern(release: Release, label: str, pattern: PhasePattern, out: Result) -> None:
    """One phase pattern: it must match a frame of the release (unless legacy)."""
    regex = re.compile(pattern.regex)
    hit = next((f for f in release.frames if regex.search(f)), None)
    desc = f"{pattern.phase} `{pattern.function}`" + (
        f" in `{pattern.file}`" if pattern.file else ""
    )
    if hit is not None:
        out.lines.append(f"  ok  pattern {desc}: e.g. {hit}")
    elif pattern.legacy:
        out.lines.append(f"  --  pattern {desc}: older releases only (legacy), not in this one")
    else:
        out.problems.append(
            f"PROBLEM {label}: pattern {desc} matches no function of the release ({pattern.note})"
        )


def check_log_keys(release: Release, fw: Framework, out: Result) -> None:
    """Informational: each metric key (or its last part) as text in the sources."""
    text = "\n".join(release.text)
    fmt = fw.log_format
    if fmt is not None:
        seen = "ok  " if fmt.marker in text else "--  "
        out.lines.append(
            f"  {seen}log step line {fmt.example!r}: text {fmt.marker!r} "
            f"{'in' if seen == 'ok  ' else 'not in'} the sources"
        )
    for m in fw.metric_keys:
        stem = m.key.rsplit("/", 1)[-1]
        for prefix, suffix in fw.timer_keys:  # perf/update_weights_time: timer update_weights
            if m.key.startswith(prefix) and suffix and m.key.endswith(suffix):
                stem = m.key[len(prefix) : -len(suffix)]
        if m.key in text:
            out.lines.append(f"  ok  log key {m.key} -> {m.series}")
        elif re.search(rf"""["']{re.escape(stem)}["']|def {re.escape(stem)}\(""", text):
            out.lines.append(f"  ok  log key {m.key} -> {m.series} (built from '{stem}')")
        else:
            out.lines.append(
                f"  --  log key {m.key}: not found as text (older releases, or built at run time)"
            )


def check_release(fw: Framework, release: Release, label: str) -> Result:
    """Every entry point and pattern of ``fw`` against one release."""
    out = Result([f"{label}: {len(release.modules)} modules, {len(release.frames)} frames"])
    if not release.modules:
        out.problems.append(
            f"PROBLEM {label}: none of the packages {', '.join(fw.modules)} in the release"
        )
        return out
    for entry in fw.entry_points:
        check_entry_point(release, label, entry, out)
    for pattern in fw.phase_patterns:
        check_pattern(release, label, pattern, out)
    check_log_keys(release, fw, out)
    return out


def _fetch_and_check(fw: Framework, version: str | None, work: Path) -> Result:
    assert fw.distribution is not None
    archive = download(fw.distribution, version, work / "dl" / fw.name)
    root = unpack(archive, work / "src" / fw.name, fw.modules)
    return check_release(fw, Release(root, fw.modules), f"{fw.name} {archive.name}")


def _not_on_pypi(fw: Framework) -> str:
    try:
        versions = index_versions(fw.name)
    except IndexUnreachable:
        versions = None
    if versions:
        return (
            f"{fw.name}: not on PyPI ({fw.repository} publishes no release; PyPI's "
            f"'{fw.name}' {', '.join(versions[:3])} is another project); skipped; check a "
            f"checkout with --source {fw.name}=DIR"
        )
    return (
        f"{fw.name}: not on PyPI ({fw.repository} publishes no release); skipped; check a "
        f"checkout with --source {fw.name}=DIR"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the check; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--latest",
        action="store_true",
        help="check PyPI's latest releases instead of the pinned versions",
    )
    ap.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="check a source checkout of framework NAME (a folder holding its "
        "top-level package) instead of downloading it",
    )
    ap.add_argument(
        "--keep",
        metavar="DIR",
        default=None,
        help="download and unpack into DIR (kept) instead of a temporary folder",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every check")
    args = ap.parse_args(argv)
    sources: dict[str, Path] = {}
    for item in args.source:
        name, sep, folder = item.partition("=")
        if not sep or frameworks.find(name) is None:
            ap.error(
                f"--source {item!r}: give NAME=DIR with NAME one of {', '.join(frameworks.NAMES)}"
            )
        sources[name.lower()] = Path(folder)
    t0 = time.monotonic()
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="wsprof-frameworks-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        jobs: dict[str, concurrent.futures.Future[Result]] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            for fw in frameworks.FRAMEWORKS:
                if fw.name in sources:
                    release = Release(sources[fw.name], fw.modules)
                    results[fw.name] = check_release(fw, release, f"{fw.name} {sources[fw.name]}")
                elif fw.distribution is None:
                    results[fw.name] = Result([_not_on_pypi(fw)])
                else:
                    version = None if args.latest else PINNED.get(fw.name)
                    jobs[fw.name] = pool.submit(_fetch_and_check, fw, version, work)
            for name, job in jobs.items():
                try:
                    results[name] = job.result()
                except IndexUnreachable as e:
                    print(f"package index unreachable: {e}; nothing checked")
                    return EXIT_UNREACHABLE
                except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                    results[name] = Result(
                        problems=[f"PROBLEM {name}: cannot get the release ({e})"]
                    )
    problems: list[str] = []
    for fw in frameworks.FRAMEWORKS:
        res = results[fw.name]
        lines = (
            res.lines
            if args.verbose
            else [ln for ln in res.lines if not ln.startswith("  ok  pattern")]
        )
        print("\n".join(lines))
        problems += res.problems
    print()
    for line in problems:
        print(line)
    print(
        f"{'FAILED' if problems else 'OK'}: {len(problems)} problem(s) in "
        f"{time.monotonic() - t0:.1f} s"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
