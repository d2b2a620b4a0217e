"""The metrics page: gauges per TrainJob from the TrainJob watch and the updates taken
here, the server's own metrics and process metrics, as Prometheus text or OpenMetrics,
whichever the scraper asks for.

Fresh from ingest: a TrainJob whose newest accepted update is still waiting for its
write (``Fresh``: the writer) is exported with that update's figures, not the stored
ones, so a scrape sees a post within one scrape whatever the API budget; once the write
lands (or the writer drops it) the watch's object is exported again. With several
replicas each exports only the TrainJobs it owns (``Ownership``), the ones whose posts
it writes: across replicas every TrainJob has exactly one series of each name, the
freshest.

The TrainJob gauges are never pushed or set: a cache listener keeps, per TrainJob, the
series ``series.series_of`` decides, and a scrape renders what is there at that moment.
A deleted TrainJob, or a metric it no longer reports, is gone from the next scrape.
Each TrainJob exports ``max_names`` distinct metric names at most over its life
(``series.admit``); the exporter remembers the names it let a TrainJob export until the
TrainJob is deleted.

Rendering: prometheus_client's generic renderer builds and formats every sample at every
scrape, which a page of a hundred thousand TrainJob series cannot afford, so each
TrainJob's sample lines are rendered once, when its watch event arrives, and a scrape
joins them (figures and the command that measures them: docs/scaling.md, "The metrics
page"). That joined part is kept until a TrainJob changes and shared by every scrape
meanwhile, and a scrape is written in pieces of ``WRITE_PIECE`` bytes, each sent before
the next is taken: a scraper that stops reading holds a reference to the shared page and
one piece, not a copy of the page (``listener.py`` closes it after the write timeout).
The server's own metrics go through prometheus_client as usual, and
``collector`` offers the same TrainJob series as a regular prometheus_client collector;
a test holds the two paths to the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics import MetricWrapperBase

from ..kube.cache import WatchCache
from ..kube.resources import Key, Obj, key_of
from ..kube.store import CacheEvent
from . import selfmetrics
from .requeststats import RequestStats
from .series import (
    FAMILIES,
    METRIC,
    NONE_REFUSED,
    NONE_SKIPPED,
    TrainJobSeries,
    admit,
    allowance,
    newly_skipped,
    parse_time,
    series_of,
)

DEFAULT_MAX_SERIES = 100_000
"""Default of ``--max-exported-series``: the state and core series of 10,000 TrainJobs fit
(7 each for one with three conditions, at most 12); beyond it the user metrics are
dropped first."""
DEFAULT_MAX_NAMES = 512
"""Default of ``--max-metric-names-per-trainjob``: twice the metrics one status may hold
(the CRD's limit), so a job may rename every metric of a full list once."""

OPENMETRICS = "application/openmetrics-text"
WRITE_PIECE = 64 * 1024
"""Bytes of the page handed to the connection at a time: aiohttp sends them (or waits
for the client to read) before taking the next."""
_EOF = b"# EOF\n"
_INDEX = {family.name: i for i, family in enumerate(FAMILIES)}
_METRIC_INDEX = _INDEX[METRIC]
_NO_REFUSALS: frozenset[tuple[str, str]] = frozenset()
_HEADERS = tuple(f"# HELP {f.name} {f.help}\n# TYPE {f.name} gauge\n".encode() for f in FAMILIES)


def server_registry() -> CollectorRegistry:
    """A registry of its own for one server: process, platform and GC metrics and every
    metric in ``selfmetrics``.

    The self-metrics are module-level objects registered in prometheus_client's default
    registry too; a metric may sit in several registries, so each server's page shows
    them without touching global state (their values are per process, which in
    production is one server).
    """
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    for metric in vars(selfmetrics).values():
        if isinstance(metric, MetricWrapperBase | RequestStats):
            registry.register(metric)
    return registry


@dataclass(frozen=True, slots=True)
class Page:
    """One scrape's answer: its pieces in order (the TrainJob part is one of them, the
    same object for every scrape until a TrainJob changes) and its Content-Type."""

    pieces: tuple[bytes, ...]
    content_type: str

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


def encode(registry: CollectorRegistry, accept: str | None, tail: bytes = b"") -> Page:
    """``registry`` in the format ``accept`` asks for (Prometheus text by default), with
    ``tail`` (sample families already rendered) after it, before OpenMetrics' ``# EOF``."""
    encoder, content_type = choose_encoder(accept or "")
    body = encoder(registry)
    if not content_type.startswith(OPENMETRICS):
        return Page((body, tail), content_type)
    if not body.endswith(_EOF):
        raise ValueError("OpenMetrics exposition without # EOF")
    return Page((body[: -len(_EOF)], tail, _EOF), content_type)


# -- one TrainJob, rendered ---------------------------------------------------------------


def escape_label_value(text: str) -> str:
    """A label value as both text formats quote it."""
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def format_value(value: float) -> str:
    """A finite sample value as prometheus_client writes it (Go's exponent rule)."""
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _first_lines(joined: bytes, count: int) -> list[bytes]:
    # On the line feed alone, the one line end of both formats: bytes.splitlines would
    # also split at a carriage return, and cut a line in two.
    pieces = joined.split(b"\n", count)
    # The last piece is what follows the last line end taken: the rest, or nothing.
    return [line + b"\n" for line in pieces[: len(pieces) - 1]]


@dataclass(frozen=True, slots=True)
class RenderedSeries:
    """A TrainJob's sample lines (labels sorted, as prometheus_client writes them, so the
    two rendering paths agree byte for byte), what it skipped, and the metric names it
    was let export (``names`` now, ``retired`` before and no longer reported).

    Only the lines are kept, not the figures they were rendered from: a scrape needs
    nothing else, and the collector reads the figures from the TrainJob cache.
    """

    core_families: bytes  # the family index of each core line, in line order
    core_joined: bytes  # the state lines then the core lines, each ending in a newline
    metrics_joined: bytes  # the metric lines, each ending in a newline, in series order
    metric_count: int
    skipped: frozenset[tuple[str, str]]
    names: tuple[str, ...] = ()
    retired: frozenset[str] = NONE_REFUSED
    refused: frozenset[tuple[str, str]] = _NO_REFUSALS  # (reason, name), as counted

    @property
    def held(self) -> frozenset[str]:
        """Every name this TrainJob was let export so far."""
        return self.retired.union(self.names)

    @property
    def core_count(self) -> int:
        return len(self.core_families)

    @property
    def count(self) -> int:
        """Series this TrainJob yields."""
        return len(self.core_families) + self.metric_count

    def core_lines(self, count: int) -> list[tuple[int, bytes]]:
        """(family index, line) of the first ``count`` core lines."""
        lines = _first_lines(self.core_joined, count)
        return list(zip(self.core_families, lines, strict=False))

    def metric_lines(self, count: int) -> list[bytes]:
        """The first ``count`` metric lines (only a capped scrape needs them apart; no
        line holds a raw line feed, label values escape it)."""
        return _first_lines(self.metrics_joined, count)

    @classmethod
    def of(
        cls,
        series: TrainJobSeries,
        retired: frozenset[str] = NONE_REFUSED,
        refused: frozenset[tuple[str, str]] = _NO_REFUSALS,
    ) -> RenderedSeries:
        labels = (
            f'namespace="{escape_label_value(series.namespace)}",'
            f'trainjob="{escape_label_value(series.trainjob)}"'
        )
        state = "".join(
            f"{family}{{{_state_labels(series, more)}}} 1.0\n" for family, more in series.state
        )
        core = state + "".join(
            f"{family}{{{labels}}} {format_value(value)}\n" for family, value in series.core
        )
        metrics = "".join(
            f'{METRIC}{{name="{escape_label_value(name)}",{labels}}} {format_value(value)}\n'
            for name, value in series.metrics
        )
        return cls(
            core_families=bytes(_INDEX[family] for family, _ in (*series.state, *series.core)),
            core_joined=core.encode(),
            metrics_joined=metrics.encode(),
            metric_count=len(series.metrics),
            skipped=series.skipped,
            names=tuple(name for name, _ in series.metrics),
            retired=retired,
            refused=refused,
        )


def _state_labels(series: TrainJobSeries, more: tuple[tuple[str, str], ...]) -> str:
    pairs = sorted((("namespace", series.namespace), ("trainjob", series.trainjob), *more))
    return ",".join(f'{label}="{escape_label_value(value)}"' for label, value in pairs)


def exposition(selection: Iterable[tuple[RenderedSeries, int, int]]) -> bytes:
    """The per-TrainJob families (HELP, TYPE, samples; the same text in both formats)
    from (TrainJob, core series kept, metric series kept); the state series count as
    core series."""
    lines: list[list[bytes]] = [[] for _ in FAMILIES]
    for rendered, core, metrics in selection:
        for index, line in rendered.core_lines(core):
            lines[index].append(line)
        if metrics == rendered.metric_count:
            lines[_METRIC_INDEX].append(rendered.metrics_joined)
        else:
            lines[_METRIC_INDEX].extend(rendered.metric_lines(metrics))
    return b"".join(header + b"".join(part) for header, part in zip(_HEADERS, lines, strict=True))


# -- the exporter ---------------------------------------------------------------------------


class Accepted(Protocol):
    """An accepted update: ``status.validation.EncodedStatus``."""

    @property
    def json(self) -> bytes:
        """Its ``trainerStatus`` as JSON."""
        ...


class Fresh(Protocol):
    """What was accepted for a TrainJob and is not stored yet: ``status.writer``."""

    def newest(self, key: Key) -> Accepted | None:
        """``key``'s newest accepted update still held for its write, or None."""
        ...


class Ownership(Protocol):
    """Which TrainJobs this replica exports: ``peers.replicas.Replicas``."""

    @property
    def version(self) -> int:
        """Changes whenever ``owns`` may answer differently."""
        ...

    def owns(self, key: Key) -> bool: ...


def _stamp(trainer: object) -> float | None:
    text = trainer.get("lastUpdatedTime") if isinstance(trainer, dict) else None
    return parse_time(text) if isinstance(text, str) else None


def overlaid(obj: Obj, trainer_status: bytes) -> Obj:
    """``obj`` (a TrainJob view) with ``trainer_status`` (an accepted update's JSON) in
    place of its ``status.trainerStatus``, unless what is stored is as new or newer."""
    status = obj.get("status")
    status = dict(status) if isinstance(status, dict) else {}
    accepted = json.loads(trainer_status)
    stored, fresh = _stamp(status.get("trainerStatus")), _stamp(accepted)
    if fresh is None or (stored is not None and stored >= fresh):
        return obj
    status["trainerStatus"] = accepted
    return {**obj, "status": status}


class Exporter:
    """The metrics of one server: ``start()`` after the TrainJob cache has started,
    ``render()`` (or ``handle`` as the aiohttp route) per scrape, ``stop()`` on shutdown.

    ``max_series`` caps the per-TrainJob series of a scrape (0: no cap); what is over it
    is counted in ``trainjob_status_exported_series_dropped_total`` at every scrape that
    leaves it out, so the counter rises for as long as the cap bites. ``max_names``
    bounds the distinct metric names one TrainJob exports over its life (0: no bound);
    refused names are counted in ``trainjob_status_metric_names_refused_total``.
    ``caches`` are other list+watch caches whose size is exported beside the TrainJob
    cache's.
    """

    def __init__(
        self,
        trainjobs: WatchCache,
        *,
        max_series: int = DEFAULT_MAX_SERIES,
        max_names: int = DEFAULT_MAX_NAMES,
        registry: CollectorRegistry | None = None,
        caches: Sequence[WatchCache] = (),
    ) -> None:
        if max_series < 0:
            raise ValueError("max_series must be >= 0")
        if max_names < 0:
            raise ValueError("max_names must be >= 0")
        self.trainjobs = trainjobs
        self._max_series = max_series
        self.max_names = max_names
        self.registry = server_registry() if registry is None else registry
        self.caches = [trainjobs, *caches]
        self.collector = TrainJobCollector(self)
        self._rendered: dict[Key, RenderedSeries] = {}
        self._total = 0
        self._listening = False
        # The TrainJob part of the page and the series its cap dropped, until a change
        # (and the ownership version it was joined at).
        self._joined: tuple[bytes, int, int] | None = None
        self.fresh: Fresh | None = None
        self.ownership: Ownership | None = None
        # TrainJobs whose accepted update changed since they were last rendered.
        self._touched: set[Key] = set()

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Follow the TrainJob cache: what it holds now, then every change."""
        if self._listening:
            return
        self.trainjobs.add_listener(self._on_event)
        self._listening = True
        for obj in self.trainjobs.list():
            self._update(key_of(obj), obj)

    def stop(self) -> None:
        """Stop following the cache and forget its series."""
        if self._listening:
            self.trainjobs.remove_listener(self._on_event)
            self._listening = False
        self._rendered.clear()
        self._total = 0
        self._joined = None

    def add_cache(self, cache: WatchCache) -> None:
        """Export ``cache``'s size too (a cache built after the exporter, such as the
        token authenticator's pod cache)."""
        if cache not in self.caches:
            self.caches.append(cache)

    # -- state ------------------------------------------------------------------------------

    @property
    def max_series(self) -> int:
        """The cap on per-TrainJob series of a scrape (0: none)."""
        return self._max_series

    @max_series.setter
    def max_series(self, value: int) -> None:
        self._max_series = value
        self._joined = None

    @property
    def series_count(self) -> int:
        """Per-TrainJob series there are now, before the cap."""
        return self._total

    def _on_event(self, event: CacheEvent) -> None:
        self._touched.discard(event.key)
        self._update(event.key, self.view(event.key, event.new))

    def touch(self, key: Key) -> None:
        """``key``'s accepted update changed (taken, written, dropped): rendered again at
        the next scrape."""
        self._touched.add(key)
        self._joined = None

    def view(self, key: Key, obj: Obj | None = None) -> Obj | None:
        """What ``key`` is exported from: the cache's object (``obj``, or the cache's
        own), with the newest update accepted and not yet written in place of its
        ``trainerStatus`` where that update is newer than the stored one."""
        held = obj if obj is not None else self.trainjobs.get(*key)
        if held is None or self.fresh is None:
            return held
        accepted = self.fresh.newest(key)
        return held if accepted is None else overlaid(held, accepted.json)

    def _render_touched(self) -> None:
        while self._touched:
            key = self._touched.pop()
            self._update(key, self.view(key))

    def _update(self, key: Key, obj: Obj | None) -> None:
        self._joined = None
        new = series_of(obj) if obj is not None else None
        old = self._rendered.pop(key, None)
        if old is not None:
            self._total -= old.count
        if new is not None:
            skipped = newly_skipped(NONE_SKIPPED if old is None else old.skipped, new.skipped)
            if skipped:
                selfmetrics.METRIC_VALUES_SKIPPED.inc(skipped)
            rendered = self._admitted(new, old)
            self._rendered[key] = rendered
            self._total += rendered.count

    def _admitted(self, series: TrainJobSeries, old: RenderedSeries | None) -> RenderedSeries:
        """``series`` rendered with only the metric names its TrainJob may export; counts
        the names refused that its previous version did not already refuse."""
        names = tuple(name for name, _ in series.metrics)
        over = NONE_REFUSED
        if old is not None and names == old.names:
            # The names of the last version again, the common case: all held already.
            retired = old.retired
        elif old is None and (self.max_names == 0 or len(names) <= self.max_names):
            retired = NONE_REFUSED
        else:
            held = NONE_REFUSED if old is None else old.held
            names, over = admit(names, held, self.max_names)
            if over:
                kept = tuple(m for m in series.metrics if m[0] not in over)
                series = replace(series, metrics=kept)
            # Usually empty (a job keeps its names): then shared, not one set per TrainJob.
            retired = held.difference(names) or NONE_REFUSED
        refused = _NO_REFUSALS
        if over or series.unexportable:
            refused = frozenset(
                [("limit", name) for name in over]
                + [("characters", name) for name in series.unexportable]
            )
            for reason, _ in refused - (_NO_REFUSALS if old is None else old.refused):
                selfmetrics.METRIC_NAMES_REFUSED.labels(reason).inc()
        return RenderedSeries.of(series, retired, refused)

    def selection(self) -> Iterator[tuple[Key, RenderedSeries, int, int]]:
        """(TrainJob, its lines, core series kept, metric series kept) for one scrape;
        counts what the cap drops."""
        kept, dropped = self._selected()
        selfmetrics.EXPORTED_SERIES_DROPPED.inc(dropped)
        return iter(kept)

    def _selected(self) -> tuple[list[tuple[Key, RenderedSeries, int, int]], int]:
        """What the cap keeps of each TrainJob this replica exports, and how many series
        it drops."""
        self._render_touched()
        owned = self._owned()
        total = self._total if owned is None else sum(r.count for _, r in owned)
        rendered = self._rendered.items() if owned is None else owned
        if self.max_series == 0 or total <= self.max_series:
            everything = [(k, r, r.core_count, r.metric_count) for k, r in rendered]
            return everything, 0
        # Over the cap: a stable order, so the same series stay exported scrape after
        # scrape instead of flapping with the cache's insertion order, and a fair share
        # per namespace, so no tenant's series go for another's.
        ordered = sorted(rendered)
        kept, dropped = allowance(
            [(r.core_count, r.metric_count) for _, r in ordered],
            self.max_series,
            [key[0] for key, _ in ordered],
        )
        chosen = [
            (key, rendered, core, metrics)
            for (key, rendered), (core, metrics) in zip(ordered, kept, strict=True)
        ]
        return chosen, dropped

    def _owned(self) -> list[tuple[Key, RenderedSeries]] | None:
        """The rendered TrainJobs this replica owns; None: all of them."""
        ownership = self.ownership
        if ownership is None:
            return None
        return [(k, r) for k, r in self._rendered.items() if ownership.owns(k)]

    # -- rendering --------------------------------------------------------------------------

    def trainjob_exposition(self) -> bytes:
        """The per-TrainJob families of one scrape, as sample text: joined again only
        after a TrainJob changed (or which TrainJobs this replica owns), the same bytes
        for every scrape until then."""
        version = 0 if self.ownership is None else self.ownership.version
        if self._joined is None or self._joined[2] != version:
            kept, dropped = self._selected()
            joined = exposition((r, core, metrics) for _, r, core, metrics in kept)
            self._joined = (joined, dropped, version)
        joined, dropped, _ = self._joined
        selfmetrics.EXPORTED_SERIES_DROPPED.inc(dropped)
        return joined

    def page(self, accept: str | None = None) -> Page:
        """The whole page for a scraper's Accept header."""
        for cache in self.caches:
            selfmetrics.CACHE_OBJECTS.labels(cache.resource.plural).set(len(cache))
        # Before the registry is encoded, so this scrape's drops are in this page.
        tail = self.trainjob_exposition()
        return encode(self.registry, accept, tail)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The whole page joined: (body, Content-Type)."""
        page = self.page(accept)
        return page.body, page.content_type

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """``GET /metrics``: compressed when the scraper accepts it (Prometheus does; the
        page shrinks some 15 times), written a piece at a time."""
        page = self.page(request.headers.get("Accept"))
        response = web.StreamResponse(headers={"Content-Type": page.content_type})
        # Said when sent as it is; compressed, the length is unknown until the end.
        response.content_length = sum(len(piece) for piece in page.pieces)
        response.enable_compression()
        await response.prepare(request)
        try:
            for piece in page.pieces:
                view = memoryview(piece)
                for start in range(0, len(view), WRITE_PIECE):
                    await response.write(view[start : start + WRITE_PIECE])
        except ConnectionError:
            # Closed under the answer (a scraper that stopped reading, after the write
            # timeout): nothing more to send, nothing to report.
            return response
        await response.write_eof()
        return response


class TrainJobCollector:
    """The exporter's TrainJob series as a prometheus_client collector (same selection,
    same cap), for code that renders or inspects a registry the generic way."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(f.name, f.help, labels=f.labels) for f in FAMILIES]

    def collect(self) -> Iterable[Metric]:
        families = [GaugeMetricFamily(f.name, f.help, labels=f.labels) for f in FAMILIES]
        for key, rendered, core, metrics in self.exporter.selection():
            # What the lines were rendered from (the cache's object, and the update
            # accepted since): rendered again on each change, so the two never disagree.
            held = self.exporter.view(key)
            series = series_of(held) if held is not None else None
            if series is None:
                continue
            allowed = set(rendered.names)
            admitted = [(name, value) for name, value in series.metrics if name in allowed]
            base = (("namespace", series.namespace), ("trainjob", series.trainjob))
            samples = [
                *((family, dict((*base, *more)), 1.0) for family, more in series.state),
                *((family, dict(base), value) for family, value in series.core),
            ]
            for family, held_labels, value in samples[:core]:
                index = _INDEX[family]
                values = [held_labels[label] for label in FAMILIES[index].labels]
                families[index].add_metric(values, value)
            for name, value in admitted[:metrics]:
                families[_METRIC_INDEX].add_metric([series.namespace, series.trainjob, name], value)
        return families
