"""Which room decides a request: the shared table of request targets (a copy of
`core/tests/data/routing_vectors.json`), through the package's router, in process."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from velvet_rope import Engine, Router, UnknownRoomError
from velvet_rope._routing import RoomRouter

VECTORS: dict[str, Any] = json.loads(
    (pathlib.Path(__file__).parent / "data" / "routing_vectors.json").read_text("utf-8")
)


def engine_with(names: set[str]) -> Engine:
    return Engine("".join(
        f'[[rooms]]\nname = "{n}"\ntotal_active_users = 1\nnew_users_per_minute = 1\n'
        for n in sorted(names)
    ))


def routers() -> dict[str, RoomRouter]:
    configs = VECTORS["configs"]
    names = {r for c in configs.values() for r in [*c["rooms"].values(), c["default_room"]] if r}
    engine = engine_with(names)
    return {
        name: RoomRouter(engine, c["default_room"], c["rooms"], c["bypass"], c["case_sensitive"])
        for name, c in configs.items()
    }


def test_every_vector_goes_to_its_room() -> None:
    by_config = routers()
    wrong = []
    for config, target, want, why in VECTORS["cases"]:
        for form in (target, target.encode("utf-8")):
            got = by_config[config].room_for(form)
            if got != want:
                wrong.append(f"{config} {form!r}: {got!r}, want {want!r} ({why})")
    assert wrong == []
    assert len(VECTORS["cases"]) >= 90


def test_the_router_refuses_what_cannot_route() -> None:
    with pytest.raises(ValueError, match="give `room`"):
        Router([], None, [])
    for bad in ("shop", "/a?b", "/a#b"):
        with pytest.raises(ValueError, match="path prefix"):
            Router([(bad, "r")])
        with pytest.raises(ValueError, match="path prefix"):
            Router([], "r", [bad])
    with pytest.raises(TypeError):
        Router([], "r").route(42)  # type: ignore[arg-type]
    engine = engine_with({"shop"})
    with pytest.raises(UnknownRoomError, match="no room named `nope`"):
        RoomRouter(engine, "nope")
    every = Router([], "r")
    assert every.every_path and every.rooms == ["r"] and every.route("/x") == "r"
    assert "Router(rooms=" in repr(every)
