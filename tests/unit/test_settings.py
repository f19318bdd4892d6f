"""Every ``WSPROF_*`` variable is read by one function into one frozen object
(:func:`wsprof.capture.settings.read`): each field's parsing and validation, and that nothing
else in the package reads the environment for a ``WSPROF_*`` name."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from wsprof.capture import settings as cfg

REPO = Path(__file__).resolve().parents[2]

FLAG_WORDS = "1, true, yes, on, 0, false, no, off"


def _read(**env: str) -> cfg.Settings:
    return cfg.read({f"WSPROF_{k}": v for k, v in env.items()})


def test_defaults_when_nothing_is_set() -> None:
    s = cfg.read({})
    assert s == cfg.Settings()
    assert (s.disable, s.layers, s.counters, s.native, s.run) == (False, "both", True, True, False)
    assert s.warnings == () and s.errors == ()


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.read({}).disable = True  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        (" TRUE ", True),
        ("on", True),
        ("yes", True),
        ("0", False),
        ("Off", False),
        ("", False),
    ],
)
def test_disable_every_spelling(value: str, expected: bool) -> None:
    s = _read(DISABLE=value)
    assert s.disable is expected and s.errors == ()


def test_bad_disable_is_one_line_error_and_means_not_profiling() -> None:
    s = _read(DISABLE="maybe")
    assert s.disable is True
    assert s.error(cfg.ENV_DISABLE) == (
        f"WSPROF_DISABLE='maybe' is not a yes/no flag; set it to one of {FLAG_WORDS} or unset it"
    )
    with pytest.raises(ValueError, match=r"^WSPROF_DISABLE='maybe' is not a yes/no flag"):
        s.raise_for(cfg.ENV_LAYERS, cfg.ENV_DISABLE)
    s.raise_for(cfg.ENV_LAYERS)  # the other variable is fine


@pytest.mark.parametrize(("value", "expected"), [(" API ", "api"), ("both", "both"), ("", "both")])
def test_layers(value: str, expected: str) -> None:
    assert _read(LAYERS=value).layers == expected


def test_bad_layers_is_one_line_error_and_falls_back_to_both() -> None:
    s = _read(LAYERS="apis")
    assert s.layers == "both"
    assert s.error(cfg.ENV_LAYERS) == (
        "WSPROF_LAYERS='apis' is not one of both, api; set it to one of them or unset it"
    )


def test_text_variables_strip_and_empty_is_unset() -> None:
    s = _read(OUT=" /runs/a ", PRESET="verl", PYSPY="", EXTRA=" a:b , ,c:d=broadcast,")
    assert (s.out, s.preset, s.pyspy) == ("/runs/a", "verl", None)
    assert s.extra == ("a:b", "c:d=broadcast")


@pytest.mark.parametrize(
    ("var", "field", "minimum"),
    [
        ("KEEP_STEPS", "keep_steps", 0),
        ("THINNED_STEP_CALLS", "thinned_step_calls", 1),
        ("PROBE_INTERVAL_MS", "probe_interval_ms", 1),
        ("RING_RECORDS", "ring_records", 1),
        ("MAX_PENDING", "ring_records", 1),
    ],
)
def test_integers_take_their_minimum_and_warn_below_it(var: str, field: str, minimum: int) -> None:
    assert getattr(_read(**{var: str(minimum)}), field) == minimum
    assert getattr(_read(**{var: " 4096 "}), field) == 4096
    for bad in (str(minimum - 1), "many", "1.5"):
        s = _read(**{var: bad})
        assert getattr(s, field) is None, bad
        assert s.warnings == (
            f"ignoring WSPROF_{var}={bad!r}: not an integer >= {minimum}; using the default",
        )
        assert s.errors == ()


def test_ring_records_wins_over_its_older_name() -> None:
    assert _read(RING_RECORDS="2048", MAX_PENDING="1024").ring_records == 2048
    assert _read(MAX_PENDING="1024").ring_records == 1024
    assert _read(RING_RECORDS="x", MAX_PENDING="1024").ring_records == 1024


@pytest.mark.parametrize(("value", "expected"), [("0.5", 0.005), ("100", 1.0), ("2", 0.02)])
def test_probe_budget_is_a_percent(value: str, expected: float) -> None:
    s = _read(PROBE_BUDGET_PCT=value)
    assert s.probe_budget_fraction == pytest.approx(expected) and s.warnings == ()


@pytest.mark.parametrize("bad", ["0", "-1", "101", "nan", "inf", "half"])
def test_bad_probe_budget_warns_and_uses_the_default(bad: str) -> None:
    s = _read(PROBE_BUDGET_PCT=bad)
    assert s.probe_budget_fraction is None
    assert s.warnings == (
        f"ignoring WSPROF_PROBE_BUDGET_PCT={bad!r}: not a percent in (0, 100]; using 0.5",
    )


def test_probe_defaults_have_one_definition_here() -> None:
    from wsprof.capture import counters

    assert counters.DEFAULT_BUDGET_FRACTION == cfg.DEFAULT_PROBE_BUDGET_FRACTION == 0.005
    assert counters.DEFAULT_BURST_INTERVAL_MS == cfg.DEFAULT_PROBE_INTERVAL_MS


def test_preset_is_a_framework_name() -> None:
    from wsprof import frameworks

    for name in frameworks.NAMES:
        assert _read(PRESET=f" {name.upper()} ").preset == name
    s = _read(PRESET="nemo")
    assert s.preset is None and s.errors == ()
    assert s.warnings == (
        f"WSPROF_PRESET='nemo' is not one of {', '.join(frameworks.NAMES)}; using every "
        "framework's entry points (the default)",
    )


@pytest.mark.parametrize(
    ("var", "field", "default"),
    [
        ("DEVICE_TIME", "device_time", False),
        ("COUNTERS", "counters", True),
        ("NATIVE", "native", True),
        ("QUIET", "quiet", False),
        ("RUN", "run", False),
        ("ALLOW_SHARED_OUT", "allow_shared_out", False),
    ],
)
def test_tuning_flags_and_their_bad_values(var: str, field: str, default: bool) -> None:
    assert getattr(_read(**{var: "1"}), field) is True
    assert getattr(_read(**{var: "no"}), field) is False
    assert getattr(_read(**{var: ""}), field) is default
    s = _read(**{var: "sometimes"})
    assert getattr(s, field) is default
    assert s.warnings == (
        f"WSPROF_{var}='sometimes' is not a yes/no flag; set it to one of "
        f"{FLAG_WORDS} or unset it; using {'yes' if default else 'no'}",
    )
    assert s.errors == ()


def test_every_variable_is_a_field_and_is_tested() -> None:
    """Each ``ENV_*`` name is read into a field, and each appears in this file."""
    names = {v for k, v in vars(cfg).items() if k.startswith("ENV_")}
    assert all(re.fullmatch(r"WSPROF_[A-Z_]+", n) for n in names)
    me = Path(__file__).read_text(encoding="utf-8")
    untested = [n for n in names if n.removeprefix("WSPROF_") not in me]
    assert untested == []


def test_child_env_uses_the_module_names() -> None:
    assert cfg.child_env("/runs/a") == {cfg.ENV_RUN: "1", cfg.ENV_OUT: "/runs/a"}
    assert cfg.child_env("/runs/a", "verl")[cfg.ENV_PRESET] == "verl"
    s = cfg.read(cfg.child_env("/runs/a", "verl"))
    assert (s.run, s.out, s.preset) == (True, "/runs/a", "verl")
    assert cfg.read(cfg.child_env("/runs/a", allow_shared_out=True)).allow_shared_out is True


def test_no_other_module_reads_a_wsprof_variable_from_the_environment() -> None:
    """``os.environ`` / ``getenv`` with a ``WSPROF_`` name only in the settings module."""
    pattern = re.compile(r"(environ(\.get)?|getenv)\s*[\[(]\s*[\"']WSPROF_")
    found = [
        str(p.relative_to(REPO))
        for d in ("wsprof", "hooks")
        for p in (REPO / d).rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_link_gbps_is_a_limit_in_gbytes_per_s() -> None:
    assert _read(LINK_GBPS=" 450 ").link_gbps == 450.0
    s = _read(LINK_GBPS="-1")
    assert s.link_gbps is None and s.warnings == (
        "ignoring WSPROF_LINK_GBPS='-1': not a link limit in GB/s (a finite number > 0); "
        "using the limits read from the machine",
    )
