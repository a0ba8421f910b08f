'use strict'
/**
 * Prometheus metrics of an `Engine`: a `prom-client` collector and ready metrics routes for
 * Express and Fastify.
 *
 * The figures are the engine's (`engine.metrics()`), named once in the core for every front
 * door: `velvet_rope_room_active_users{room="shop"}`, `velvet_rope_room_admissions_total`,
 * the `velvet_rope_room_wait_seconds` histogram and the rest. An engine on a state file shared
 * by `node:cluster` workers reads the host's counters, so every worker reports the host's
 * figures; the collector's families aggregate as `first` in prom-client's
 * `AggregatorRegistry`, so the host is counted once, not once per worker.
 *
 *     const client = require('prom-client')
 *     const { prometheus } = require('velvet-rope')
 *     prometheus.register(engine, client.register)       // beside the process's own metrics
 *     app.get('/metrics', prometheus.express(engine, { registry: client.register }))
 *
 * Without `prom-client`, `prometheus.express(engine)` and `prometheus.fastify(engine)` serve
 * the engine's OpenMetrics text by themselves.
 */

/** The content type of the engine's own text (OpenMetrics 1.0). */
const CONTENT_TYPE = 'application/openmetrics-text; version=1.0.0; charset=utf-8'

/**
 * One family of the engine's metrics as prom-client reads a metric (`get()` answers its
 * current values). Families of one collector read the engine once per scrape: the first
 * `get()` reads every family, and the rest of the same scrape (the same turn of the event
 * loop) reuse it.
 */
class EngineFamily {
  constructor (reader, family) {
    // prom-client names a counter with its `_total` (and takes it off for OpenMetrics, where
    // it writes it on each sample instead).
    this.name = family.type === 'counter' ? `${family.name}_total` : family.name
    this.help = family.help
    this.type = family.type
    this.aggregator = 'first'
    this._family = family.name
    this._reader = reader
  }

  async get () {
    const family = this._reader().get(this._family)
    const histogram = this.type === 'histogram'
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      // A histogram's samples carry their own names (`_bucket`, `_count`, `_sum`); the
      // others are named by the family (prom-client adds a counter's `_total`).
      values: family
        ? family.samples.map((s) => histogram
          ? { metricName: s.name, labels: s.labels, value: s.value }
          : { labels: s.labels, value: s.value })
        : []
    }
  }

  /** Nothing to reset: the figures are the engine's. */
  reset () {}
}

/** A reader of the engine's families by name, read once per turn of the event loop. */
function readerOf (engine) {
  let cached = null
  return () => {
    if (cached === null) {
      cached = new Map(engine.metrics().map((f) => [f.name, f]))
      setImmediate(() => { cached = null })
    }
    return cached
  }
}

/**
 * Registers the engine's metric families with a prom-client `registry` (`client.register`
 * for the global one); returns their names as prom-client knows them, a counter's with
 * `_total` (remove them with `registry.removeSingleMetric(name)`).
 */
function register (engine, registry) {
  if (!registry || typeof registry.registerMetric !== 'function') {
    throw new TypeError('register(engine, registry): a prom-client Registry is needed')
  }
  const reader = readerOf(engine)
  const names = []
  for (const family of engine.metrics()) {
    const metric = new EngineFamily(reader, family)
    registry.registerMetric(metric)
    names.push(metric.name)
  }
  return names
}

/**
 * The body and content type: the engine's OpenMetrics text, or the registry's text in the
 * format it was made for (prom-client's `Registry.OPENMETRICS_CONTENT_TYPE` or the default).
 */
async function render (engine, registry) {
  if (!registry) return { body: engine.metricsText(), contentType: CONTENT_TYPE }
  return { body: await registry.metrics(), contentType: registry.contentType }
}

/**
 * An Express handler serving the metrics (`app.get('/metrics', prometheus.express(engine))`):
 * the engine's OpenMetrics text, or, with `{ registry }` (a prom-client Registry holding the
 * engine's families), that registry's text in its content type.
 */
function express (engine, { registry } = {}) {
  return (req, res, next) => {
    render(engine, registry).then(({ body, contentType }) => {
      res.set('Content-Type', contentType)
      res.set('Cache-Control', 'no-store')
      res.send(body)
    }, next)
  }
}

/**
 * A Fastify handler serving the metrics (`app.get('/metrics', prometheus.fastify(engine))`),
 * as `express` does.
 */
function fastify (engine, { registry } = {}) {
  return async (request, reply) => {
    const { body, contentType } = await render(engine, registry)
    reply.header('Content-Type', contentType)
    reply.header('Cache-Control', 'no-store')
    return body
  }
}

module.exports = { register, express, fastify, CONTENT_TYPE }
