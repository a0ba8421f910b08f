"""Prometheus metrics of an `Engine` (or a lease `Coordinator`): a `prometheus_client`
collector, and ready metrics routes for ASGI and WSGI servers.

The figures are the engine's (`Engine.metrics`), named once in the core for every front door:
`velvet_rope_room_active_users{room="shop"}`, `velvet_rope_room_admissions_total{kind=...}`,
`velvet_rope_room_wait_seconds` (a histogram) and the rest. An engine on a shared-memory file
(`Engine(..., shared_memory=path)`, as under gunicorn or uvicorn with several workers) reads
the host's counters, so every worker reports the same host-wide figures (the rule and
dry-run tallies included): scrape any one of them, and the host is counted once.

With `prometheus_client` (`pip install velvet_rope[prometheus]`)::

    from prometheus_client import REGISTRY
    from velvet_rope.prometheus import register
    register(engine)                      # beside the process's own metrics

Under gunicorn, `prometheus_client`'s multiprocess mode gathers the workers' own metrics from
`PROMETHEUS_MULTIPROC_DIR`; add the engine's collector to the same registry (the engine's
figures are already the host's, so they are not summed over workers)::

    from prometheus_client import CollectorRegistry, multiprocess
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    register(engine, registry)
    metrics = wsgi_app(engine, registry)  # mount at /metrics

Without `prometheus_client`, `asgi_app(engine)` and `wsgi_app(engine)` serve the engine's
OpenMetrics text by themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from ._velvet_rope import Coordinator, Engine

if TYPE_CHECKING:  # pragma: no cover
    from prometheus_client.registry import CollectorRegistry

#: What the collector and the routes read: an engine's rooms, or a coordinator's resources
#: (`velvet_rope_lease_capacity{resource=...}` and the rest).
Source = Engine | Coordinator

__all__ = ["EngineCollector", "register", "asgi_app", "wsgi_app", "CONTENT_TYPE"]

#: The content type of the engine's own text (OpenMetrics 1.0).
CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


class EngineCollector:
    """A `prometheus_client` collector of an engine's metrics, read afresh at each scrape."""

    def __init__(self, engine: Source) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import Metric

        for name, kind, help_text, samples in self._engine.metrics():
            family = Metric(name, help_text, kind)
            for sample_name, labels, value in samples:
                family.add_sample(sample_name, dict(labels), value)
            yield family

    def describe(self) -> list[Any]:
        """Nothing, so that registering does not read the engine (a registry collects once to
        learn the names of a collector without `describe`)."""
        return []


def register(engine: Source, registry: CollectorRegistry | None = None) -> EngineCollector:
    """Registers the engine's collector with `registry` (default: `prometheus_client`'s global
    one) and returns it (unregister it with `registry.unregister(collector)`)."""
    if registry is None:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    collector = EngineCollector(engine)
    registry.register(collector)
    return collector


def _render(engine: Source, registry: CollectorRegistry | None,
            accept: str | None) -> tuple[bytes, str]:
    """The body and content type: the registry's exposition in the format `accept` asks for
    (`prometheus_client` picks it), or the engine's OpenMetrics text without a registry."""
    if registry is None:
        return engine.metrics_text().encode(), CONTENT_TYPE
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _MetricsApp:
    """The ASGI app `asgi_app` makes (a class, not a function, so that Starlette's `Route`
    takes it as an ASGI app: `Route("/metrics", asgi_app(engine))`)."""

    def __init__(self, engine: Source, registry: CollectorRegistry | None) -> None:
        self._engine = engine
        self._registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            await send({"type": "http.response.start", "status": 405,
                        "headers": [(b"allow", b"GET, HEAD"), (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        accept = next((v.decode("latin-1") for k, v in scope.get("headers", [])
                       if k.lower() == b"accept"), None)
        body, content_type = _render(self._engine, self._registry, accept)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})


def asgi_app(engine: Source,
             registry: CollectorRegistry | None = None) -> Callable[[Scope, Receive, Send],
                                                                   Awaitable[None]]:
    """An ASGI app serving the metrics: the engine's OpenMetrics text, or, given a
    `prometheus_client` registry (with the engine's collector registered in it), that
    registry in the format the scraper's `Accept` asks for. GET and HEAD only. Route it at
    `/metrics` (Starlette: `Route("/metrics", asgi_app(engine))`; a `Mount` answers
    `/metrics/` and redirects `/metrics` there)."""
    return _MetricsApp(engine, registry)


def wsgi_app(engine: Source,
             registry: CollectorRegistry | None = None) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving the metrics (mount it at `/metrics`), as `asgi_app` does."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed",
                           [("Allow", "GET, HEAD"), ("Content-Length", "0")])
            return [b""]
        body, content_type = _render(engine, registry, environ.get("HTTP_ACCEPT"))
        start_response("200 OK", [("Content-Type", content_type),
                                  ("Content-Length", str(len(body))),
                                  ("Cache-Control", "no-store")])
        return [b"" if method == "HEAD" else body]

    return app
