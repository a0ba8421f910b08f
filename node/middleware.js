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
 * `Velvet-Rope-Command: revoke` (in a room with `enabled_origin_commands = ["revoke"]`). The
 * header never reaches the client (it is removed from every response that passes the
 * middleware, decided or not); for a request a room admitted (not a bypass), the visitor's
 * ticket is revoked (`engine.revokeRequest`: the ticket this request's decision issued, else
 * the one it brought) and, when the session ended, the response clears the ticket cookie
 * instead of setting it and loses the `Velvet-Rope-Ticket` header the middleware added.
 * Refusals and failures are reported (Express: `process.emitWarning`, code
 * `VELVET_ROPE_REVOKE_REFUSED` or `VELVET_ROPE_REVOKE_FAILED`; Fastify: `request.log.warn`);
 * the response goes out whatever happens.
 */

const native = require('./binding.js')
const { UnknownRoomError, convert } = require('./errors.js')

/**
 * Which room decides a request (a `Room`, or null), given its target as received
 * (`req.url`): the room of the longest prefix of `rooms` the path is under, else `room`
 * (the default; none: such paths pass). Paths under a `bypass` prefix never decide. The
 * decision is the core's (`routerNew`): the target is read the ways servers and frameworks
 * read it (absolute form, percent-escapes, `..` and `//`, `\`, case as `caseSensitive`
 * says), and a request is decided if any of those readings puts it in a room; only one
 * that every reading puts under a bypass prefix passes.
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
      caseSensitive: caseSensitive !== false
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
      caseSensitive: caseSensitive !== false
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

/** `list` (a header's value or values) without the first `value` in it, as an array. */
function without (list, value) {
  const out = list === undefined || list === null ? [] : [].concat(list)
  const i = value ? out.indexOf(value) : -1
  if (i >= 0) out.splice(i, 1)
  return out
}

/**
 * The headers a `writeHead` call was given (an object, a flat `[name, value, ...]` array or
 * an array of pairs) without their `Velvet-Rope-Command`: `[headers, values]`, `values`
 * null (and `headers` as given) when there were none. A copy: the caller's object may be
 * shared between responses.
 */
function stripGiven (given) {
  let values = null
  if (Array.isArray(given)) {
    const pairs = given.length > 0 && Array.isArray(given[0])
    const out = []
    const step = pairs ? 1 : 2
    for (let i = 0; i < given.length; i += step) {
      const name = pairs ? given[i][0] : given[i]
      const value = pairs ? given[i][1] : given[i + 1]
      if (typeof name === 'string' && name.length === 19 && name.toLowerCase() === COMMAND) {
        values = (values || []).concat(value)
      } else if (pairs) {
        out.push(given[i])
      } else {
        out.push(name, value)
      }
    }
    return values === null ? [given, null] : [out, values]
  }
  for (const name of Object.keys(given)) {
    if (name.length === 19 && name.toLowerCase() === COMMAND) {
      if (values === null) given = { ...given }
      values = (values || []).concat(given[name])
      delete given[name]
    }
  }
  return [given, values]
}

/** A name's key in an object of headers (any case), or undefined. */
function keyOf (headers, name) {
  for (const key of Object.keys(headers)) if (key.toLowerCase() === name) return key
  return undefined
}

/**
 * What Express's response does before its headers go out (`res.writeHead`, which Node calls
 * itself when the app does not): `Velvet-Rope-Command` removed, from the response's headers
 * and from those given to `writeHead`; for a request `room` admitted with `d` (else null),
 * a revoke among them carried out. `args` are `writeHead`'s, changed in place.
 */
function commandsOut (engine, res, args, room, d) {
  let values = null
  const own = res.getHeader(COMMAND)
  if (own !== undefined) {
    values = [].concat(own)
    res.removeHeader(COMMAND)
  }
  const last = args.length - 1
  const given = last >= 1 && args[last] !== null && typeof args[last] === 'object' ? args[last] : null
  if (given !== null) {
    const [stripped, found] = stripGiven(given)
    if (found !== null) {
      args[last] = stripped
      values = (values || []).concat(found)
    }
  }
  if (values === null || room === null || !isRevokeCommand(values)) return
  if (!revokeFor(engine, room, d, res.req, emitWarning)) return
  const clear = engine.clearCookie(room)
  const headers = args[last] !== null && typeof args[last] === 'object' && last >= 1 ? args[last] : null
  const key = headers !== null && !Array.isArray(headers) ? keyOf(headers, 'set-cookie') : undefined
  if (key !== undefined) {
    // Given to writeHead, they replace the response's own: the clearing cookie joins them.
    args[last] = { ...headers, [key]: without(headers[key], d.setCookie).concat(clear) }
  } else {
    res.setHeader('Set-Cookie', without(res.getHeader('set-cookie'), d.setCookie).concat(clear))
  }
  if (d.ticketHeader && d.ticket && res.getHeader('velvet-rope-ticket') === d.ticket) {
    res.removeHeader('Velvet-Rope-Ticket')
  }
}

/**
 * Watches an Express response's headers as they go out (see `commandsOut`): `room` and `d`
 * of a request a room admitted, or null and null.
 */
function watchExpress (engine, res, room, d) {
  // Responses are looked at for origin commands only when a room accepts them.
  if (!engine.acceptsOriginCommands) return
  const writeHead = res.writeHead
  res.writeHead = function velvetRopeWriteHead (...args) {
    res.writeHead = writeHead
    try {
      commandsOut(engine, this, args, room, d)
    } catch (e) {
      emitWarning(`velvet-rope: cannot carry out the origin's commands: ${e && e.message}`,
        'VELVET_ROPE_REVOKE_FAILED')
    }
    return writeHead.apply(this, args)
  }
}

/**
 * Express middleware: `app.use(velvetRope.express(engine, { room: 'shop' }))`. Paths are
 * compared as the app's router compares them: case-insensitively unless the app sets `case
 * sensitive routing` (read from `req.app` on the first request of each app), or as the
 * `caseSensitive` option says.
 */
function express (engine, options = {}) {
  const routes = options.room === undefined && options.rooms === undefined
  const fixed = options.caseSensitive
  let sensitive = null
  let insensitive = null
  let skipSensitive = null
  let skipInsensitive = null
  if (routes) {
    needRoutes(engine)
    const bypass = options.bypass || []
    skipSensitive = fixed === false ? null : bypassOnly(bypass, true)
    skipInsensitive = fixed === true ? null : bypassOnly(bypass, false)
  } else {
    sensitive = fixed === false ? null : router(engine, { ...options, caseSensitive: true })
    insensitive = fixed === true ? null : router(engine, { ...options, caseSensitive: false })
  }
  const everyPath = !routes && (sensitive || insensitive).everyPath === true
  let app = null
  let roomFor = insensitive || sensitive
  let skip = routes && fixed === true ? skipSensitive : skipInsensitive
  engine.startTicking()
  return function velvetRope (req, res, next) {
    if (fixed === undefined && req.app !== app) {
      app = req.app
      const setting = app && typeof app.get === 'function' && app.get('case sensitive routing')
      roomFor = setting ? sensitive : insensitive
      skip = setting ? skipSensitive : skipInsensitive
    }
    const target = req.originalUrl || req.url
    let room = null
    if (routes) {
      if (skip !== null && skip(target)) return pass(res, next)
    } else {
      room = everyPath ? roomFor() : roomFor(target)
      if (room === null) return pass(res, next)
      if (!room.readsRequest) {
        const d = room.admit(cookieOf(req))
        if (d.admitted) {
          if (d.setCookie) res.append('Set-Cookie', d.setCookie)
          watchExpress(engine, res, room.name, d)
          return next()
        }
        return sendPage(res, room.name, d)
      }
    }
    const placed = engine.decideRequest(req, { room: room === null ? undefined : room.name, target })
    if (placed === null) return pass(res, next)
    const d = placed.decision
    if (d.bypassed) return pass(res, next)
    if (d.admitted) {
      for (const [name, value] of ticketHeaders(d)) res.append(name, value)
      watchExpress(engine, res, placed.room, d)
      return next()
    }
    sendPage(res, placed.room, d)
  }

  /** On to the app for a request no room decides: its commands are only removed. */
  function pass (res, next) {
    watchExpress(engine, res, null, null)
    return next()
  }

  function sendPage (res, room, d) {
    const req = res.req
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
 *   route options and a route without a room carries no hook.
 * - routes already declared (`fastify.register(...)` without `await`, then routes on the
 *   root: Fastify loads the plugin after them): one application-wide `onRequest` hook that
 *   reads each request's route options (`request.routeOptions`, an object Fastify builds per
 *   call: about 1 % of a hello-world request).
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

/** Where the Fastify plugin keeps, on a request a room admitted, the room and its decision. */
const kRoom = Symbol('velvet-rope room')
const kDecision = Symbol('velvet-rope decision')

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
   * Decides a request for `room` (null: the configuration's routes choose): on to the route,
   * or the waiting page.
   */
  function decide (room, request, reply, next) {
    if (room !== null && !room.readsRequest) {
      const d = room.admit(cookieOf(request.raw))
      if (d.admitted) {
        if (d.setCookie) reply.header('set-cookie', d.setCookie)
        request[kRoom] = room.name
        request[kDecision] = d
        return next()
      }
      return sendPage(room.name, d, request, reply)
    }
    if (room === null && skip !== null && skip(request.url)) return next()
    const placed = engine.decideRequest(request.raw, {
      room: room === null ? undefined : room.name,
      target: request.url
    })
    if (placed === null) return next()
    const d = placed.decision
    if (d.bypassed) return next()
    if (d.admitted) {
      for (const [name, value] of ticketHeaders(d)) reply.header(name, value)
      request[kRoom] = placed.room
      request[kDecision] = d
      return next()
    }
    sendPage(placed.room, d, request, reply)
  }

  /**
   * Before any reply goes out: `Velvet-Rope-Command` removed; for a request a room admitted,
   * a revoke among its values carried out (the reply then clears the ticket cookie instead of
   * setting it).
   */
  function commands (request, reply, payload, done) {
    const values = reply.getHeader(COMMAND)
    if (values === undefined) return done(null, payload)
    try {
      reply.removeHeader(COMMAND)
      if (!reply.raw.headersSent) reply.raw.removeHeader(COMMAND)
      const room = request[kRoom]
      const d = request[kDecision]
      if (room !== null && isRevokeCommand(values) &&
          revokeFor(engine, room, d, request.raw, (message, code, e) => {
            request.log.warn({ room, code, err: e }, message)
          })) {
        const cookies = without(reply.getHeader('set-cookie'), d.setCookie)
        cookies.push(engine.clearCookie(room))
        reply.removeHeader('set-cookie')
        for (const c of cookies) reply.header('set-cookie', c)
        if (d.ticketHeader && d.ticket && reply.getHeader('velvet-rope-ticket') === d.ticket) {
          reply.removeHeader('velvet-rope-ticket')
        }
      }
    } catch (e) {
      request.log.warn({ err: e }, "velvet-rope: cannot carry out the origin's commands")
    }
    done(null, payload)
  }

  function sendPage (room, d, request, reply) {
    const page = engine.renderPage(room, d, request.headers.accept,
      request.headers['accept-language'], undefined, headerOf(request, 'velvet-rope-ticket'))
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
    if (!perRoute || own === false) return
    let hook
    if (named || everyPath) {
      const room = named ? engine.room(own.room) : roomFor()
      if (room === null && !routes) return
      // Callback hooks, not async ones: no promise per request.
      hook = function velvetRopeRoute (request, reply, next) {
        decide(room, request, reply, next)
      }
    } else {
      hook = function velvetRopeRoute (request, reply, next) {
        const room = roomFor(request.url)
        if (room === null) return next()
        decide(room, request, reply, next)
      }
    }
    // First among the route's own hooks, as an application-wide one would run; a new array
    // (the route's may be shared with the HEAD route Fastify adds, which gets its own hook).
    const theirs = route.onRequest
    route.onRequest = theirs === undefined || theirs === null ? [hook] : [hook].concat(theirs)
  })
  if (!perRoute) {
    instance.addHook('onRequest', function velvetRope (request, reply, next) {
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
  // Every reply, decided or not (a bypass, a route without a room, a 404), loses the command.
  instance.decorateRequest(kRoom, null)
  instance.decorateRequest(kDecision, null)
  instance.addHook('onSend', commands)
  instance.addHook('onClose', (_instance, closed) => {
    engine.stopTicking()
    closed()
  })
}
// Applies to the whole application, not an encapsulated child (as fastify-plugin does).
fastify[Symbol.for('skip-override')] = true
fastify[Symbol.for('fastify.display-name')] = 'velvet-rope'

module.exports = { express, fastify, router, cookieOf, ticketHeaders, isRevokeCommand, COMMAND_HEADER }
