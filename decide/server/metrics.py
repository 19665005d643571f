"""Observability: Prometheus metrics (`GET /metrics`) and one structured access-log line per request.

Each app has its own registry, so tests can build many apps in one process. Values that live
elsewhere (queue depth, prefix cache, MLX memory) are read when /metrics is scraped.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .engine import Engine, EngineObserver, Job

access_log = logging.getLogger("decide.access")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


class Metrics(EngineObserver):
    """The app's metrics; also the engine's observer (batches, drops, refusals)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)  # process_resident_memory_bytes and friends
        self.requests = Counter("decide_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.latency = Histogram(
            "decide_request_duration_seconds", "HTTP request latency", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.queue_wait = Histogram(
            "decide_queue_wait_seconds", "Time a request waited for the engine", buckets=LATENCY_BUCKETS, registry=r
        )
        self.compute = Histogram(
            "decide_batch_compute_seconds", "decide_batch time per batch", buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch_size = Histogram("decide_batch_requests", "Requests per batch", buckets=BATCH_BUCKETS, registry=r)
        self.batch_questions = Histogram(
            "decide_batch_questions", "Questions per batch", buckets=(*BATCH_BUCKETS, 128, 256, 400), registry=r
        )
        self.tokens = Counter(
            "decide_tokens",
            "Tokens of answered requests: input (as usage counts them), computed by the model, "
            "cached (reused from the prefix cache), cache_write (stored in it)",
            ["kind"],
            registry=r,
        )
        self.refusals = Counter("decide_rejected", "Requests refused at admission", ["reason"], registry=r)
        self.drops = Counter("decide_dropped", "Queued requests dropped before they ran", ["reason"], registry=r)
        self.followed_requests = Counter(
            "decide_followed",
            "Requests answered by the computation of an equal request already queued or running (retries)",
            registry=r,
        )

    def watch(self, engine: Engine) -> None:
        self.registry.register(_EngineCollector(engine))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------ HTTP side

    def request_done(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    # ------------------------------------------------------------ engine observer

    def rejected(self, reason: str) -> None:
        self.refusals.labels(reason).inc()

    def dropped(self, job: Job, reason: str) -> None:
        self.drops.labels(reason).inc()
        self.queue_wait.observe(job.queue_seconds)

    def followed(self, job: Job) -> None:
        self.followed_requests.inc()

    def batch(self, jobs: list[Job], seconds: float) -> None:
        self.compute.observe(seconds)
        self.batch_size.observe(len(jobs))
        self.batch_questions.observe(sum(j.work.questions for j in jobs))
        for job in jobs:
            self.queue_wait.observe(job.queue_seconds)
            usage = getattr(job.outcome, "usage", None)
            if usage is not None:
                for kind in ("input", "computed", "cached", "cache_write"):
                    self.tokens.labels(kind).inc(getattr(usage, f"{kind}_tokens"))


class _EngineCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        yield _gauge("decide_queue_depth", "Requests waiting for the engine", e.queue_depth)
        yield _gauge(
            "decide_running", "Requests taken from the queue: being decided, or waiting for examples", e.running
        )
        yield _gauge("decide_queue_limit", "Requests allowed to wait (DECIDE_MAX_PENDING)", e.options.max_pending)
        yield _gauge("decide_model_ready", "1 once the model is loaded", 1 if e.phase == "ready" else 0)
        yield _gauge(
            "decide_examples_to_write", "New questions whose examples the model is writing", e.examples_to_write
        )
        yield _gauge(
            "decide_waiting_for_examples", "Requests waiting for their questions' examples", e.waiting_for_examples
        )
        yield from _model_info(e.decider)
        yield from _prefix_cache(e.decider)
        yield from _mlx_memory()


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _model_info(decider: Any) -> Iterator[Metric]:
    info = getattr(decider, "info", None)
    if not isinstance(info, dict):
        return
    labels = {k: str(info.get(k, "")) for k in ("model", "device", "precision", "backend", "scorer")}
    family = GaugeMetricFamily("decide_model_info", "The model that serves and how it runs", labels=list(labels))
    family.add_metric(list(labels.values()), 1)
    yield family


def _prefix_cache(decider: Any) -> Iterator[Metric]:
    cache = getattr(getattr(decider, "trie", None), "cache", None)
    stats = getattr(cache, "stats", None)
    if not isinstance(stats, dict):
        return
    lookups, hits = stats.get("lookups", 0), stats.get("hits", 0)
    yield _gauge("decide_prefix_cache_bytes", "Bytes of K/V held by the prefix cache", stats.get("bytes", 0))
    yield _gauge("decide_prefix_cache_budget_bytes", "Prefix-cache budget", getattr(cache, "budget", 0))
    yield _gauge("decide_prefix_cache_entries", "Prefixes held by the prefix cache", stats.get("entries", 0))
    yield _gauge("decide_prefix_cache_hit_ratio", "Prefix-cache hits / lookups", hits / lookups if lookups else 0.0)
    yield CounterMetricFamily("decide_prefix_cache_lookups", "Prefix-cache lookups", value=lookups)
    yield CounterMetricFamily("decide_prefix_cache_hits", "Prefix-cache lookups that reused a prefix", value=hits)


def _mlx_memory() -> Iterator[Metric]:
    mx = sys.modules.get("mlx.core")
    if mx is None:
        return
    yield _gauge("decide_mlx_active_bytes", "MLX memory in live arrays", mx.get_active_memory())
    yield _gauge("decide_mlx_cache_bytes", "MLX buffer cache (capped by DECIDE_MLX_CACHE_BYTES)", mx.get_cache_memory())
    yield _gauge("decide_mlx_peak_bytes", "MLX peak memory", mx.get_peak_memory())


def log_access(record: dict[str, Any]) -> None:
    """One JSON line per request on the `decide.access` logger. Holds no header and no body."""
    if access_log.isEnabledFor(logging.INFO):
        access_log.info(json.dumps(record, separators=(",", ":"), ensure_ascii=False))
