"""How often a flaky defect showed: k of N runs, with the interval that k/N supports.

The seed saw D3 in one run of three; kvdiag runs such an entry N times. "0/10" alone
invites the reading "it does not happen"; what ten clean runs actually exclude is a
rate above about 28 % (the 95 % Wilson upper bound). Every multi-run verdict carries
that interval, and a before/after comparison (``kvdiag verify`` on a flaky entry) says
whether two rates differ with Fisher's exact test rather than by eye.

Wilson's score interval was chosen over Clopper–Pearson because it is not needlessly
wide at k = 0 and k = N, where these runs live, and still never leaves [0, 1]; both are
standard (Brown, Cai and DasGupta, 2001, recommend Wilson for small N).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb, sqrt

Z_95 = 1.959963984540054        # the two-sided 95 % normal quantile


@dataclass(frozen=True)
class Rate:
    """k of n judged runs showed the defect (inconclusive runs are not counted in n)."""

    k: int
    n: int

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.k, self.n)

    @property
    def text(self) -> str:
        low, high = self.interval
        return f"{self.k}/{self.n} runs (95% Wilson interval {_pct(low)}–{_pct(high)})"

    @property
    def short(self) -> str:
        """k/n and the 95 % interval, for a table cell: ``0/10 (0%–28%)``."""
        low, high = self.interval
        return f"{self.k}/{self.n} ({_pct(low)}–{_pct(high)})"

    @property
    def excludes(self) -> str:
        """What the runs rule out, in words ("a rate above 28%" for 0/10)."""
        low, high = self.interval
        parts = []
        if high < 1:
            parts.append(f"a rate above {_pct(high)}")
        if low > 0:
            parts.append(f"a rate below {_pct(low)}")
        return " and ".join(parts) or "no rate"

    def to_dict(self) -> dict:
        low, high = self.interval
        return {"k": self.k, "n": self.n, "low": round(low, 4), "high": round(high, 4), "method": "wilson-95"}


def wilson_interval(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval for k successes in n trials; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError(f"k must lie in [0, n] (got k={k}, n={n})")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half) if k else 0.0, min(1.0, centre + half) if k < n else 1.0


def fisher_exact_two_sided(k1: int, n1: int, k2: int, n2: int) -> float:
    """The two-sided p-value of Fisher's exact test for k1/n1 against k2/n2 (the sum of the
    probabilities of every table with the same margins no more likely than the one seen)."""
    total_k, total_n = k1 + k2, n1 + n2
    denom = comb(total_n, total_k)

    def prob(a: int) -> float:
        return comb(n1, a) * comb(n2, total_k - a) / denom

    seen = prob(k1)
    lo, hi = max(0, total_k - n2), min(n1, total_k)
    p = sum(pa for a in range(lo, hi + 1) if (pa := prob(a)) <= seen * (1 + 1e-9))
    return min(1.0, p)


def _pct(x: float) -> str:
    value = 100 * x
    return f"{value:.0f}%" if value >= 10 or value == 0 else f"{value:.1f}%"
