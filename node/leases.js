'use strict'
/** Leases enforced locally: `RateLimiter` (a rate) and `Gauge` (concurrent units). */

const { EventEmitter } = require('node:events')
const native = require('./binding.js')
const { convert, InvalidArgumentError } = require('./errors.js')
const { emitEach, eventOf, familyOf } = require('./native_shapes.js')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Native handles are freed when the object holding them is collected (a coordinator's event
 * timer, which holds it weakly, is stopped then too).
 */
const coordinators = new FinalizationRegistry(({ h, timer }) => {
  if (timer !== null) clearInterval(timer)
  native.coordinatorFree(h)
})
const limiters = new FinalizationRegistry((h) => native.rateLimiterFree(h))
const gauges = new FinalizationRegistry((h) => native.gaugeFree(h))
const dispose = Symbol.dispose || Symbol.for('nodejs.dispose')

function count (n) {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) {
    throw new InvalidArgumentError(`a permit count must be an integer from 0 to 2^32 - 1, got ${n}`, 'ERR_VELVET_ROPE_INVALID_ARGUMENT')
  }
  return n
}

/**
 * Hands out leases of shared resources (the configuration's `resources` section). Its events
 * (a resource's learning period started or ended; for a leaf under the Redis lease root, the
 * root's learning and the root lost and found) are emitted as `'event'` once a second from an
 * `unref`'d timer (`{ emitEvents: false }`: none; `drainEvents` then gives them).
 */
class Coordinator extends EventEmitter {
  #h
  /** From configuration text (TOML or JSON); `Coordinator.fromFile` reads a file. */
  constructor (config, { nowMs, isPath = false, emitEvents = true } = {}) {
    super()
    try {
      this.#h = native.coordinatorNew(String(config), isPath, nowMs)
    } catch (e) { throw convert(e) }
    let timer = null
    if (emitEvents) {
      // Weakly: a coordinator nobody holds is still collected (and its timer stopped).
      const self = new WeakRef(this)
      timer = setInterval(() => self.deref()?.emitEvents(), 1000)
      timer.unref()
    }
    coordinators.register(this, { h: this.#h, timer })
  }

  /**
   * Every event logged since the last call, oldest first, with the ends of learning periods
   * over at `nowMs` (default: now), as `Engine#drainEvents` gives an engine's:
   * `lease_learning_started` / `lease_learning_ended` (`fields.source`: `coordinator` for its
   * own learning after start, `root` for a leaf's root), `lease_root_outage_began` /
   * `lease_root_outage_ended`.
   */
  drainEvents (nowMs) {
    try {
      return native.coordinatorDrainEvents(this.#h, nowMs).map(eventOf)
    } catch (e) { throw convert(e) }
  }

  /**
   * Emits each event logged since the last call as `'event'`; a listener that throws becomes
   * a process warning (`VELVET_ROPE_EVENT_LISTENER`), as `Engine#emitEvents` does.
   */
  emitEvents () {
    emitEach(this, this.drainEvents())
  }

  static fromFile (path, options = {}) {
    return new Coordinator(path, { ...options, isPath: true })
  }

  /** Asks for `wants` of `resource` for `clientId`; the lease granted. */
  request (clientId, resource, wants, { priority = 0, nowMs } = {}) {
    try {
      return native.coordinatorRequest(this.#h, clientId, resource, wants, count(priority), nowMs)
    } catch (e) { throw convert(e) }
  }

  /** Gives a client's lease back; whether it held one. */
  release (clientId, resource) {
    try {
      return native.coordinatorRelease(this.#h, clientId, resource)
    } catch (e) { throw convert(e) }
  }

  /** Every resource's metrics in the OpenMetrics text format, at `nowMs` (default: now). */
  metricsText (nowMs) {
    try {
      return native.coordinatorMetricsText(this.#h, nowMs)
    } catch (e) { throw convert(e) }
  }

  /** Every resource's metrics, family by family, as `Engine#metrics` gives a room's. */
  metrics (nowMs) {
    try {
      return native.coordinatorMetrics(this.#h, nowMs).map(familyOf)
    } catch (e) { throw convert(e) }
  }
}

/** Permits at a rate, spread evenly over each second. */
class RateLimiter {
  #h
  constructor (perSecond) {
    try {
      this.#h = native.rateLimiterNew(perSecond)
    } catch (e) { throw convert(e) }
    limiters.register(this, this.#h)
  }

  /** A limiter at a lease's capacity. */
  static fromLease (lease) {
    return new RateLimiter(lease.capacity)
  }

  /** Takes `n` permits if they are free now. Never blocks. */
  tryAcquire (n = 1) {
    try {
      return native.rateLimiterTryAcquire(this.#h, n)
    } catch (e) { throw convert(e) }
  }

  /** Resolves once `n` permits are taken; the event loop stays free meanwhile. */
  async acquire (n = 1) {
    count(n)
    for (;;) {
      let wait
      try {
        wait = native.rateLimiterTryOrWait(this.#h, n)
      } catch (e) { throw convert(e) }
      if (wait === null || wait === undefined) return
      await sleep(wait)
    }
  }

  /** Changes the rate (a refreshed lease). */
  setRate (perSecond) {
    try {
      native.rateLimiterSetRate(this.#h, perSecond)
    } catch (e) { throw convert(e) }
  }

  /** Permits per second. */
  get rate () {
    return native.rateLimiterRate(this.#h)
  }
}

/** Units of a gauge held until released: `using permit = await gauge.acquire()`. */
class Permit {
  #gauge
  #n
  constructor (gauge, n) {
    this.#gauge = gauge
    this.#n = n
  }

  /** Gives the units back (once; later calls do nothing). */
  release () {
    if (this.#n > 0) {
      const n = this.#n
      this.#n = 0
      this.#gauge.release(n)
    }
  }

  [dispose] () {
    this.release()
  }
}

const BACKOFF_START_MS = 0.05
const BACKOFF_MAX_MS = 5

/** At most `capacity` units held at once. */
class Gauge {
  #h
  constructor (capacity) {
    count(capacity)
    this.#h = native.gaugeNew(capacity)
    gauges.register(this, this.#h)
  }

  /** A gauge at a lease's capacity, in whole units. */
  static fromLease (lease) {
    return new Gauge(native.gaugeUnits(lease.capacity))
  }

  /** Takes `n` units if they are free now. Never blocks. */
  tryAcquire (n = 1) {
    try {
      return native.gaugeTryAcquire(this.#h, count(n))
    } catch (e) { throw convert(e) }
  }

  /** Resolves with a `Permit` once `n` units are taken; the event loop stays free. */
  async acquire (n = 1) {
    let backoff = BACKOFF_START_MS
    while (!this.tryAcquire(n)) {
      await sleep(backoff)
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS)
    }
    return new Permit(this, n)
  }

  /** Runs `fn` holding `n` units, and gives them back however it ends. */
  async withPermit (fn, n = 1) {
    const permit = await this.acquire(n)
    try {
      return await fn()
    } finally {
      permit.release()
    }
  }

  /** Gives back `n` units. Throws `CapacityError` if fewer are held. */
  release (n = 1) {
    try {
      native.gaugeRelease(this.#h, count(n))
    } catch (e) { throw convert(e) }
  }

  /** Changes the capacity (a refreshed lease). */
  setCapacity (capacity) {
    native.gaugeSetCapacity(this.#h, count(capacity))
  }


  get capacity () {
    return native.gaugeCapacity(this.#h)
  }

  get inUse () {
    return native.gaugeInUse(this.#h)
  }
}

module.exports = { Coordinator, RateLimiter, Gauge, Permit }
