'use strict'
/**
 * velvet-rope: an in-process admission engine for Node.js.
 *
 * A virtual waiting room (`Engine`, with Express and Fastify middleware) and capacity leases
 * (`Coordinator`, `RateLimiter`, `Gauge`), decided in the process, in nanoseconds, with no
 * network hop. The classes call the native module's free functions (`binding.js`, generated
 * by napi-rs): a native class method costs about ten times a free function call.
 */

const { EventEmitter } = require('node:events')
const native = require('./binding.js')
const errors = require('./errors.js')
const leases = require('./leases.js')
const middleware = require('./middleware.js')
const { emitEach, eventOf, familyOf } = require('./native_shapes.js')

const { convert } = errors

/** The steady answer (admitted, nothing to set), shared: the common case builds no object. */
const STEADY = Object.freeze({ outcome: 'admit', admitted: true })

/**
 * Engines' native handles are freed when the `Engine` is collected; its ticker (which holds
 * the handle, not the engine) is stopped then too.
 */
const engines = new FinalizationRegistry((state) => {
  if (state.ticker !== null) clearInterval(state.ticker)
  native.engineFree(state.h)
})

/**
 * One room of an engine (`engine.room(name)`): what the middleware calls per request. Its
 * `admit` is the engine's for this room, cheaper by the room's name not being read out of a
 * string on every call. The room is looked up in the engine's current configuration on every
 * call: after a reload that drops it, its calls throw `UnknownRoomError`.
 */
class Room {
  #admit
  #engine
  #name
  /** Whether deciding reads the whole request (rules, header tickets); known on first use. */
  #reads

  /** Use `engine.room(name)`. */
  constructor (engine, admit, name) {
    this.#engine = engine
    this.#admit = admit
    this.#name = name
  }

  /** The room's name. */
  get name () {
    return this.#name
  }

  /** The engine deciding for the room. */
  get engine () {
    return this.#engine
  }

  /** `engine.admit(room.name, cookie, nowMs)`. */
  admit (cookie, nowMs) {
    try {
      return (nowMs === undefined ? this.#admit(cookie) : this.#admit(cookie, nowMs)) ?? STEADY
    } catch (e) { throw convert(e) }
  }

  /** `engine.renderPage(room.name, decision, accept, acceptLanguage, nowMs, ticket)`. */
  renderPage (decision, accept, acceptLanguage, nowMs, ticket) {
    return this.#engine.renderPage(this.#name, decision, accept, acceptLanguage, nowMs, ticket)
  }

  /**
   * Whether deciding in this room reads more of a request than its `Cookie` header: it has
   * rules, or takes tickets from the `Velvet-Rope-Ticket` header (the middleware then hands
   * over the whole request with `engine.decideRequest`). Asked once per configuration.
   */
  get readsRequest () {
    if (this.#reads === undefined) {
      try {
        this.#reads = native.engineRoomReadsRequest(this.#engine.handle, this.#name)
      } catch (e) { throw convert(e) }
    }
    return this.#reads
  }

  /** Forgets what the configuration said (after a reload). */
  forget () {
    this.#reads = undefined
  }
}

/**
 * What the core reads of `req` (Node's `IncomingMessage`, or `{method, url, rawHeaders,
 * socket}`), its target `target` when given (a router's rewrite) else `req.url`.
 */
function requestOf (req, target) {
  const socket = req.socket || req.connection
  return {
    method: req.method || 'GET',
    target: target || req.url || '/',
    rawHeaders: req.rawHeaders || [],
    peer: socket && socket.remoteAddress ? socket.remoteAddress : undefined
  }
}

/** The admission engine: one per process, or one per state file shared by processes. */
class Engine extends EventEmitter {
  #h
  #state
  /** `Room` objects by name, made on first use. */
  #rooms = new Map()
  /**
   * Whether a room accepts origin commands: read per request by the middleware, so kept here
   * (it changes only with the configuration: made anew by `reload`) rather than asked of the
   * native side each time.
   */
  #accepts

  /**
   * From configuration text (TOML or JSON); `Engine.fromFile` reads a file. With
   * `sharedMemory` (a path), the counters live in that state file, mapped by every process
   * that opens it: `node:cluster` workers share exact counts, and counts survive restarts.
   */
  constructor (config, { sharedMemory, nowMs, isPath = false } = {}) {
    super()
    try {
      this.#h = native.engineNew(String(config), isPath, sharedMemory, nowMs)
    } catch (e) { throw convert(e) }
    this.#state = { h: this.#h, ticker: null }
    engines.register(this, this.#state)
    this.#accepts = native.engineAcceptsOriginCommands(this.#h)
  }

  /** The native handle (for the middleware). */
  get handle () {
    return this.#h
  }

  /**
   * Decides a whole request (`req`: Node's `IncomingMessage`, or `{method, url, rawHeaders,
   * socket}`; `target` instead of `req.url`, for a router that rewrote it): in `room` when given, else in the room the configuration's `routes` place it
   * in; the room's rules first, its ticket from the cookies or (in a room with
   * `ticket_header = true`) the `Velvet-Rope-Ticket` header, the client from the socket's
   * peer or, behind `settings.trusted_proxies`, `X-Forwarded-For`. Returns `{room,
   * decision}`, or null when no route takes the request (it passes untouched); a
   * `decision.bypassed` request passes untouched too.
   */
  decideRequest (req, { room, nowMs, target } = {}) {
    try {
      return native.engineDecideRequest(this.#h, requestOf(req, target), room, nowMs)
    } catch (e) { throw convert(e) }
  }

  /**
   * The room `decideRequest` without a `room` would decide `req` in (`target` instead of
   * `req.url`), deciding nothing: its name, or null when no route takes the request or when
   * it would be refused as one several rooms might govern (`decision.ambiguous`).
   */
  roomForRequest (req, { nowMs, target } = {}) {
    try {
      return native.engineRoomForRequest(this.#h, requestOf(req, target), nowMs)
    } catch (e) { throw convert(e) }
  }

  /**
   * Whether any room accepts origin commands (`enabled_origin_commands`): the middleware looks
   * at responses for `Velvet-Rope-Command` only then.
   */
  get acceptsOriginCommands () {
    return this.#accepts
  }

  /** Whether any room has `routes` (else `decideRequest` without a room places nothing). */
  get hasRoutes () {
    return native.engineHasRoutes(this.#h)
  }

  static fromFile (path, options = {}) {
    return new Engine(path, { ...options, isPath: true })
  }

  /**
   * Decides one request. `cookie` is the request's whole `Cookie` header (or undefined), read
   * one byte per character as Node's HTTP parser makes header strings. Synchronous; never
   * blocks.
   */
  admit (room, cookie, nowMs) {
    try {
      // Without `nowMs` the native side reads the clock and skips a type check.
      return (nowMs === undefined
        ? native.engineAdmit(this.#h, room, cookie)
        : native.engineAdmit(this.#h, room, cookie, nowMs)) ?? STEADY
    } catch (e) { throw convert(e) }
  }

  /**
   * A room of this engine, for deciding its requests (`room.admit(cookie)`): the same `Room`
   * for the same name. Throws `UnknownRoomError` if the configuration has no such room.
   */
  room (name) {
    let room = this.#rooms.get(name)
    if (room === undefined) {
      try {
        room = new Room(this, native.engineRoom(this.#h, name), name)
      } catch (e) { throw convert(e) }
      this.#rooms.set(name, room)
    }
    return room
  }

  /** Decides one request given the ticket cookie's value itself (no header parsing). */
  admitTicket (room, ticket, nowMs) {
    try {
      return native.engineAdmitTicket(this.#h, room, ticket, nowMs) ?? STEADY
    } catch (e) { throw convert(e) }
  }

  /**
   * Ends the session of the visitor holding `ticket` (the value of `room`'s ticket, as in its
   * cookie): its seat is freed at once and the ticket refused from then on, in every process
   * sharing the counters. Returns the outcome's name: `'revoked'`, `'already_revoked'`,
   * `'no_session'`, `'not_enabled'` (the room's `enabled_origin_commands` lack `"revoke"`),
   * or `'refused_full'`, `'refused_unsent'`, `'refused_busy'`
   * (nothing changed). Throws `UnknownRoomError` for a room not configured.
   */
  revoke (room, ticket, nowMs) {
    try {
      return native.engineRevoke(this.#h, room, ticket, nowMs)
    } catch (e) { throw convert(e) }
  }

  /**
   * Ends the session of a request's visitor, for a response carrying `Velvet-Rope-Command:
   * revoke` (what the middleware calls): the ticket is `issued` (the one the request's own
   * decision handed out, `decision.ticket`) if given, else the room's ticket in `cookie` (the
   * request's whole `Cookie` header), else, in a room with `ticket_header = true`,
   * `ticketHeader` (its `Velvet-Rope-Ticket` header). The outcome's name, as `revoke`.
   */
  revokeRequest (room, { cookie, ticketHeader, issued, nowMs } = {}) {
    try {
      return native.engineRevokeRequest(this.#h, room, cookie ?? undefined,
        ticketHeader ?? undefined, issued ?? undefined, nowMs)
    } catch (e) { throw convert(e) }
  }

  /**
   * The `Set-Cookie` value that clears `room`'s ticket cookie (`Max-Age=0`, the cookie's own
   * path and attributes): for the response that ended the visitor's session.
   */
  clearCookie (room) {
    try {
      return native.engineClearCookie(this.#h, room)
    } catch (e) { throw convert(e) }
  }

  /** Folds the counters into a new snapshot (about once a second: see `startTicking`). */
  tick (nowMs) {
    try {
      native.engineTick(this.#h, nowMs)
    } catch (e) { throw convert(e) }
  }

  /** Ticks every `intervalMs` on an `unref`'d timer until `stopTicking` (idempotent). */
  startTicking (intervalMs = 1000) {
    const state = this.#state
    if (state.ticker === null) {
      const h = state.h
      // Weakly: a ticking engine nobody holds is still collected (and its ticker stopped).
      const self = new WeakRef(this)
      state.ticker = setInterval(() => {
        native.engineTick(h)
        self.deref()?.emitEvents()
      }, intervalMs)
      state.ticker.unref()
    }
    return this
  }

  /**
   * Every event logged since the last call, oldest first (a room's queue starting or
   * stopping, a scheduled event's phases, a reload done or refused, the cluster store lost or
   * found): `{event, atMs, room, fields, warning, line}`, `line` being the event as one line
   * of JSON. `startTicking` emits them as `'event'` after each tick.
   */
  drainEvents () {
    return native.engineDrainEvents(this.#h).map(eventOf)
  }

  /**
   * Emits each event logged since the last call as `'event'` (see `drainEvents`). A listener
   * that throws does not stop the ticker or the next events (its error becomes a process
   * warning, `VELVET_ROPE_EVENT_LISTENER`); as with any emitter, the listeners after it do
   * not see that event.
   */
  emitEvents () {
    emitEach(this, this.drainEvents())
  }

  stopTicking () {
    const state = this.#state
    if (state.ticker !== null) {
      clearInterval(state.ticker)
      state.ticker = null
    }
  }

  /** Replaces the configuration (text); a bad one throws and the running one keeps serving. */
  reload (config, { isPath = false } = {}) {
    try {
      native.engineReload(this.#h, String(config), isPath)
    } catch (e) { throw convert(e) }
    this.#accepts = native.engineAcceptsOriginCommands(this.#h)
    for (const room of this.#rooms.values()) room.forget()
  }

  /**
   * The cluster tier's sync loop in this process (`null` without a `[cluster]` table, which
   * starts it): `{syncs, failures, outages, inOutage, hosts, lastError}`.
   */
  clusterStatus () {
    try {
      return native.engineClusterStatus(this.#h)
    } catch (e) { throw convert(e) }
  }

  /** A room's figures as last published by a tick. */
  stats (room) {
    try {
      return native.engineStats(this.#h, room)
    } catch (e) { throw convert(e) }
  }

  /** Every room's figures as one JSON text (what a status endpoint serves). */
  statsJson () {
    return native.engineStatsJson(this.#h)
  }

  /**
   * Every room's metrics in the OpenMetrics text format (what Prometheus scrapes; serve it as
   * `application/openmetrics-text; version=1.0.0; charset=utf-8`), ending with `# EOF`.
   */
  metricsText () {
    return native.engineMetricsText(this.#h)
  }

  /**
   * Every room's metrics, family by family: `{name, type, help, samples}`, each sample
   * `{name, labels, value}` (`labels` an object, `room` first). `prometheus.register` hands
   * them to prom-client.
   */
  metrics () {
    return native.engineMetrics(this.#h).map(familyOf)
  }

  /**
   * The waiting page for a queue or reject decision (`null` for admit): `{status,
   * contentType, body, headers}`, `headers` being `[name, value]` pairs to send (`Set-Cookie`
   * included). `accept` is the request's `Accept` header; `acceptLanguage` its
   * `Accept-Language` (in a room with `accept_language = true` it picks the built-in page's
   * language); `nowMs` (default: the system clock) picks the event in force and its countdown;
   * `ticket` the request's `Velvet-Rope-Ticket` header (echoed in JSON for a room taking
   * header tickets, when the decision did not change it).
   */
  renderPage (room, decision, accept, acceptLanguage, nowMs, ticket) {
    try {
      return native.engineRenderPage(this.#h, room, decision, accept ?? undefined,
        acceptLanguage ?? undefined, nowMs, ticket ?? undefined)
    } catch (e) { throw convert(e) }
  }

  /** Names of the configured rooms. */
  get rooms () {
    return native.engineRooms(this.#h)
  }

  /** Every room's figures as last published, `{ [room]: stats }`. */
  get statsByRoom () {
    return JSON.parse(this.statsJson()).rooms
  }

  /** The name of a room's ticket cookie. */
  cookieName (room) {
    try {
      return native.engineCookieName(this.#h, room)
    } catch (e) { throw convert(e) }
  }
}

/** Prometheus metrics of an engine: `prometheus.register`, `.express`, `.fastify`. */
const prometheus = require('./prometheus.js')

/** Bytes of a state file for this configuration (text). */
function sharedMemorySize (config) {
  try {
    return native.sharedMemorySize(String(config), false)
  } catch (e) { throw convert(e) }
}

// Every export a name of its own (no `a: b.c`): Node reads a CommonJS module's names for
// `import { express } from 'velvet-rope'` from this literal, and stops at the first value
// that is not a plain identifier.
const { Coordinator, RateLimiter, Gauge, Permit } = leases
const { express, fastify, isRevokeCommand, COMMAND_HEADER } = middleware
const { nowMs, noop } = native
const {
  VelvetRopeError,
  ConfigError,
  UnknownRoomError,
  SharedMemoryError,
  InvalidArgumentError,
  LeaseError,
  UnknownResourceError,
  CapacityError
} = errors

module.exports = {
  Engine,
  prometheus,
  Room,
  Coordinator,
  RateLimiter,
  Gauge,
  Permit,
  express,
  fastify,
  sharedMemorySize,
  isRevokeCommand,
  COMMAND_HEADER,
  nowMs,
  noop,
  VelvetRopeError,
  ConfigError,
  UnknownRoomError,
  SharedMemoryError,
  InvalidArgumentError,
  LeaseError,
  UnknownResourceError,
  CapacityError
}
