/**
 * velvet-rope: an in-process admission engine for Node.js. A virtual waiting room (`Engine`,
 * with Express and Fastify middleware) and capacity leases (`Coordinator`, `RateLimiter`,
 * `Gauge`), decided in the process with no network hop.
 *
 * Written by hand over the generated `binding.d.ts` (the native functions).
 */

import { EventEmitter } from 'node:events'
import type {
  ClusterStatusObject,
  DecisionObject,
  LeaseObject,
  PageObject,
  RoomStatsObject
} from './binding'

/** What happens to a request. */
export type Outcome = 'admit' | 'queue' | 'reject'

/** A decision: admitted or not, the ticket cookie to set, and the queue's figures. */
export interface Decision extends DecisionObject {
  outcome: Outcome
}

/** A waiting page: status, content type, body, and every header to send. */
export type Page = PageObject

/** A room's figures as last published by a tick. */
export type RoomStats = RoomStatsObject

/** The cluster tier's sync loop in this process (a `[cluster]` table starts it). */
export type ClusterStatus = ClusterStatusObject

/** A lease: what a client may use, until when. */
export type Lease = LeaseObject

/** What `engine.decideRequest` reads of a request (Node's `IncomingMessage` has it all). */
export interface RequestLike {
  method?: string
  url?: string
  /** Names and values alternating, as Node's `req.rawHeaders`. */
  rawHeaders?: string[]
  socket?: { remoteAddress?: string | undefined } | null
}

/**
 * What a revocation did: the session ended now (`revoked`) or before (`already_revoked`);
 * no valid admission ticket to revoke (`no_session`); the room does not accept the command
 * (`not_enabled`: its `enabled_origin_commands` lack `"revoke"`); or refused, nothing
 * changed (`refused_full`: `max_revocations` kept already; `refused_unsent`: the cluster's
 * outbox is full; `refused_busy`: another process held the lock).
 */
export type Revocation =
  | 'revoked'
  | 'already_revoked'
  | 'no_session'
  | 'not_enabled'
  | 'refused_full'
  | 'refused_unsent'
  | 'refused_busy'

/** What `engine.revokeRequest` reads of a request. */
export interface RevokeRequestOptions {
  /** The request's whole `Cookie` header. */
  cookie?: string | null
  /** The request's `Velvet-Rope-Ticket` header (read in rooms with `ticket_header = true`). */
  ticketHeader?: string | null
  /** The ticket the request's own decision handed out (`decision.ticket`): revoked first. */
  issued?: string | null
  /** The clock, milliseconds since the Unix epoch (tests). */
  nowMs?: number
}

/** A request a room decided: the room, and its decision. */
export interface Placed {
  room: string
  decision: Decision
}

/** Options of `new Engine(...)`. */
export interface EngineOptions {
  /** A state file: counters shared by every process that opens it, kept across restarts. */
  sharedMemory?: string
  /** The clock, milliseconds since the Unix epoch (tests). */
  nowMs?: number
}

/** The admission engine: one per process, or one per state file shared by processes. */
/** One event the engine logged (see `Engine#drainEvents`). */
export interface EngineEvent {
  /** `queueing_started`, `queueing_stopped`, `prequeue_opened`, `event_started`, `shuffle_done`, `event_ended`, `config_reloaded`, `config_refused`, `cluster_outage_began`, `cluster_outage_ended`; a coordinator's: `lease_learning_started`, `lease_learning_ended`, `lease_root_outage_began`, `lease_root_outage_ended` */
  event: string
  atMs: number
  room: string | null
  fields: Record<string, string>
  /** A refusal or an outage. */
  warning: boolean
  /** The event as one line of JSON. */
  line: string
}

export declare class Engine extends EventEmitter {
  /** From configuration text (TOML or JSON). Throws `ConfigError` or `SharedMemoryError`. */
  constructor(config: string, options?: EngineOptions)
  /** From a configuration file. */
  static fromFile(path: string, options?: EngineOptions): Engine
  /**
   * Decides one request. `cookie` is the request's whole `Cookie` header, read one byte per
   * character as Node's HTTP parser makes header strings. Synchronous; never blocks. Throws
   * `UnknownRoomError` for a room not configured.
   */
  admit(room: string, cookie?: string | null, nowMs?: number): Decision
  /**
   * A room of this engine, for deciding its requests (`room.admit(cookie)`, what the
   * middleware calls): the same `Room` for the same name. Throws `UnknownRoomError`.
   */
  room(name: string): Room
  /**
   * Decides a whole request: in `room` when given, else in the room the configuration's
   * `routes` place it in; the room's rules first, its ticket from the cookies or (in a room
   * with `ticket_header = true`) the `Velvet-Rope-Ticket` header, the client from the
   * socket's peer or, behind `settings.trusted_proxies`, `X-Forwarded-For`. `null` when no
   * route takes the request; a `decision.bypassed` request passes untouched too.
   */
  decideRequest(
    req: RequestLike,
    options?: { room?: string; nowMs?: number; target?: string }
  ): Placed | null
  /**
   * The room `decideRequest` without a `room` would decide `req` in, deciding nothing: its
   * name, or null when no route takes the request or when it would be refused as one
   * several rooms might govern (`decision.ambiguous`).
   */
  roomForRequest(req: RequestLike, options?: { nowMs?: number; target?: string }): string | null
  /** Whether any room has `routes`. */
  readonly hasRoutes: boolean
  /** Whether any room accepts origin commands (`enabled_origin_commands`). */
  readonly acceptsOriginCommands: boolean
  /** The native handle (for the middleware). */
  readonly handle: number
  /** Decides one request given the ticket cookie's value itself. */
  admitTicket(room: string, ticket?: string | null, nowMs?: number): Decision
  /**
   * Ends the session of the visitor holding `ticket` (the value of `room`'s ticket, as in its
   * cookie): its seat is freed at once and the ticket refused from then on, in every process
   * sharing the counters. Throws `UnknownRoomError` for a room not configured.
   */
  revoke(room: string, ticket: string, nowMs?: number): Revocation
  /**
   * Ends the session of a request's visitor, for a response carrying `Velvet-Rope-Command:
   * revoke` (what the middleware calls): the ticket `issued` if given, else the room's ticket
   * in `cookie`, else (rooms with `ticket_header = true`) `ticketHeader`.
   */
  revokeRequest(room: string, request?: RevokeRequestOptions): Revocation
  /** The `Set-Cookie` value that clears `room`'s ticket cookie (`Max-Age=0`). */
  clearCookie(room: string): string
  /** Folds the counters into a new snapshot (about once a second: see `startTicking`). */
  tick(nowMs?: number): void
  /** Ticks every `intervalMs` on an `unref`'d timer until `stopTicking` (idempotent). */
  startTicking(intervalMs?: number): this
  /** Stops the timer `startTicking` started. */
  stopTicking(): void
  /** Replaces the configuration; a bad one throws and the running one keeps serving. */
  reload(config: string, options?: { isPath?: boolean }): void
  /** The cluster tier's sync loop (`null` without a `[cluster]` table). */
  clusterStatus(): ClusterStatus | null
  /** A room's figures as last published by a tick. */
  stats(room: string): RoomStats
  /** Every room's figures as one JSON text (what a status endpoint serves). */
  statsJson(): string
  /** Every event logged since the last call, oldest first. */
  drainEvents(): EngineEvent[]
  /** Emits each event logged since the last call as `'event'` (`startTicking` does, per tick). */
  emitEvents(): void
  on(name: 'event', listener: (event: EngineEvent) => void): this
  /** Every room's metrics in the OpenMetrics text format, ending with `# EOF`. */
  metricsText(): string
  /** Every room's metrics, family by family. */
  metrics(): MetricFamily[]
  /**
   * The waiting page for a queue or reject decision (`null` for admit). `accept` is the
   * request's `Accept` header; `acceptLanguage` its `Accept-Language` (in a room with
   * `accept_language = true` it picks the built-in page's language); `nowMs` (default: the
   * system clock) picks the event in force and its countdown; `ticket` the request's
   * `Velvet-Rope-Ticket` header (echoed in JSON when the decision did not change it).
   */
  renderPage(
    room: string,
    decision: Decision,
    accept?: string | null,
    acceptLanguage?: string | null,
    nowMs?: number,
    ticket?: string | null
  ): Page | null
  /** Names of the configured rooms. */
  readonly rooms: string[]
  /** Every room's figures as last published. */
  readonly statsByRoom: Record<string, unknown>
  /** The name of a room's ticket cookie. */
  cookieName(room: string): string
}

/**
 * One room of an engine (`engine.room(name)`). Its `admit` is the engine's for this room,
 * cheaper by the room's name not being read out of a string on every call. After a reload
 * that drops the room, its calls throw `UnknownRoomError`.
 */
export declare class Room {
  private constructor()
  /** The room's name. */
  readonly name: string
  /** The engine deciding for the room. */
  readonly engine: Engine
  /** `engine.admit(room.name, cookie, nowMs)`. */
  admit(cookie?: string | null, nowMs?: number): Decision
  /** `engine.renderPage(room.name, decision, accept, acceptLanguage, nowMs, ticket)`. */
  renderPage(
    decision: Decision,
    accept?: string | null,
    acceptLanguage?: string | null,
    nowMs?: number,
    ticket?: string | null
  ): Page | null
  /** Whether deciding reads more of a request than its `Cookie` header (rules, header tickets). */
  readonly readsRequest: boolean
  /** Forgets what the configuration said (the engine calls it after a reload). */
  forget(): void
}

/** Options of `new Coordinator(...)` and `request`. */
export interface ClockOptions {
  /** The clock, milliseconds since the Unix epoch (tests). */
  nowMs?: number
}

/** A coordinator's options: its clock, and whether a timer emits its events (default true). */
export interface CoordinatorOptions extends ClockOptions {
  emitEvents?: boolean
}

/**
 * Hands out leases of shared resources. Its events (learning periods, a leaf's root lost and
 * found) are emitted as `'event'` once a second unless `emitEvents: false`.
 */
export declare class Coordinator extends EventEmitter {
  constructor(config: string, options?: CoordinatorOptions)
  static fromFile(path: string, options?: CoordinatorOptions): Coordinator
  /** Every event logged since the last call, with learning periods over at `nowMs` (default: now). */
  drainEvents(nowMs?: number): EngineEvent[]
  /** Emits each event logged since the last call as `'event'`. */
  emitEvents(): void
  on(name: 'event', listener: (event: EngineEvent) => void): this
  /** Asks for `wants` of `resource` for `clientId`; the lease granted. */
  request(clientId: string, resource: string, wants: number, options?: ClockOptions & { priority?: number }): Lease
  /** Gives a client's lease back; whether it held one. */
  release(clientId: string, resource: string): boolean
  /** Every resource's metrics in the OpenMetrics text format, at `nowMs` (default: now). */
  metricsText(nowMs?: number): string
  /** Every resource's metrics, family by family. */
  metrics(nowMs?: number): MetricFamily[]
}

/** Permits at a rate, spread evenly over each second. */
export declare class RateLimiter {
  constructor(perSecond: number)
  /** A limiter at a lease's capacity. */
  static fromLease(lease: Lease): RateLimiter
  /** Takes `n` permits if they are free now. Never blocks. */
  tryAcquire(n?: number): boolean
  /** Resolves once `n` permits are taken; throws `CapacityError` if they never can be. */
  acquire(n?: number): Promise<void>
  /** Changes the rate (a refreshed lease). */
  setRate(perSecond: number): void
  /** Permits per second. */
  readonly rate: number
}

/** Units of a gauge held until released (`using permit = await gauge.acquire()`). */
export declare class Permit {
  /** Gives the units back (once; later calls do nothing). */
  release(): void;
  [Symbol.dispose](): void
}

/** At most `capacity` units held at once. */
export declare class Gauge {
  constructor(capacity: number)
  /** A gauge at a lease's capacity, in whole units. */
  static fromLease(lease: Lease): Gauge
  /** Takes `n` units if they are free now. Never blocks. */
  tryAcquire(n?: number): boolean
  /** Resolves with a `Permit` once `n` units are taken. */
  acquire(n?: number): Promise<Permit>
  /** Runs `fn` holding `n` units, and gives them back however it ends. */
  withPermit<T>(fn: () => T | Promise<T>, n?: number): Promise<T>
  /** Gives back `n` units; throws `CapacityError` if fewer are held. */
  release(n?: number): void
  /** Changes the capacity (a refreshed lease). */
  setCapacity(capacity: number): void
  readonly capacity: number
  readonly inUse: number
}

/**
 * Which requests a room decides. Prefixes start with `/` and match characters (`/shop`
 * covers `/shopping`). The request target is read the ways servers and frameworks read it
 * (absolute form, percent-escapes, `..` and `//`, `\`, case), and a request is decided if
 * any reading puts it in a room: only one that every reading puts under a bypass prefix
 * passes (see the README, "Which requests a room decides").
 */
export interface RoutingOptions {
  /** The room of every path not otherwise routed. */
  room?: string
  /** Path prefix -> room; the longest matching prefix wins. */
  rooms?: Record<string, string>
  /** Path prefixes that never wait (health checks, static assets). */
  bypass?: string[]
  /**
   * Whether `/Shop` and `/shop` are different paths. Default: as the framework routes them
   * (Express: both, since its routers need not follow the app's `case sensitive routing`, so
   * a path either rule puts in a room is decided; Fastify: its `routerOptions.caseSensitive`,
   * on by default).
   */
  caseSensitive?: boolean
}

/** A request as the Express middleware reads it. */
export interface ExpressRequest {
  url: string
  originalUrl?: string
  /** Where the middleware is mounted (`req.url` is under it). */
  baseUrl?: string
  headers: { cookie?: string; accept?: string }
  rawHeaders: string[]
}

/**
 * A response as the Express middleware writes it (Node's `ServerResponse` headers too: the
 * middleware watches them go out, for `Velvet-Rope-Command`).
 */
export interface ExpressResponse {
  append(name: string, value: string): unknown
  status(code: number): unknown
  send(body: string): unknown
  writeHead(...args: any[]): unknown
  getHeader(name: string): unknown
  setHeader(name: string, value: string | readonly string[]): unknown
  removeHeader(name: string): unknown
}

/**
 * Express middleware: `app.use(velvetRope.express(engine, { room: 'shop' }))`. A route ends
 * its visitor's session by answering with `Velvet-Rope-Command: revoke` (in a room with
 * `enabled_origin_commands = ["revoke"]`): the visitor's ticket is revoked and the response
 * clears the ticket cookie. The header never reaches the client (removed from every response
 * that passes the middleware). Refusals and failures are process warnings (codes
 * `VELVET_ROPE_REVOKE_REFUSED`, `VELVET_ROPE_REVOKE_FAILED`, `VELVET_ROPE_TICKET_LOST`).
 */
export declare function express(
  engine: Engine,
  options: RoutingOptions
): (req: ExpressRequest, res: ExpressResponse, next: (err?: unknown) => void) => void

/** Options of the Fastify plugin. */
export interface FastifyOptions extends RoutingOptions {
  engine: Engine
}

/**
 * A Fastify plugin: `await fastify.register(velvetRope.fastify, { engine, room: 'shop' })`. A
 * route names its own room, or turns the waiting room off, in its config:
 * `{ config: { velvetRope: { room: 'checkout' } } }` or `{ config: { velvetRope: false } }`.
 * Registered before any route exists, it gives each route a hook of its own; registered after
 * routes (without `await`), one hook for the whole application that reads each request's
 * route options. A request no route matches (a 404) is not decided. Origin commands as with
 * `express` (an `onSend` hook removes `Velvet-Rope-Command` from every reply); refusals and
 * failures go to `request.log.warn`.
 */
export declare function fastify(instance: unknown, options: FastifyOptions, done: (err?: Error) => void): void

/** One sample of a metric family. */
export interface MetricSample {
  /** The family's name, with `_total` (a counter), `_bucket`, `_count` or `_sum`. */
  name: string
  /** Label names to values, `room` first. */
  labels: Record<string, string>
  value: number
}

/** One metric family of the engine: every room's samples. */
export interface MetricFamily {
  /** `velvet_rope_...`, a counter's without `_total`. */
  name: string
  type: 'gauge' | 'counter' | 'histogram'
  help: string
  samples: MetricSample[]
}

/** A prom-client `Registry` as `prometheus.register` uses it. */
export interface PromRegistry {
  registerMetric(metric: unknown): void
  metrics(): Promise<string>
  contentType: string
}

/** Options of the metrics routes: a prom-client registry holding the engine's families. */
export interface MetricsRouteOptions {
  registry?: PromRegistry
}

/**
 * Prometheus metrics: `register(engine, registry)` adds the engine's families to a
 * prom-client registry (aggregated as `first` over cluster workers, whose figures are the
 * host's already); `express(engine)` and `fastify(engine)` are `/metrics` route handlers
 * serving the engine's OpenMetrics text, or with `{ registry }` that registry's text.
 */
export declare const prometheus: {
  /** `application/openmetrics-text; version=1.0.0; charset=utf-8` */
  CONTENT_TYPE: string
  /**
   * Registers the engine's (or a lease coordinator's) families; returns their names as
   * prom-client knows them.
   */
  register(engine: Engine | Coordinator, registry: PromRegistry): string[]
  /** An Express handler: `app.get('/metrics', prometheus.express(engine))`. */
  express(
    engine: Engine | Coordinator,
    options?: MetricsRouteOptions
  ): (req: { headers: { accept?: string } }, res: { set(name: string, value: string): unknown; send(body: string): unknown }, next: (err?: unknown) => void) => void
  /** A Fastify handler: `app.get('/metrics', prometheus.fastify(engine))`. */
  fastify(
    engine: Engine | Coordinator,
    options?: MetricsRouteOptions
  ): (request: unknown, reply: { header(name: string, value: string): unknown }) => Promise<string>
}

/** Bytes of a state file for this configuration (text). */
export declare function sharedMemorySize(config: string): number
/** The response header an origin gives commands in: `Velvet-Rope-Command`. */
export declare const COMMAND_HEADER: 'Velvet-Rope-Command'
/**
 * Whether a `Velvet-Rope-Command` value (or several, as Node gives repeated headers) asks for
 * a revocation: `revoke`, any case, among comma-separated commands.
 */
export declare function isRevokeCommand(value: string | readonly string[] | null | undefined): boolean
/** Milliseconds since the Unix epoch, from the system clock. */
export declare function nowMs(): number
/** Does nothing: the floor of a call into the native module (for benchmarks). */
export declare function noop(): void

/** Every velvet-rope error: an `Error` with a stable `code`. */
export declare class VelvetRopeError extends Error {
  readonly code: string
}
/** The configuration cannot be read, parsed or validated (`ERR_VELVET_ROPE_CONFIG`). */
export declare class ConfigError extends VelvetRopeError {}
/** No room of that name (`ERR_VELVET_ROPE_UNKNOWN_ROOM`). */
export declare class UnknownRoomError extends VelvetRopeError {}
/** A state file cannot be opened or does not fit (`ERR_VELVET_ROPE_SHARED_MEMORY`). */
export declare class SharedMemoryError extends VelvetRopeError {}
/** A wrong type or a value out of range (`ERR_VELVET_ROPE_INVALID_ARGUMENT`). */
export declare class InvalidArgumentError extends VelvetRopeError {}
/** A lease could not be granted, refreshed or enforced (`ERR_VELVET_ROPE_LEASE`). */
export declare class LeaseError extends VelvetRopeError {}
/** No resource template matches (`ERR_VELVET_ROPE_UNKNOWN_RESOURCE`). */
export declare class UnknownResourceError extends LeaseError {}
/** More asked at once than can ever be given, or released than held (`ERR_VELVET_ROPE_CAPACITY`). */
export declare class CapacityError extends LeaseError {}
