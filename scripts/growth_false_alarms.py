"""How often :func:`wsprof.analysis.growth.classify` (with ``hold_newest``, as analyze judges)
calls a healthy step time "accumulating": seeded series of a flat level with noise like a
loaded 2-core machine's step times (relative SD 20%, independent or AR(1)-correlated with
rho 0.3-0.6, and a stretch of slower steps), after one slow first step. Prints the rate per
case. Under independent noise the trend test's 5% level bounds the rate (the effect-size
and persistence conditions lower it); correlated noise and a slower stretch raise it.

    python scripts/growth_false_alarms.py [--n 1500] [--seed 7]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from wsprof.analysis.growth import classify, hold_newest


def _ar(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    e = np.zeros(n)
    e[0] = rng.normal()
    for i in range(1, n):
        e[i] = rho * e[i - 1] + np.sqrt(1 - rho**2) * rng.normal()
    return e


def rate(
    rng: np.random.Generator, steps: int, rho: float, sd: float, n: int, stretch: bool
) -> float:
    """Share of ``n`` healthy series of ``steps`` judged steps (plus a slow first one) that
    read as accumulating."""
    hits = 0
    for _ in range(n):
        y = 86.0 * (1 + sd * _ar(rng, steps, rho))
        if stretch:  # the machine is slower for a while (another job, a frequency drop)
            a = int(rng.integers(2, steps - 3))
            b = int(rng.integers(a + 2, steps + 1))
            y[a:b] *= 1 + rng.uniform(0.3, 0.8)
        values = [167.0, *np.maximum(y, 10.0)]
        hits += hold_newest(values, classify(values)).accumulating
    return hits / n


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=1500, help="series per case")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    print(f"{'steps':>5} {'rho':>4} {'sd':>5} {'stretch':>7} {'false alarms':>12}")
    for steps in (11, 19):
        for rho in (0.0, 0.3, 0.6):
            for stretch in (False, True):
                r = rate(rng, steps, rho, 0.2, a.n, stretch)
                print(f"{steps:>5} {rho:>4} {0.2:>5} {stretch!s:>7} {r:>12.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
