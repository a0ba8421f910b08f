"""A room decides a request once, however many of its middlewares the request meets (an
application's and a mounted one's, a router's dependency and a route's): shared by the ASGI,
WSGI and FastAPI front doors, which record it in the request's scope or environ."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from ._velvet_rope import Decision, Engine

__all__ = ["KEY", "decided_before", "mark_decided"]

#: Where the rooms that decided a request are kept: a list of `(engine, room)`, `room` a
#: name or `None` for the configuration's routes.
KEY = "velvet_rope.decided"


def decided_before(env: MutableMapping[str, Any], engine: Engine, room: str | None) -> bool:
    """Whether `room` of `engine` (`None`: the configuration's routes) decided the request of
    this scope or environ already: then a second middleware of that room passes it on."""
    seen = env.get(KEY)
    if seen is None:
        return False
    return any(e is engine and r == room for e, r in seen)


def mark_decided(
    env: MutableMapping[str, Any], engine: Engine, decision: Decision, *rooms: str | None
) -> None:
    """Records that `engine` decided the request by `rooms`, when the decision issued a
    ticket or matched a rule: what a second decision would do again (a new visitor, whose
    request carries no ticket yet, would take a second slot; a rule's match would be counted
    twice)."""
    if decision.set_cookie is None and decision.rule is None:
        return
    seen = env.setdefault(KEY, [])
    for room in rooms:
        seen.append((engine, room))
