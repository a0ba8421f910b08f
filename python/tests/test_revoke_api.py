"""Origin commands in process: `Engine.revoke`, `revoke_request` and `clear_cookie`, and what
the ASGI and WSGI middleware do when a revocation is refused or fails (logged; the response
is delivered all the same). The servers' side is tests/test_revoke.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import velvet_rope
from velvet_rope import Engine, UnknownRoomError
from velvet_rope.asgi import WaitingRoom as AsgiRoom
from velvet_rope.wsgi import WaitingRoom as WsgiRoom

from .test_fastapi_setup import call

T0 = 1_800_000_000_000  # on a minute boundary


def config(extra: str = "") -> str:
    return (
        '[[rooms]]\nname = "r"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n'
        f'enabled_origin_commands = ["revoke"]\n{extra}\n[rooms.cookie]\nsecure = false\n'
        '[[rooms]]\nname = "hdr"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n'
        'enabled_origin_commands = ["revoke"]\nticket_header = true\n'
        '[[rooms]]\nname = "off"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n'
    )


def ticket(engine: Engine, room: str, now: int = T0 + 1) -> str:
    d = engine.admit(room, None, now)
    assert d.admitted and d.ticket
    return d.ticket


def test_revoke_ends_a_session_once() -> None:
    e = Engine(config(), now_ms=T0)
    t = ticket(e, "r")
    assert e.revoke("r", t, T0 + 2) == "revoked"
    assert e.revoke("r", t.encode(), T0 + 3) == "already_revoked"
    d = e.admit("r", f"__vr_r={t}", T0 + 4)
    assert d.ticket_error == "revoked" and d.ticket != t
    assert e.stats("r").ticket_rejections["revoked"] == 1
    assert e.revoke("r", "not-a-ticket", T0 + 5) == "no_session"
    assert e.revoke("off", ticket(e, "off"), T0 + 5) == "not_enabled"
    with pytest.raises(UnknownRoomError):
        e.revoke("nope", t)


def test_revoke_request_takes_the_issued_ticket_then_the_cookie_then_the_header() -> None:
    e = Engine(config(), now_ms=T0)
    issued, carried = ticket(e, "r"), ticket(e, "r")
    # The issued ticket first: the cookie's is left alone.
    assert e.revoke_request("r", f"a=1; __vr_r={carried}", None, issued, T0 + 2) == "revoked"
    assert e.revoke("r", issued, T0 + 3) == "already_revoked"
    assert e.revoke_request(
        "r", cookie_header=f"a=1; __vr_r={carried}".encode(), now_ms=T0 + 3
    ) == "revoked"
    # A room without header tickets ignores the header; one with them reads it.
    other = ticket(e, "r")
    assert e.revoke_request("r", ticket_header=other, now_ms=T0 + 4) == "no_session"
    assert e.revoke_request("hdr", None, f" {ticket(e, 'hdr')} ", None, T0 + 4) == "revoked"
    assert e.revoke_request("r", None, None, "", T0 + 4) == "no_session"
    with pytest.raises(UnknownRoomError):
        e.revoke_request("nope")


def test_past_max_revocations_a_revocation_is_refused() -> None:
    e = Engine(config("max_revocations = 2"), now_ms=T0)
    tickets = [ticket(e, "r") for _ in range(3)]
    assert [e.revoke("r", t, T0 + 2) for t in tickets] == ["revoked", "revoked", "refused_full"]
    assert e.admit("r", f"__vr_r={tickets[2]}", T0 + 3).ticket_error is None


def test_clear_cookie_and_the_command_header() -> None:
    e = Engine(config(), now_ms=T0)
    clear = e.clear_cookie("r")
    assert clear.startswith("__vr_r=; Max-Age=0") and "Path=/" in clear
    with pytest.raises(UnknownRoomError):
        e.clear_cookie("nope")
    assert velvet_rope.COMMAND_HEADER == "Velvet-Rope-Command"
    for yes in ("revoke", " Revoke ", b"REVOKE", "x, revoke"):
        assert velvet_rope.is_revoke_command(yes), yes
    for no in ("", "revoked", b"re voke", "x"):
        assert not velvet_rope.is_revoke_command(no), no


def origin(headers: list[tuple[bytes, bytes]], before: Any = None) -> Any:
    """An ASGI app answering 200 with `headers` (after calling `before`)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if before is not None:
            before()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"origin"})

    return app


REVOKE = [(b"velvet-rope-command", b"revoke"), (b"x-origin", b"1")]


def test_asgi_a_refused_revocation_is_logged_and_the_session_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    e = Engine(config("max_revocations = 1"))
    e.revoke("r", ticket(e, "r", velvet_rope.now_ms()))  # the room keeps one: full
    held = ticket(e, "r", velvet_rope.now_ms())
    app = AsgiRoom(origin(REVOKE), e, room="r", tick=False)
    caplog.set_level(logging.DEBUG, logger="velvet_rope")
    status, headers, body = call(app, "/", [(b"cookie", f"__vr_r={held}".encode())])
    assert (status, body) == (200, b"origin")
    assert headers == [(b"x-origin", b"1")], "the command is removed, nothing cleared"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "refused_full" in warned[0].getMessage()
    assert e.admit("r", f"__vr_r={held}").ticket_error is None


def test_asgi_a_failing_revocation_still_delivers_the_response(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The room is gone by the time the origin answers (a reload): the revocation raises,
    which is logged; the response goes out without the command."""
    e = Engine(config())
    gone = config().replace('name = "r"', 'name = "gone"')
    app = AsgiRoom(origin(REVOKE, lambda: e.reload(gone)), e, room="r", tick=False)
    caplog.set_level(logging.DEBUG, logger="velvet_rope")
    status, headers, body = call(app, "/")
    assert (status, body) == (200, b"origin")
    assert [k for k, _ in headers] == [b"x-origin", b"set-cookie"], "the ticket is still set"
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


def wsgi_call(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    got: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> None:
        got.append((status, headers))

    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/", **environ}, start_response))
    return got[0][0], got[0][1], body


def wsgi_origin(before: Any = None) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if before is not None:
            before()
        start_response("200 OK", [("Velvet-Rope-Command", "Revoke"), ("X-Origin", "1")])
        return [b"origin"]

    return app


def test_wsgi_revokes_refuses_and_survives_failures(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="velvet_rope")
    e = Engine(config("max_revocations = 1"))
    room = WsgiRoom(wsgi_origin(), e, room="r", tick=False)
    # A new visitor whose first request is revoked: only the clearing cookie goes out.
    status, headers, body = wsgi_call(room, {})
    assert (status, body) == ("200 OK", b"origin")
    assert headers == [("X-Origin", "1"), ("Set-Cookie", e.clear_cookie("r"))]
    # The room keeps one revocation: the next is refused, logged, and the ticket kept.
    held = ticket(e, "r", velvet_rope.now_ms())
    status, headers, _ = wsgi_call(room, {"HTTP_COOKIE": f"__vr_r={held}"})
    assert headers == [("X-Origin", "1")]
    assert any(r.levelno == logging.WARNING and "refused_full" in r.getMessage()
               for r in caplog.records)
    # The room gone when the origin answers: logged, the response delivered.
    gone = config().replace('name = "r"', 'name = "gone"')
    room = WsgiRoom(wsgi_origin(lambda: e.reload(gone)), e, room="r", tick=False)
    status, headers, body = wsgi_call(room, {})
    assert (status, body) == ("200 OK", b"origin")
    assert [k for k, _ in headers] == ["X-Origin", "Set-Cookie"]
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


def test_without_any_room_taking_commands_responses_pass_untouched() -> None:
    """An engine none of whose rooms accepts origin commands does not look at responses (the
    middleware's steady path passes `send` as it is): the header is the app's own business."""
    e = Engine(
        '[[rooms]]\nname = "plain"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n'
        "[rooms.cookie]\nsecure = false\n",
        now_ms=T0,
    )
    assert not e.accepts_origin_commands
    assert Engine(config(), now_ms=T0).accepts_origin_commands

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"velvet-rope-command", b"revoke")]})
        await send({"type": "http.response.body", "body": b"ok"})

    room = AsgiRoom(app, e, room="plain", tick=False)
    # A new visitor (its ticket joins the response) and a returning one (nothing joins it).
    _, headers, _ = call(room, "/")
    assert (b"velvet-rope-command", b"revoke") in headers
    cookie = dict(headers)[b"set-cookie"].split(b";")[0]
    _, headers, _ = call(room, "/", [(b"cookie", cookie)])
    assert headers == [(b"velvet-rope-command", b"revoke")]
    assert e.admit("plain", cookie.decode()).ticket_error is None
