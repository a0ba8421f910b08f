'use strict'
/**
 * The waiting room in front of Express and Fastify routes. Each request under a room is
 * decided before the route runs: admitted requests go on (with the ticket's `Set-Cookie` when
 * it changed); the others get the room's waiting page (HTML, or JSON when the client asks)
 * with its status, `Refresh` or `Retry-After`, `Cache-Control: no-store` and the ticket. A
 * denial is a response, never a thrown error. The engine is ticked once a second on an
 * `unref`'d timer.
 *
 * Without `room` or `rooms`, the configuration's `routes` choose each request's room (by host
 * and path, in the core). Either way a room's `[[rooms.rules]]` apply (bypass, queue, reject,
 * count only), its ticket comes from the cookies or, in a room with `ticket_header = true`,
 * the `Velvet-Rope-Ticket` header, and the client is the socket's peer or, behind
 * `settings.trusted_proxies`, the address `X-Forwarded-For` gives. A room without rules or
 * header tickets is decided on its `Cookie` header alone (the fast path).
 *
 * Origin commands: a route ends the visitor's session by answering with the header
 * `Velvet-Rope-Command: revoke` (in a room with `enabled_origin_commands = ["revoke"]`). When
 * a room of the engine accepts commands, the header never reaches the client: it is taken off
 * every response that passes the middleware, decided or not, wherever Node lets it out (the
 * response's headers however set, the headers given to `writeHead` in any form, an early
 * hint, the trailers; over HTTP/2 also `setTrailer` and pushed responses). For a request a
 * room admitted (not a bypass), the visitor's ticket is revoked (`engine.revokeRequest`: the
 * ticket this request's decision issued, else the one it brought) in every room that admitted
 * it (several middleware on one path, whichever sees the command) and, when the session
 * ended, the response clears each such room's ticket cookie instead of setting it and loses
 * the `Velvet-Rope-Ticket` headers the middleware added. A command in a trailer is followed
 * too, but once the headers are out the cookie can no longer be cleared: the ticket is
 * refused from then on all the same. Bytes an app writes around Node's response (on the
 * socket, or an HTTP/2 stream's own `respond`) are not looked at. Refusals and failures are
 * reported (Express: `process.emitWarning`, code `VELVET_ROPE_REVOKE_REFUSED` or
 * `VELVET_ROPE_REVOKE_FAILED`; Fastify: `request.log.warn`); the response goes out whatever
 * happens. Without a room that accepts commands, responses are not looked at (the header is
 * the app's own).
 */

const native = require('./binding.js')
const { UnknownRoomError, convert } = require('./errors.js')

/**
 * The rooms that decided a request (on its `IncomingMessage`, which Express and Fastify share
 * with any middleware around them), four entries each: the engine, the room's name (null: the
 * configuration's routes), the target it was decided on, and whether the decision issued a
 * ticket. Recorded when a decision issued a ticket, matched a rule or was passed by a dry run
 * (`wouldHave`), which a second decision of the same request would do again: a new visitor
 * would take a second slot (the request carries no ticket yet), and a rule's match or a dry
 * run's verdict would be counted twice.
 */
const kDecided = Symbol('velvet-rope: decided by')

/**
 * Whether `room` of `engine` (a name; null: the configuration's routes) decided `req` on
 * `target` already: then a second middleware of that room (an application's and a router's,
 * or the plugin registered twice) passes it on. A room that issued the visitor a ticket
 * decided it whatever the target; otherwise only on the same target (a rewrite ahead of the
 * second may put it under another rule, or the routes in another room).
 */
function decidedBefore (req, engine, room, target) {
  const seen = req[kDecided]
  if (seen === undefined) return false
  for (let i = 0; i < seen.length; i += 4) {
    if (seen[i] === engine && seen[i + 1] === room && (seen[i + 3] || seen[i + 2] === target)) {
      return true
    }
  }
  return false
}

/**
 * Records that `engine` decided `req` on `target` with `d`, by `rooms` (names, or null for
 * the configuration's routes), when that is worth recording (see `kDecided`). A ticket counts
 * for a named room only: the routes may put another target in another room.
 */
function markDecided (req, engine, d, target, ...rooms) {
  const ticket = Boolean(d.setCookie)
  if (!ticket && (d.rule === undefined || d.rule === null) && !d.wouldHave) return
  const seen = req[kDecided] === undefined ? (req[kDecided] = []) : req[kDecided]
  for (const room of rooms) seen.push(engine, room, target, ticket && room !== null)
}

/**
 * Whether the room the configuration's routes put `req` in on `target` (asked of the core,
 * deciding nothing) decided it already: a middleware of a named room ahead of one of the
 * routes. Asked only of a request some room decided.
 */
function routedRoomDecided (req, engine, target) {
  if (req[kDecided] === undefined) return false
  const room = engine.roomForRequest(req, { target })
  return room !== null && decidedBefore(req, engine, room, target)
}

/**
 * Which room decides a request (a `Room`, or null), given its target as received
 * (`req.url`): the room of the longest prefix of `rooms` the path is under, else `room`
 * (the default; none: such paths pass). Paths under a `bypass` prefix never decide. The
 * decision is the core's (`routerNew`): the target is read the ways servers and frameworks
 * read it (absolute form, percent-escapes, `..` and `//`, `\`, case as `caseSensitive`
 * says: `null` for either rule), and a request is decided if any of those readings puts it
 * in a room; only one that every reading puts under a bypass prefix passes.
 */
function router (engine, { room, rooms, bypass = [], caseSensitive = true } = {}) {
  const known = new Set(engine.rooms)
  const prefixes = Object.entries(rooms || {})
  for (const name of [room, ...prefixes.map(([, r]) => r)]) {
    if (name !== undefined && name !== null && !known.has(name)) {
      throw new UnknownRoomError(
        `no room named \`${name}\` in the configuration (its rooms: ${[...known].join(', ')})`,
        'ERR_VELVET_ROPE_UNKNOWN_ROOM')
    }
  }
  if ((room === undefined || room === null) && prefixes.length === 0) {
    throw new TypeError('give `room` (every path) or `rooms` (path prefix -> room)')
  }
  const skip = [...bypass]
  const fallback = room === undefined || room === null ? null : engine.room(room)
  if (skip.length === 0 && prefixes.length === 0) {
    // One room for every path: the path need not be read.
    const roomFor = () => fallback
    roomFor.everyPath = true
    return roomFor
  }
  let route
  try {
    route = native.routerNew({
      rooms: prefixes,
      defaultRoom: fallback === null ? undefined : room,
      bypass: skip,
      caseSensitive: caseSensitive === null ? undefined : caseSensitive !== false
    })
  } catch (e) { throw convert(e) }
  const byIndex = route.rooms.map((name) => engine.room(name))
  return function roomFor (target) {
    const i = route(target)
    return i < 0 ? null : byIndex[i]
  }
}

/**
 * The paths a middleware option `bypass` lets pass when the configuration's routes choose the
 * rooms: a function of the target answering whether every reading of it is under one.
 */
function bypassOnly (bypass, caseSensitive) {
  if (bypass.length === 0) return null
  let route
  try {
    route = native.routerNew({
      rooms: [],
      defaultRoom: 'routes',
      bypass: [...bypass],
      caseSensitive: caseSensitive === null ? undefined : caseSensitive !== false
    })
  } catch (e) { throw convert(e) }
  return (target) => route(target) < 0
}

/** Throws unless the configuration's routes can place requests (no `room`, no `rooms`). */
function needRoutes (engine) {
  if (!engine.hasRoutes) {
    throw new TypeError('give `room` (every path) or `rooms` (path prefix -> room), or give ' +
      'rooms `routes` in the configuration: as it is, no request would be decided')
  }
}

/** The response headers that carry a new ticket: `Set-Cookie`, and `Velvet-Rope-Ticket`. */
function ticketHeaders (d) {
  if (!d.setCookie) return []
  const out = [['Set-Cookie', d.setCookie]]
  if (d.ticketHeader && d.ticket) out.push(['Velvet-Rope-Ticket', d.ticket])
  return out
}

/**
 * The first line of a request header by its lower-case name, from the raw header list (as the
 * decision read it: `req.headers` joins repeated lines with `, `, which opens no ticket).
 */
function headerOf (req, name) {
  const raw = req.rawHeaders
  if (!raw) {
    const v = req.headers[name]
    return Array.isArray(v) ? v[0] : v
  }
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === name.length && raw[i].toLowerCase() === name) return raw[i + 1]
  }
  return undefined
}

/**
 * The request's `Cookie` header, read from its raw header list: building `req.headers` (which
 * Node does lazily, on first use) costs more than the decision itself when nothing else
 * needs it. Several `Cookie` lines are joined with `; `, as Node joins them.
 */
function cookieOf (req) {
  const raw = req.rawHeaders
  let cookie
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]
    if (name.length === 6 && (name === 'Cookie' || name === 'cookie' || name.toLowerCase() === 'cookie')) {
      cookie = cookie === undefined ? raw[i + 1] : `${cookie}; ${raw[i + 1]}`
    }
  }
  return cookie
}

/** The response header an origin gives commands in. */
const COMMAND_HEADER = 'Velvet-Rope-Command'
const COMMAND = 'velvet-rope-command'
const ENDED = new Set(['revoked', 'already_revoked'])

/**
 * Whether a `Velvet-Rope-Command` value asks for a revocation (`revoke`, any case, among
 * comma-separated commands); an array (several header lines) if any of its values does.
 */
function isRevokeCommand (value) {
  if (Array.isArray(value)) return value.some(isRevokeCommand)
  return value !== undefined && value !== null && native.isRevokeCommand(String(value))
}

/**
 * Revokes the session of the visitor of a request `room` admitted with decision `d` (its
 * origin asked): whether it ended, now or before. Never throws; refusals and failures go to
 * `report(message, code, error)`.
 */
function revokeFor (engine, room, d, req, report) {
  let outcome
  try {
    outcome = engine.revokeRequest(room, {
      cookie: cookieOf(req),
      ticketHeader: headerOf(req, 'velvet-rope-ticket'),
      issued: d.ticket ?? undefined
    })
  } catch (e) {
    report(`velvet-rope: room \`${room}\`: the origin's revoke command failed: ${e && e.message}`,
      'VELVET_ROPE_REVOKE_FAILED', e)
    return false
  }
  if (ENDED.has(outcome)) return true
  if (outcome.startsWith('refused')) {
    report(`velvet-rope: room \`${room}\`: the origin's revoke command was refused (${outcome}): ` +
      'the session goes on until it ends by itself', 'VELVET_ROPE_REVOKE_REFUSED')
  }
  return false
}

/** Express's reports: process warnings (printed once per code unless handled). */
function emitWarning (message, code) {
  try {
    process.emitWarning(message, { code })
  } catch {}
}

/** `list` (a header's value or values) as an array, without any of `values`. */
function without (list, values) {
  const out = list === undefined || list === null ? [] : [].concat(list)
  return values.length === 0 ? out : out.filter((v) => !values.includes(v))
}

/**
 * Whether a header name is `Velvet-Rope-Command`, in any case and with any whitespace around
 * it: Node's HTTP/2 compatibility API trims the names it is given (HTTP/1 refuses a name with
 * whitespace, so matching those costs nothing there).
 */
function isCommandName (name) {
  if (typeof name !== 'string' || name.length < 19) return false
  return (name.length === 19 ? name : name.trim()).toLowerCase() === COMMAND
}

/**
 * Headers as `writeHead`, `addTrailers` or `writeEarlyHints` take them (an object, a flat
 * `[name, value, ...]` array or an array of `[name, value]` pairs) without their
 * `Velvet-Rope-Command`: `[headers, values]`, `values` null (and `headers` as given) when
 * there were none. A copy: the caller's object may be shared between responses. Anything else
 * (a `Map` or a `Headers`, whose entries are no own properties: Node reads none of them) is
 * returned as given.
 */
function stripGiven (given) {
  if (given === null || typeof given !== 'object') return [given, null]
  let values = null
  if (Array.isArray(given)) {
    const pairs = given.length > 0 && Array.isArray(given[0])
    const out = []
    const step = pairs ? 1 : 2
    for (let i = 0; i < given.length; i += step) {
      const name = pairs ? given[i][0] : given[i]
      if (isCommandName(name)) {
        values = (values || []).concat(pairs ? given[i][1] : given[i + 1])
      } else if (pairs) {
        out.push(given[i])
      } else {
        out.push(name, given[i + 1])
      }
    }
    return values === null ? [given, null] : [out, values]
  }
  for (const name of Object.keys(given)) {
    if (isCommandName(name)) {
      if (values === null) given = { ...given }
      values = (values || []).concat(given[name])
      delete given[name]
    }
  }
  return [given, values]
}

/**
 * Where a response watched for origin commands keeps its watch: `{req, report, session}`,
 * `session` being `{decided, commanded}`, shared with the responses it pushes (HTTP/2).
 * `decided` lists every room that admitted the request (see `decided`), whichever middleware
 * decided it: the wrapper that finds a command revokes in each, so two rooms deciding one
 * request (two middleware on one path) both end the session, whichever comes first.
 * `commanded`: a revoke was followed (perhaps before the headers: a 103, a trailer).
 */
const kWatch = Symbol('velvet-rope origin commands')

/**
 * A room that admitted a request, for the response's watch: the engine, the room's name, its
 * decision, where its refusals go (`report(message, code, error)`), and whether the revoke
 * was tried and ended the session.
 */
function decided (engine, room, d, report) {
  return { engine, room, d, report, tried: false, ended: false }
}

/**
 * Watches a response for `Velvet-Rope-Command` wherever Node lets it go out (the headers, a
 * 103, the trailers; HTTP/2's trailers and pushed responses too): it is taken off, and a
 * revoke is followed in the rooms that admitted the request. `entry` (from `decided`) is a
 * room that admitted it, or null. The response's methods are wrapped once; the middleware of
 * another room on the same response only adds its entry. Call only when the engine accepts
 * origin commands: a response without a watch costs nothing.
 */
function watchResponse (req, res, entry, report) {
  let watch = res[kWatch]
  if (watch === undefined) watch = installWatch(req, res, report, { decided: [], commanded: false })
  if (entry !== null) watch.session.decided.push(entry)
}

/** Wraps a response's ways out (see `watchResponse`); `session` may be another's (a push). */
function installWatch (req, res, report, session) {
  const watch = { req, report, session }
  res[kWatch] = watch
  wrapHead(res, watch)
  if (typeof res.writeEarlyHints === 'function') wrapEarlyHints(res, watch)
  if (typeof res.addTrailers === 'function') wrapTrailers(res, watch)
  if (typeof res.setTrailer === 'function') wrapSetTrailer(res, watch)
  if (typeof res.createPushResponse === 'function') wrapPush(res, watch)
  return watch
}

/**
 * `writeHead` (which Node calls itself when the app does not: `write`, `end`, `flushHeaders`)
 * goes through `headOut`. The wrapper stays for the response's life: a `writeHead` that
 * throws (a bad header) may be called again. `writeHeader`, the deprecated alias, is the
 * prototype's `writeHead` under another name and would go around it.
 */
function wrapHead (res, watch) {
  const writeHead = res.writeHead
  function velvetRopeWriteHead (...args) {
    return writeHead.apply(this, headOut(watch, this, args))
  }
  res.writeHead = velvetRopeWriteHead
  if (typeof res.writeHeader === 'function') res.writeHeader = velvetRopeWriteHead
}

/**
 * An early hint (103) loses the command; a revoke in it is followed at once (the origin has
 * spoken for the visitor), and the final response clears the cookie.
 */
function wrapEarlyHints (res, watch) {
  const writeEarlyHints = res.writeEarlyHints
  res.writeEarlyHints = function velvetRopeWriteEarlyHints (hints, ...rest) {
    const [stripped, found] = stripGiven(hints)
    if (found !== null) commandIn(watch, found)
    return writeEarlyHints.call(this, stripped, ...rest)
  }
}

/**
 * Trailers lose the command, and a revoke among them is followed at once. A trailer given
 * after the headers went out can no longer clear the cookie: the ticket is refused from then
 * on all the same (its holder arrives anew on its next request). Given before, the headers
 * clear it.
 */
function wrapTrailers (res, watch) {
  const addTrailers = res.addTrailers
  res.addTrailers = function velvetRopeAddTrailers (headers) {
    const [stripped, found] = stripGiven(headers)
    if (found !== null) commandIn(watch, found)
    return addTrailers.call(this, stripped)
  }
}

/** HTTP/2's `setTrailer` (which its `addTrailers` calls): as `wrapTrailers`, one at a time. */
function wrapSetTrailer (res, watch) {
  const setTrailer = res.setTrailer
  res.setTrailer = function velvetRopeSetTrailer (name, value) {
    if (isCommandName(name)) return commandIn(watch, [value])
    return setTrailer.call(this, name, value)
  }
}

/**
 * HTTP/2's pushed responses go to the same client for the same request: watched as the
 * response is, in the same session (a revoke in either ends it in every room).
 */
function wrapPush (res, watch) {
  const createPushResponse = res.createPushResponse
  res.createPushResponse = function velvetRopeCreatePushResponse (headers, callback) {
    if (typeof callback !== 'function') return createPushResponse.call(this, headers, callback)
    return createPushResponse.call(this, headers, (err, pushed, ...rest) => {
      if (!err && pushed && pushed[kWatch] === undefined) {
        installWatch(watch.req, pushed, watch.report, watch.session)
      }
      return callback(err, pushed, ...rest)
    })
  }
}

/** Follows a revoke among `values` (a command taken off a 103 or a trailer). Never throws. */
function commandIn (watch, values) {
  try {
    if (isRevokeCommand(values)) followRevoke(watch)
  } catch (e) {
    watch.report(`velvet-rope: cannot carry out the origin's commands: ${e && e.message}`,
      'VELVET_ROPE_REVOKE_FAILED', e)
  }
}

/**
 * Revokes the session in every room that admitted the request and was not tried yet (a room
 * may decide after a command came in a 103: the headers try it).
 */
function followRevoke (watch) {
  const session = watch.session
  session.commanded = true
  for (const e of session.decided) {
    if (e.tried) continue
    e.tried = true
    e.ended = revokeFor(e.engine, e.room, e.d, watch.req, e.report)
  }
}

/**
 * Where `writeHead`'s headers are among its arguments, as Node reads them (`status[,
 * reason][, headers]`: the third when given, else the second unless it is the reason), or -1.
 */
function headersAt (args) {
  if (args.length > 2 && args[2] !== undefined && args[2] !== null) return 2
  return args.length > 1 && args[1] !== null && typeof args[1] === 'object' ? 1 : -1
}

/**
 * What a response's headers go through on their way out (the `writeHead` wrapper):
 * `Velvet-Rope-Command` taken off the response's own headers and off those given to
 * `writeHead`; a revoke among them followed; and when the session ended in a room (now, or by
 * a command in a 103 or a trailer before), the ended rooms' cookies cleared. Returns the
 * arguments to call `writeHead` with. Never throws: a failure is reported, and the headers go
 * out without the command all the same.
 */
function headOut (watch, res, args) {
  const at = headersAt(args)
  let values = null
  if (at >= 0) {
    const [stripped, found] = stripGiven(args[at])
    if (found !== null) {
      args = args.slice()
      args[at] = stripped
      values = found
    }
  }
  // Headers already out: Node's writeHead throws; nothing of the response can change.
  if (res.headersSent) return args
  try {
    const own = res.getHeader(COMMAND)
    if (own !== undefined) {
      res.removeHeader(COMMAND)
      values = values === null ? [].concat(own) : values.concat(own)
    }
    if (values !== null && isRevokeCommand(values)) followRevoke(watch)
    else if (watch.session.commanded) followRevoke(watch) // rooms that decided since
    if (!watch.session.commanded) return args
    const ended = watch.session.decided.filter((e) => e.ended)
    if (ended.length === 0) return args
    if (at >= 0) {
      // Headers given to writeHead replace the response's own by name: once they are the
      // response's own, the cookies are worked on in one place (else Node would put a
      // Set-Cookie given here over the clearing cookie).
      const folded = foldedArgs(res, args, at)
      if (folded === null) return args
      args = folded
    }
    clearCookies(res, ended)
  } catch (e) {
    watch.report(`velvet-rope: cannot carry out the origin's commands: ${e && e.message}`,
      'VELVET_ROPE_REVOKE_FAILED', e)
  }
  return args
}

/**
 * `writeHead`'s arguments once the headers given at `args[at]` are the response's own
 * (`foldGiven`), without them; null for headers Node's writeHead refuses (a bad header of
 * the app's: called as given, it throws it).
 */
function foldedArgs (res, args, at) {
  try {
    foldGiven(res, args[at])
  } catch {
    return null
  }
  return typeof args[1] === 'string' ? [args[0], args[1]] : [args[0]]
}

/**
 * Puts headers given to `writeHead` on the response itself, as Node does when the response
 * has headers of its own: a name given replaces the response's own, and a name given twice
 * in an array is kept twice (Node 22's rule, and HTTP/2's; Node 20 keeps the last). A
 * `Map` or `Headers` has no own properties, and gives nothing, as in Node.
 */
function foldGiven (res, given) {
  if (given === null || typeof given !== 'object') return
  if (Array.isArray(given)) {
    const pairs = given.length > 0 && Array.isArray(given[0])
    // Node refuses a flat array of odd length before it touches the response: so does this.
    if (!pairs && given.length % 2 !== 0) {
      throw new TypeError('writeHead: a flat array of headers must hold name, value pairs')
    }
    const step = pairs ? 1 : 2
    for (let i = 0; i < given.length; i += step) {
      const name = pairs ? given[i][0] : given[i]
      if (name) res.removeHeader(name)
    }
    for (let i = 0; i < given.length; i += step) {
      const name = pairs ? given[i][0] : given[i]
      if (name) append(res, name, pairs ? given[i][1] : given[i + 1])
    }
    return
  }
  for (const name of Object.keys(given)) if (name) res.setHeader(name, given[name])
}

/**
 * `res.appendHeader(name, value)`, or its equivalent where a response has none (HTTP/2's
 * compatibility response before Node 20.12).
 */
function append (res, name, value) {
  if (typeof res.appendHeader === 'function') return res.appendHeader(name, value)
  const had = res.getHeader(name)
  res.setHeader(name, had === undefined ? value : [].concat(had, value))
}

/**
 * The response of a revoke, in each room in `ended`: the room's ticket cookie cleared
 * (`Max-Age=0`) instead of set, and no `Velvet-Rope-Ticket` the decision handed out. The
 * app's own cookies and headers stay.
 */
function clearCookies (res, ended) {
  const issued = []
  const tickets = []
  const clearing = []
  for (const e of ended) {
    if (e.d.setCookie) issued.push(e.d.setCookie)
    if (e.d.ticketHeader && e.d.ticket) tickets.push(e.d.ticket)
    const clear = e.engine.clearCookie(e.room)
    if (!clearing.includes(clear)) clearing.push(clear)
  }
  const cookies = without(res.getHeader('set-cookie'), issued)
  for (const clear of clearing) if (!cookies.includes(clear)) cookies.push(clear)
  res.setHeader('Set-Cookie', cookies.length === 1 ? cookies[0] : cookies)
  const own = tickets.length === 0 ? undefined : res.getHeader('velvet-rope-ticket')
  if (own !== undefined) {
    const left = without(own, tickets)
    if (left.length === 0) res.removeHeader('Velvet-Rope-Ticket')
    else res.setHeader('Velvet-Rope-Ticket', left.length === 1 ? left[0] : left)
  }
}

/**
 * Puts a new ticket's headers (`ticketHeaders`) on the response as its head goes out, as the
 * Python middleware adds them to the response's start: whatever the app did to the headers
 * before (`res.set('Set-Cookie', ...)` replaces the response's own; headers given to
 * `writeHead` replace them by name; a hijacked Fastify reply writes a head of its own), the
 * visitor gets the ticket that holds the place. Installed after `watchResponse` (so the
 * commands' wrapper, inside this one, clears the ticket of a session the origin ends).
 * Nothing for a decision without a new ticket. Never throws: a failure is reported, and the
 * head goes out as the app gave it.
 */
function ticketOnHead (res, d, report) {
  if (!d.setCookie) return
  const extra = ticketHeaders(d)
  const writeHead = res.writeHead
  function velvetRopeTicketHead (...args) {
    if (!this.headersSent) {
      try {
        args = withTicket(this, args, extra)
      } catch (e) {
        report(`velvet-rope: cannot add the ticket to the response: ${e && e.message}`,
          'VELVET_ROPE_TICKET_LOST', e)
      }
    }
    return writeHead.apply(this, args)
  }
  res.writeHead = velvetRopeTicketHead
  if (typeof res.writeHeader === 'function') res.writeHeader = velvetRopeTicketHead
}

/**
 * `writeHead`'s arguments once `extra` is on the response: headers given are put on the
 * response first, as Node would (`foldGiven`), so that none of them replaces the ticket.
 */
function withTicket (res, args, extra) {
  const at = headersAt(args)
  if (at >= 0) {
    const folded = foldedArgs(res, args, at)
    if (folded === null) return args
    args = folded
  }
  for (const [name, value] of extra) {
    const had = res.getHeader(name)
    if (had === undefined) res.setHeader(name, value)
    else if (![].concat(had).includes(value)) append(res, name, value)
  }
  return args
}

/**
 * Watches an Express response for origin commands (see `watchResponse`): `room` and `d` of a
 * request a room admitted, or null and null. Only when a room of the engine accepts them.
 */
function watchExpress (engine, req, res, room, d) {
  if (!engine.acceptsOriginCommands) return
  watchResponse(req, res, room === null ? null : decided(engine, room, d, emitWarning), emitWarning)
}

/**
 * Express middleware: `app.use(velvetRope.express(engine, { room: 'shop' }))`. Paths are
 * compared under both case rules unless the `caseSensitive` option says which (an app's
 * `case sensitive routing` does not say how its `express.Router()`s compare). The path is
 * the one the app routes from here on (`req.baseUrl` + `req.url`: a rewrite by a middleware
 * ahead is read as the app reads it).
 */
function express (engine, options = {}) {
  const routes = options.room === undefined && options.rooms === undefined
  // Without `caseSensitive`, either rule (`null`): an app's `case sensitive routing` does not
  // say how its `express.Router()`s and mounted apps compare (case-insensitively, whatever the
  // app says), so a path either rule puts in a room is decided, and one passes only when both
  // rules pass it.
  const caseSensitive = options.caseSensitive === undefined ? null : options.caseSensitive
  const skip = routes ? (needRoutes(engine), bypassOnly(options.bypass || [], caseSensitive)) : null
  const roomFor = routes ? null : router(engine, { ...options, caseSensitive })
  const everyPath = !routes && roomFor.everyPath === true
  engine.startTicking()
  return function velvetRope (req, res, next) {
    // The path as the app routes it from here on: `req.url` under the mount path, which a
    // middleware ahead may have rewritten (`req.originalUrl` keeps what the client sent). A
    // mounted layer keeps an absolute-form target's scheme and host in `req.url`: then the
    // target as sent (the core reads absolute form).
    const url = req.url
    const target = !req.baseUrl ? url : url.charCodeAt(0) === 47 ? req.baseUrl + url : req.originalUrl || url
    let room = null
    if (routes) {
      if (skip !== null && skip(target)) return pass(req, res, next)
      if (decidedBefore(req, engine, null, target) || routedRoomDecided(req, engine, target)) {
        return pass(req, res, next)
      }
    } else {
      room = everyPath ? roomFor() : roomFor(target)
      if (room === null || decidedBefore(req, engine, room.name, target)) return pass(req, res, next)
      if (!room.readsRequest) {
        const d = room.admit(cookieOf(req))
        if (d.admitted) {
          markDecided(req, engine, d, target, room.name)
          watchExpress(engine, req, res, room.name, d)
          ticketOnHead(res, d, emitWarning)
          return next()
        }
        return sendPage(res, room.name, d)
      }
    }
    const placed = engine.decideRequest(req, { room: room === null ? undefined : room.name, target })
    if (placed === null) return pass(req, res, next)
    const d = placed.decision
    if (room === null) markDecided(req, engine, d, target, null, placed.room)
    else markDecided(req, engine, d, target, placed.room)
    if (d.bypassed) return pass(req, res, next)
    if (d.admitted) {
      watchExpress(engine, req, res, placed.room, d)
      ticketOnHead(res, d, emitWarning)
      return next()
    }
    sendPage(res, placed.room, d)
  }

  /** On to the app for a request no room decides: its commands are only removed. */
  function pass (req, res, next) {
    watchExpress(engine, req, res, null, null)
    return next()
  }

  function sendPage (res, room, d) {
    const req = res.req
    // The page is ours, but a middleware ahead of this one may have set the command on it.
    watchExpress(engine, req, res, null, null)
    const page = engine.renderPage(room, d, req.headers.accept, req.headers['accept-language'],
      undefined, headerOf(req, 'velvet-rope-ticket'))
    res.status(page.status)
    for (const [name, value] of page.headers) res.append(name, value)
    res.send(page.body)
  }
}

/**
 * Whether a Fastify instance routes case-sensitively: its `routerOptions.caseSensitive`, else
 * its (deprecated) top-level `caseSensitive`, else Fastify's default (true).
 */
function fastifyCaseSensitive (instance) {
  const config = instance.initialConfig || {}
  const routerOptions = config.routerOptions || {}
  if (typeof routerOptions.caseSensitive === 'boolean') return routerOptions.caseSensitive
  return config.caseSensitive !== false
}

/**
 * A Fastify plugin: `await fastify.register(velvetRope.fastify, { engine, room: 'shop' })`. A
 * route can name its own room, or turn the waiting room off, with its config:
 * `{ config: { velvetRope: { room: 'checkout' } } }` or `{ config: { velvetRope: false } }`.
 * A request no route matches (a 404) is not decided.
 *
 * How it hooks in depends on what exists when the plugin loads:
 * - no route yet (the plugin registered with `await`, or the routes declared in plugins
 *   registered after it): each route gets its own `onRequest` hook as it is declared (the
 *   `onRoute` way, as `@fastify/rate-limit` does), bound to its room. A request reads no
 *   route options and a route without a room carries no hook (unless a room accepts origin
 *   commands: then one that only watches its replies for them).
 * - routes already declared (`fastify.register(...)` without `await`, then routes on the
 *   root: Fastify loads the plugin after them): one application-wide `onRequest` hook that
 *   reads each request's route options (`request.routeOptions`, an object Fastify builds per
 *   call: about 1 % of a hello-world request).
 * Origin commands are looked for on the raw response (`reply.raw`), watched from the
 * `onRequest` hook: after every `onSend` hook, and in hijacked replies too. An
 * application-wide `onSend` hook watches the replies no `onRequest` hook of the plugin saw (a
 * 404, a reply an earlier hook sent).
 * A route naming a room that does not exist fails when it is declared (or, for a route
 * declared before the plugin loaded, on its requests).
 */
function fastify (instance, options, done) {
  // A mistake (an unknown room, a bad prefix) rejects the awaited `register`, through
  // Fastify's plugin error path: thrown here, it would be an uncaught exception.
  try {
    setUp(instance, options)
  } catch (e) {
    return done(e)
  }
  done()
}

/** A report (see `watchResponse`) to the request's log, naming `room` (or none). */
function logTo (request, room) {
  return (message, code, err) => request.log.warn({ room: room ?? undefined, code, err }, message)
}

/** The Fastify plugin's work (see `fastify`). */
function setUp (instance, options) {
  const { engine } = options
  const hasDefault = options.room !== undefined || options.rooms !== undefined
  const caseSensitive = options.caseSensitive ?? fastifyCaseSensitive(instance)
  // Without `room` or `rooms`, a configuration with routes places every request (less the
  // plugin's own `bypass`); one without decides only routes naming a room.
  const routes = !hasDefault && engine.hasRoutes
  const skip = routes ? bypassOnly(options.bypass || [], caseSensitive) : null
  const roomFor = hasDefault ? router(engine, { ...options, caseSensitive }) : () => null
  const everyPath = !hasDefault || roomFor.everyPath === true
  const known = new Set(engine.rooms)
  engine.startTicking()

  function check (room, where) {
    if (!known.has(room)) {
      throw new UnknownRoomError(`${where}: no room named \`${room}\` in the configuration ` +
        `(its rooms: ${[...known].join(', ')})`, 'ERR_VELVET_ROPE_UNKNOWN_ROOM')
    }
  }

  /**
   * Watches a reply's raw response for origin commands (see `watchResponse`): `room` and `d`
   * of a request a room admitted, or null and null. Refusals go to the request's log. The
   * raw response, not Fastify's `onSend`: that runs before the `onSend` hooks registered
   * after the plugin (which may set the header), and never for a hijacked reply.
   */
  function watchReply (request, reply, room, d) {
    const report = logTo(request, room)
    watchResponse(request.raw, reply.raw, room === null ? null : decided(engine, room, d, report), report)
  }

  /**
   * Every reply loses the command, decided or not (a bypass, a route without a room, a 404),
   * when a room accepts commands: what the hooks call first.
   */
  function watchAny (request, reply) {
    if (engine.acceptsOriginCommands && reply.raw[kWatch] === undefined) watchReply(request, reply, null, null)
  }

  /**
   * Decides a request for `room` (null: the configuration's routes choose): on to the route,
   * or the waiting page.
   */
  function decide (room, request, reply, next) {
    if (decidedBefore(request.raw, engine, room === null ? null : room.name, request.url)) return next()
    if (room !== null && !room.readsRequest) {
      const d = room.admit(cookieOf(request.raw))
      if (d.admitted) {
        markDecided(request.raw, engine, d, request.url, room.name)
        if (engine.acceptsOriginCommands) watchReply(request, reply, room.name, d)
        if (d.setCookie) ticketOnHead(reply.raw, d, logTo(request, room.name))
        return next()
      }
      return sendPage(room.name, d, request, reply)
    }
    if (room === null && skip !== null && skip(request.url)) return next()
    if (room === null && routedRoomDecided(request.raw, engine, request.url)) return next()
    const placed = engine.decideRequest(request.raw, {
      room: room === null ? undefined : room.name,
      target: request.url
    })
    if (placed === null) return next()
    const d = placed.decision
    if (room === null) markDecided(request.raw, engine, d, request.url, null, placed.room)
    else markDecided(request.raw, engine, d, request.url, placed.room)
    if (d.bypassed) return next()
    if (d.admitted) {
      if (engine.acceptsOriginCommands) watchReply(request, reply, placed.room, d)
      if (d.setCookie) ticketOnHead(reply.raw, d, logTo(request, placed.room))
      return next()
    }
    sendPage(placed.room, d, request, reply)
  }

  function sendPage (room, d, request, reply) {
    const page = engine.renderPage(room, d, request.headers.accept,
      request.headers['accept-language'], undefined, headerOf(request.raw, 'velvet-rope-ticket'))
    reply.code(page.status)
    for (const [name, value] of page.headers) reply.header(name, value)
    reply.send(page.body)
  }

  // A router over "(empty tree)" has no route: anything else (whatever Fastify prints) takes
  // the application-wide hook, which is right for every route.
  const perRoute = instance.printRoutes() === '(empty tree)'

  instance.addHook('onRoute', (route) => {
    const own = route.config ? route.config.velvetRope : undefined
    const named = own !== undefined && own !== null && own !== false && own.room !== undefined
    if (named) check(own.room, `route ${route.method} ${route.url}`)
    if (!perRoute) return
    let hook
    const room = own === false ? null : named ? engine.room(own.room) : everyPath ? roomFor() : undefined
    if (own === false || (room === null && !routes)) {
      // No room: the route's replies are only watched for commands to take off, and only in
      // an engine that accepts them (else the route carries no hook at all). Here, not in
      // onSend, for a reply the route hijacks. (A reload that turns commands on leaves such
      // routes to the onSend hook below: only a hijacked reply of theirs keeps the header.)
      if (!engine.acceptsOriginCommands) return
      hook = function velvetRopeCommands (request, reply, next) {
        watchAny(request, reply)
        next()
      }
    } else if (room !== undefined) {
      // A room, or null: the configuration's routes choose. Callback hooks, not async ones:
      // no promise per request.
      hook = function velvetRopeRoute (request, reply, next) {
        watchAny(request, reply)
        decide(room, request, reply, next)
      }
    } else {
      hook = function velvetRopeRoute (request, reply, next) {
        watchAny(request, reply)
        const room = roomFor(request.url)
        if (room === null) return next()
        decide(room, request, reply, next)
      }
    }
    // First among the route's own hooks (Fastify runs every application-wide onRequest hook
    // before them, the application's own included: README); a new array (the route's may be
    // shared with the HEAD route Fastify adds, which gets its own hook).
    const theirs = route.onRequest
    route.onRequest = theirs === undefined || theirs === null ? [hook] : [hook].concat(theirs)
  })
  if (perRoute && engine.acceptsOriginCommands) {
    // Application-wide hooks run before the routes' own: one the application adds after the
    // plugin may hijack the reply and write it raw, and the not-found handler has no route
    // hook at all. A light hook watches those replies from the start. (Only in an engine that
    // accepts commands when the plugin loads, as for routes without a room above.)
    instance.addHook('onRequest', function velvetRopeCommands (request, reply, next) {
      watchAny(request, reply)
      next()
    })
  }
  if (!perRoute) {
    instance.addHook('onRequest', function velvetRope (request, reply, next) {
      watchAny(request, reply)
      const route = request.routeOptions
      if (route.url === undefined) return next() // no route matched: a 404
      const own = route.config ? route.config.velvetRope : undefined
      if (own === false) return next()
      // An unknown room (a route declared before the plugin loaded) throws UnknownRoomError.
      const room = own && own.room !== undefined
        ? engine.room(own.room)
        : everyPath ? roomFor() : roomFor(request.url)
      if (room === null && !routes) return next()
      decide(room, request, reply, next)
    })
  }
  // The replies no hook above watched (a 404 when each route has its own hook, one that an
  // earlier onRequest hook sent) are watched from here: their headers are not out yet.
  instance.addHook('onSend', function velvetRopeCommands (request, reply, payload, done) {
    watchAny(request, reply)
    done(null, payload)
  })
  instance.addHook('onClose', (_instance, closed) => {
    engine.stopTicking()
    closed()
  })
}
// Applies to the whole application, not an encapsulated child (as fastify-plugin does).
fastify[Symbol.for('skip-override')] = true
fastify[Symbol.for('fastify.display-name')] = 'velvet-rope'

module.exports = { express, fastify, router, cookieOf, ticketHeaders, isRevokeCommand, COMMAND_HEADER }
