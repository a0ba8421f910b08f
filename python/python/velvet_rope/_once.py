"""A room decides a request once, however many of its front doors the request meets (an
application's middleware and a mounted app's, a router's dependency and a route's): shared
by the ASGI, WSGI and FastAPI front doors, which record it in the request's scope or
environ."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from ._velvet_rope import Decision, Engine

__all__ = ["KEY", "decided_before", "mark_decided", "routes_decided_before", "scope_target"]

#: Where the rooms that decided a request are kept: a list of `(engine, room, target, ticket,
#: decision)`, `room` a name or `None` for the configuration's routes, `target` what it was
#: decided on, `ticket` whether the decision issued the visitor the room's ticket.
KEY = "velvet_rope.decided"


def scope_target(scope: MutableMapping[str, Any]) -> tuple[Any, Any]:
    """What an ASGI request was decided on, for `decided_before`: its path and query."""
    return scope.get("path"), scope.get("query_string")


def decided_before(
    env: MutableMapping[str, Any], engine: Engine, room: str | None, target: Any
) -> Decision | None:
    """The decision `room` of `engine` (`None`: the configuration's routes) made on the
    request of this scope or environ already, if any: then a second front door of that room
    passes it on. A room that issued the visitor its ticket decided it whatever the target;
    otherwise only on the same target (a rewrite ahead of the second may put it under
    another rule, or the routes in another room)."""
    seen = env.get(KEY)
    if seen is None:
        return None
    for e, r, t, ticket, decision in seen:
        if e is engine and r == room and (ticket or t == target):
            return decision  # type: ignore[no-any-return]
    return None


def routes_decided_before(
    env: MutableMapping[str, Any],
    engine: Engine,
    target: Any,
    routed_room: Callable[[], str | None],
) -> bool:
    """Whether the configuration's routes decided the request of this scope or environ on
    `target` already, or the room they put it in did (a front door of a named room ahead of
    one of the routes): `routed_room()` says which room that is, deciding nothing
    (`Engine.room_for_request`); it is asked only when a room of `engine` decided the
    request."""
    if decided_before(env, engine, None, target) is not None:
        return True
    if not any(e is engine for e, *_ in env.get(KEY, ())):
        return False
    room = routed_room()
    return room is not None and decided_before(env, engine, room, target) is not None


def mark_decided(
    env: MutableMapping[str, Any],
    engine: Engine,
    decision: Decision,
    target: Any,
    *rooms: str | None,
) -> None:
    """Records that `engine` decided the request on `target` by `rooms`, when a second
    decision would do something again: a new ticket (a new visitor, whose request carries no
    ticket yet, would take a second slot), a rule's match or a dry run's verdict (each would
    be counted twice). A ticket counts for a named room only: the routes may put another
    target in another room."""
    ticket = decision.set_cookie is not None
    if not ticket and decision.rule is None and decision.would_have is None:
        return
    seen = env.setdefault(KEY, [])
    for room in rooms:
        seen.append((engine, room, target, ticket and room is not None, decision))
