"""The ingest bench's figures: a row per run, the table and the closing report."""

from __future__ import annotations

import math
from dataclasses import dataclass

from _harness import WrkResult, percentile

from .objects import Scenario


@dataclass
class Row:
    config: str
    scenario: Scenario
    load: str
    offered: float | None
    wrk: WrkResult
    cpu: float  # server cores busy
    writes: int
    other_api: int
    fresh: list[float]
    settle: float
    hist_p50: float = math.nan
    hist_p99: float = math.nan
    log_bytes: int = 0

    @property
    def posts(self) -> float:
        return self.wrk.accepted_per_s

    @property
    def cpu_us(self) -> float:
        return self.cpu * self.wrk.seconds / max(1, self.wrk.accepted) * 1e6

    @property
    def writes_per_s(self) -> float:
        return self.writes / self.wrk.seconds

    @property
    def writes_per_post(self) -> float:
        return self.writes / max(1, self.wrk.accepted)

    def fresh_at(self, q: float) -> float:
        return percentile(self.fresh, q)

    @property
    def visible_share(self) -> float:
        return sum(1 for v in self.fresh if math.isfinite(v)) / max(1, len(self.fresh))


def seconds_text(value: float, settle: float) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return f">{settle:.0f}s"
    return f"{value:.2f}s" if value < 100 else f"{value:.0f}s"


HEADER = (
    f"{'config':<20} {'scenario':<19} {'load':<14} {'posts/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
    f"{'bad':>5} {'CPU':>5} {'us/post':>7} {'writes/s':>8} {'wr/post':>9} {'other':>6} "
    f"{'fresh p50':>9} {'fresh p99':>9} {'visible':>7} {'srv hist p50/p99':>17}"
)


def row_text(row: Row) -> str:
    load = "saturate" if row.offered is None else f"paced {row.offered:,.0f}/s"
    bad = row.wrk.non2xx + sum(row.wrk.errors.values())
    hist = (
        f"{seconds_text(row.hist_p50, row.settle)}/{seconds_text(row.hist_p99, row.settle)}"
        if not math.isnan(row.hist_p50)
        else "-"
    )
    return (
        f"{row.config:<20} {row.scenario.label:<19} {load:<14} {row.posts:>8,.0f} "
        f"{row.wrk.p50_ms:>8.1f} {row.wrk.p99_ms:>8.1f} {bad:>5} {row.cpu:>5.2f} "
        f"{row.cpu_us:>7.0f} {row.writes_per_s:>8.2f} {row.writes_per_post:>9.5f} "
        f"{row.other_api / row.wrk.seconds:>6.1f} "
        f"{seconds_text(row.fresh_at(0.5), row.settle):>9} "
        f"{seconds_text(row.fresh_at(0.99), row.settle):>9} {row.visible_share:>7.1%} {hist:>17}"
    )


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def find(rows: list[Row], config: str, scenario: str, load: str) -> Row | None:
    for row in rows:
        if row.config == config and row.scenario.name == scenario and row.load == load:
            return row
    return None


def ratio(a: float, b: float) -> str:
    if b == 0 or math.isnan(a) or math.isnan(b):
        return "-"
    if math.isinf(a) or math.isinf(b):
        return "-" if math.isinf(a) and math.isinf(b) else ("inf" if math.isinf(a) else "0")
    return f"{a / b:,.3g}"


def report(
    rows: list[Row],
    sized: str,
    ceiling: tuple[float, float],
    rss: tuple[int, int, int],
    scenarios: tuple[list[Scenario], Scenario],
    per_connection: float,
    sizes: str,
) -> None:
    """``rss``: the server's with 0 TrainJobs tracked, after the ``small`` scenarios and
    after ``many`` as well (``scenarios`` = (small, many))."""
    ceiling_rate, ceiling_us = ceiling
    rss_empty, rss_small, rss_many = rss
    small, many = scenarios
    small_jobs = sum(s.trainjobs for s in small)
    small_pods = sum(s.total_pods for s in small)
    all_jobs, all_pods = small_jobs + many.trainjobs, small_pods + many.total_pods
    marginal = (rss_many - rss_small) / many.trainjobs
    overall = (rss_many - rss_empty) / all_jobs
    print()
    print("columns: posts/s accepted (2xx); p50/p99 latency from wrk; bad = non-2xx + socket")
    print("errors; CPU = server cores busy; us/post = server CPU per accepted post; writes/s and")
    print("wr/post = PATCHes of trainjobs/status the devcluster served in the window; other =")
    print("GETs+LISTs/s to the API; fresh = post sent -> a status at least as new visible through")
    print("a watch (>Ns: not visible N s after the window); srv hist = the server's own histogram")
    print()
    print(
        f"memory (ours, VmRSS): 0 TrainJobs tracked {mib(rss_empty)}; {small_jobs:,} TrainJobs / "
        f"{small_pods:,} pods {mib(rss_small)}; {all_jobs:,} TrainJobs / {all_pods:,} pods "
        f"{mib(rss_many)}"
    )
    print(
        f"  per TrainJob (1 pod, 1 token, 1 service account each): {marginal:.2f} KiB marginal "
        f"({many.trainjobs:,} added), {overall:.2f} KiB all-in from 0 tracked; per open TLS connection "
        f"{per_connection:.1f} KiB"
    )
    print(f"  Python heap per cached object: {sizes}")
    print()
    print("capacity (ours, saturate):")
    for row in rows:
        if row.config == "ours" and row.load == "saturate":
            print(
                f"  {row.scenario.label:<19} {row.posts:>7,.0f} posts/s "
                f"({row.posts / ceiling_rate:.2f} of the ceiling's {ceiling_rate:,.0f}); "
                f"{row.cpu_us:.0f} us CPU/post ({ceiling_us / row.cpu_us:.2f} of the ceiling's "
                f"speed) = {1e6 / row.cpu_us:,.0f} posts/s per fully busy core; "
                f"server log {row.log_bytes / max(1, row.wrk.accepted):.0f} B/post"
            )
    print()
    print("ours / baseline at the same offered load (each pod posts every 5 s), same budget:")
    for name in dict.fromkeys(row.scenario.name for row in rows):
        ours, base = (
            find(rows, "ours", name, "paced"),
            find(rows, "baseline (direct)", name, "paced"),
        )
        if ours is None or base is None:
            continue
        fresh = [seconds_text(r.fresh_at(q), r.settle) for q in (0.5, 0.99) for r in (ours, base)]
        print(
            f"  {ours.scenario.label:<19} posts/s x{ratio(ours.posts, base.posts)}; "
            f"writes/post x{ratio(ours.writes_per_post, base.writes_per_post)}; "
            f"writes/s x{ratio(ours.writes_per_s, base.writes_per_s)}; "
            f"latency p50 x{ratio(ours.wrk.p50_ms, base.wrk.p50_ms)}, "
            f"p99 x{ratio(ours.wrk.p99_ms, base.wrk.p99_ms)}; "
            f"freshness p50 {fresh[0]} vs {fresh[1]}, p99 {fresh[2]} vs {fresh[3]}"
        )
    print(
        "  (wrk's connections cap the baseline's queue, so its latency and freshness; "
        "real pods would each hold a post in it)"
    )
    print()
    print("targets:")
    saturated = [r for r in rows if r.config == "ours" and r.load == "saturate"]
    worst = min(saturated, key=lambda r: r.posts)
    best_core = min(1e6 / r.cpu_us for r in saturated)
    print(
        f"  [{'x' if worst.posts >= 3000 else ' '}] >= 3,000 accepted posts/s per core, HTTPS, "
        f"real tokens: {worst.posts:,.0f} at worst ({worst.scenario.label}); by CPU per post "
        f"{best_core:,.0f}/s per fully busy core at worst"
    )
    one = find(rows, "ours", "1", "paced")
    if one is not None:
        print(
            f"  [{'x' if one.writes_per_s <= 1.0 else ' '}] {one.posts:,.0f} posts/s for one "
            f"TrainJob -> {one.writes_per_s:.2f} writes/s (<= 1)"
        )
    within = [r for r in (one, find(rows, sized, "100", "paced")) if r]
    for row in within:
        p99 = row.fresh_at(0.99)
        print(
            f"  [{'x' if p99 <= 2.0 else ' '}] freshness p99 within budget ({row.config}, "
            f"{row.scenario.label}, {row.writes_per_s:.1f} writes/s): "
            f"{seconds_text(p99, row.settle)} (<= 2 s)"
        )
    print(
        f"  [{'x' if marginal <= 4.0 else ' '}] RSS per tracked TrainJob at {many.trainjobs:,}: "
        f"{marginal:.2f} KiB marginal, {overall:.2f} KiB all-in (<= 4 KiB)"
    )
