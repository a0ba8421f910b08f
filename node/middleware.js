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

/** A header of Node's request by its lower-case name (built lazily: off the admitted path). */
function headerOf (req, name) {
  const v = req.headers[name]
  return Array.isArray(v) ? v[0] : v
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
      if (skip !== null && skip(target)) return next()
    } else {
      room = everyPath ? roomFor() : roomFor(target)
      if (room === null) return next()
      if (!room.readsRequest) {
        const d = room.admit(cookieOf(req))
        if (d.admitted) {
          if (d.setCookie) res.append('Set-Cookie', d.setCookie)
          return next()
        }
        return sendPage(res, room.name, d)
      }
    }
    const placed = engine.decideRequest(req, { room: room === null ? undefined : room.name, target })
    if (placed === null) return next()
    const d = placed.decision
    if (d.bypassed) return next()
    if (d.admitted) {
      for (const [name, value] of ticketHeaders(d)) res.append(name, value)
      return next()
    }
    sendPage(res, placed.room, d)
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
      return next()
    }
    sendPage(placed.room, d, request, reply)
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
  instance.addHook('onClose', (_instance, closed) => {
    engine.stopTicking()
    closed()
  })
}
// Applies to the whole application, not an encapsulated child (as fastify-plugin does).
fastify[Symbol.for('skip-override')] = true
fastify[Symbol.for('fastify.display-name')] = 'velvet-rope'

module.exports = { express, fastify, router, cookieOf, ticketHeaders }
