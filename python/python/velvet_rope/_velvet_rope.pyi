"""Type stubs of the native module `velvet_rope._velvet_rope` (checked by mypy's stubtest)."""

import os
from collections.abc import Iterable
from typing import Any, final

from typing_extensions import Self, disjoint_base

__all__ = [
    "Engine",
    "Decision",
    "RoomStats",
    "ClusterStatus",
    "Page",
    "Coordinator",
    "Lease",
    "RateLimiter",
    "Gauge",
    "Router",
    "shared_memory_size",
    "is_revoke_command",
    "COMMAND_HEADER",
    "now_ms",
    "noop",
    "__version__",
]

__version__: str

#: The response header an origin gives commands in (`Velvet-Rope-Command`).
COMMAND_HEADER: str

def is_revoke_command(value: str | bytes) -> bool:
    """Whether a `Velvet-Rope-Command` value asks for a revocation (`revoke`, any case,
    among comma-separated commands)."""

def now_ms() -> int:
    """Milliseconds since the Unix epoch, from the system clock."""

def noop() -> None:
    """Does nothing: the floor of a call into the native module."""

def shared_memory_size(config: str | os.PathLike[str]) -> int:
    """Bytes of a state file for this configuration."""

@final
class Engine:
    """The admission engine."""

    def __new__(
        cls,
        config: str | os.PathLike[str],
        *,
        shared_memory: str | os.PathLike[str] | None = None,
        now_ms: int | None = None,
    ) -> Engine: ...
    def admit(
        self, room: str, cookie: str | bytes | None = None, now_ms: int | None = None
    ) -> Decision: ...
    def decide_request(
        self,
        method: str | bytes,
        target: str | bytes,
        headers: Iterable[tuple[str | bytes, str | bytes]],
        *,
        peer: str | None = None,
        room: str | None = None,
        now_ms: int | None = None,
    ) -> tuple[str, Decision] | None: ...
    def room_for_request(
        self,
        method: str | bytes,
        target: str | bytes,
        headers: Iterable[tuple[str | bytes, str | bytes]],
        *,
        peer: str | None = None,
        now_ms: int | None = None,
    ) -> str | None: ...
    @property
    def has_routes(self) -> bool: ...
    @property
    def accepts_origin_commands(self) -> bool: ...
    @property
    def steady_admit(self) -> Decision: ...
    def room_reads_request(self, room: str) -> bool: ...
    def admit_plain(
        self, room: str, cookie: str | bytes | None = None, now_ms: int | None = None
    ) -> Decision | None: ...
    def admit_plain_headers(
        self,
        room: str,
        headers: Iterable[tuple[str | bytes, str | bytes]],
        now_ms: int | None = None,
    ) -> Decision | None: ...
    def admit_ticket(
        self, room: str, ticket: str | None = None, now_ms: int | None = None
    ) -> Decision: ...
    def revoke(self, room: str, ticket: str | bytes, now_ms: int | None = None) -> str:
        """Ends the session of the visitor holding `ticket`: `"revoked"`, `"already_revoked"`,
        `"no_session"`, `"not_enabled"`, or `"refused_full"`, `"refused_unsent"`,
        `"refused_busy"` (nothing changed)."""
    def revoke_request(
        self,
        room: str,
        cookie_header: str | bytes | None = None,
        ticket_header: str | bytes | None = None,
        issued: str | bytes | None = None,
        now_ms: int | None = None,
    ) -> str:
        """Ends the session of a request's visitor (the ticket its decision `issued`, else the
        room's ticket in `cookie_header`, else, with `ticket_header = true`, `ticket_header`);
        the outcome's name, as `revoke` answers."""
    def clear_cookie(self, room: str) -> str:
        """The `Set-Cookie` value that clears `room`'s ticket cookie."""
    def tick(self, now_ms: int | None = None) -> None: ...
    def reload(self, config: str | os.PathLike[str]) -> None: ...
    def stats(self, room: str) -> RoomStats: ...
    def stats_json(self) -> str: ...
    def drain_events(self) -> list[dict[str, Any]]:
        """Every event logged since the last call, oldest first: `event`, `at_ms`, `room`,
        `fields`, `warning`, `line` (one line of JSON)."""
    def events_dropped(self) -> int: ...
    def metrics_text(self) -> str:
        """Every room's metrics in the OpenMetrics text format, ending with `# EOF`."""
    def metrics(
        self,
    ) -> list[tuple[str, str, str, list[tuple[str, list[tuple[str, str]], float]]]]:
        """Every room's metrics: `(name, type, help, samples)` per family, each sample
        `(name, labels, value)`."""
    def render_page(
        self,
        room: str,
        decision: Decision,
        accept: str | bytes | None = None,
        accept_language: str | bytes | None = None,
        now_ms: int | None = None,
        ticket: str | bytes | None = None,
    ) -> Page | None: ...
    @property
    def rooms(self) -> list[str]: ...
    def cookie_name(self, room: str) -> str: ...
    def cluster_status(self) -> ClusterStatus | None: ...

@final
class ClusterStatus:
    """The cluster tier's sync loop in this process (a `[cluster]` table starts it)."""

    @property
    def syncs(self) -> int: ...
    @property
    def failures(self) -> int: ...
    @property
    def outages(self) -> int: ...
    @property
    def in_outage(self) -> bool: ...
    @property
    def hosts(self) -> int: ...
    @property
    def last_error(self) -> str | None: ...

@final
class Decision:
    """The engine's answer for one request."""

    @property
    def outcome(self) -> str: ...
    @property
    def admitted(self) -> bool: ...
    @property
    def set_cookie(self) -> str | None: ...
    @property
    def position(self) -> int | None: ...
    @property
    def estimated_wait_secs(self) -> int | None: ...
    @property
    def retry_after_secs(self) -> int | None: ...
    @property
    def queue_length(self) -> int | None: ...
    @property
    def ticket_error(self) -> str | None: ...
    @property
    def rule(self) -> int | None: ...
    @property
    def bypassed(self) -> bool: ...
    @property
    def would_have(self) -> str | None: ...
    @property
    def ticket_header(self) -> bool: ...
    @property
    def ticket(self) -> str | None: ...
    @property
    def ambiguous(self) -> bool: ...

@final
class RoomStats:
    """A room's figures as last published by a tick."""

    @property
    def active_users(self) -> int: ...
    @property
    def admitted_this_minute(self) -> int: ...
    @property
    def admitted_total(self) -> int: ...
    @property
    def queue_length(self) -> int: ...
    @property
    def frontier(self) -> int: ...
    @property
    def free_slots(self) -> int: ...
    @property
    def admission_rate(self) -> float: ...
    @property
    def memory_bytes(self) -> int: ...
    @property
    def ticket_rejections(self) -> dict[str, int]: ...

@final
class Page:
    """A response to send instead of the origin's."""

    @property
    def status(self) -> int: ...
    @property
    def content_type(self) -> str: ...
    @property
    def body(self) -> str: ...
    @property
    def headers(self) -> list[tuple[str, str]]: ...

@disjoint_base
class Coordinator:
    """Hands out leases of shared resources."""

    def __new__(cls, config: str | os.PathLike[str], *, now_ms: int | None = None) -> Self: ...
    def request(
        self,
        client_id: str,
        resource: str,
        wants: float,
        priority: int = 0,
        now_ms: int | None = None,
    ) -> Lease: ...
    def release(self, client_id: str, resource: str) -> bool: ...
    def metrics_text(self, now_ms: int | None = None) -> str:
        """Every resource's metrics in the OpenMetrics text format, ending with `# EOF`."""
    def metrics(
        self, now_ms: int | None = None
    ) -> list[tuple[str, str, str, list[tuple[str, list[tuple[str, str]], float]]]]:
        """Every resource's metrics, as `Engine.metrics` gives a room's."""
    def drain_events(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """Every event logged since the last call (learning periods, a leaf's root), as
        `Engine.drain_events` gives an engine's."""
    def events_dropped(self) -> int: ...

@final
class Lease:
    """What a client may use, until when."""

    @property
    def capacity(self) -> float: ...
    @property
    def expires_at_ms(self) -> int: ...
    @property
    def refresh_interval_secs(self) -> float: ...
    @property
    def safe_capacity(self) -> float: ...

@disjoint_base
class RateLimiter:
    """Permits at a leased rate, spread evenly over each second."""

    def __new__(cls, rate: float) -> RateLimiter: ...
    @classmethod
    def from_lease(cls, lease: Lease) -> RateLimiter: ...
    def try_acquire(self, n: int = 1) -> bool: ...
    def acquire(self, n: int = 1) -> None: ...
    def try_acquire_or_wait(self, n: int = 1) -> float | None: ...
    def set_rate(self, rate: float) -> None: ...
    @property
    def rate(self) -> float: ...

@disjoint_base
class Gauge:
    """At most `capacity` units held at once."""

    def __new__(cls, capacity: int) -> Gauge: ...
    @classmethod
    def from_lease(cls, lease: Lease) -> Gauge: ...
    def try_acquire(self, n: int = 1) -> bool: ...
    def acquire(self, n: int = 1) -> None: ...
    def release(self, n: int = 1) -> None: ...
    def set_capacity(self, capacity: int) -> None: ...
    @property
    def capacity(self) -> int: ...
    @property
    def in_use(self) -> int: ...

@final
class Router:
    """Which room decides a request (the core's router)."""

    def __new__(
        cls,
        rooms: list[tuple[str, str]] = ...,
        room: str | None = None,
        bypass: list[str] = ...,
        case_sensitive: bool = True,
    ) -> Router: ...
    def route(self, target: str | bytes) -> str | None: ...
    @property
    def rooms(self) -> list[str]: ...
    @property
    def every_path(self) -> bool: ...
