'use strict'
/**
 * The engine's metrics from Node: the OpenMetrics text, the structured families, the
 * prom-client collector (and its aggregation over cluster workers), and the route handlers,
 * in process (the servers are in servers.test.js).
 */

const assert = require('node:assert/strict')
const { test } = require('node:test')
const client = require('prom-client')

const { Coordinator, Engine, nowMs, prometheus } = require('..')
const { parseOpenMetrics, parsePrometheusText } = require('./helpers.js')

const T0 = 1_800_000_000_000

const CONFIG = `
[[rooms]]
name = "shop"
total_active_users = 2
new_users_per_minute = 1000
session_duration = 1
[rooms.cookie]
secure = false

[[rooms]]
name = "vip"
total_active_users = 5
new_users_per_minute = 5
[rooms.cookie]
secure = false
[[rooms.rules]]
name = "say \\"hi\\""
action = "bypass"
paths = ["/x"]
`

/**
 * Six visitors to a room of two; the four waiters come back every 30 s for four minutes
 * (sessions last a minute). How many were let in from the queue, and the queue decisions.
 */
function crowd (engine) {
  let cookies = []
  let queued = 0
  for (let i = 0; i < 6; i++) {
    const d = engine.admit('shop', undefined, T0)
    if (d.outcome === 'queue') {
      queued++
      cookies.push(d.setCookie.split(';', 1)[0])
    }
  }
  let letIn = 0
  let now = T0
  for (let round = 0; round < 8; round++) {
    now += 30_000
    engine.tick(now)
    const still = []
    for (const c of cookies) {
      const d = engine.admit('shop', c, now)
      if (d.outcome === 'admit') {
        letIn++
        continue
      }
      queued++
      still.push(d.setCookie ? d.setCookie.split(';', 1)[0] : c)
    }
    cookies = still
  }
  return { letIn, queued }
}

const key = (name, labels) => `${name}${JSON.stringify(Object.entries(labels).sort())}`

test('the OpenMetrics text parses and agrees with the crowd', () => {
  const engine = new Engine(CONFIG)
  const { letIn, queued } = crowd(engine)
  assert.ok(letIn >= 2, `${letIn} let in`)
  const m = parseOpenMetrics(engine.metricsText())
  assert.equal(m.get(key('velvet_rope_room_admissions_total', { room: 'shop', kind: 'new' })), 2)
  assert.equal(m.get(key('velvet_rope_room_admissions_total', { room: 'shop', kind: 'queue' })), letIn)
  assert.equal(m.get(key('velvet_rope_room_decisions_total', { room: 'shop', outcome: 'queue' })), queued)
  // One wait sample per waiter let in, each promised a wait.
  assert.equal(m.get(key('velvet_rope_room_wait_seconds_count', { room: 'shop' })), letIn)
  assert.equal(m.get(key('velvet_rope_room_wait_error_seconds_bucket', { room: 'shop', le: '+Inf' })), letIn)
  assert.equal(m.get(key('velvet_rope_rule_matches_total', { room: 'vip', rule: 'say "hi"', action: 'bypass' })), 0)
})

test('the structured families are the text', () => {
  const engine = new Engine(CONFIG)
  crowd(engine)
  const fromText = parseOpenMetrics(engine.metricsText())
  const structured = new Map()
  for (const f of engine.metrics()) {
    assert.match(f.name, /^velvet_rope_/)
    assert.ok(['gauge', 'counter', 'histogram'].includes(f.type) && f.help)
    for (const s of f.samples) {
      assert.equal(Object.keys(s.labels)[0], 'room')
      structured.set(key(s.name, s.labels), s.value)
    }
  }
  assert.deepEqual(structured, fromText)
})

test('prom-client registries, in both formats, with the engine read at each scrape', async () => {
  const engine = new Engine(CONFIG)
  const { letIn } = crowd(engine)
  for (const contentType of [client.Registry.PROMETHEUS_CONTENT_TYPE, client.Registry.OPENMETRICS_CONTENT_TYPE]) {
    const registry = new client.Registry(contentType)
    const names = prometheus.register(engine, registry)
    assert.ok(names.includes('velvet_rope_room_admissions_total'))
    const text = await registry.metrics()
    const m = contentType === client.Registry.OPENMETRICS_CONTENT_TYPE ? parseOpenMetrics(text) : parsePrometheusText(text)
    assert.equal(m.get(key('velvet_rope_room_admissions_total', { room: 'shop', kind: 'queue' })), letIn)
    assert.equal(m.get(key('velvet_rope_room_wait_seconds_bucket', { room: 'shop', le: '+Inf' })), letIn)
    assert.equal(m.get(key('velvet_rope_room_active_users_limit', { room: 'shop' })), 2)
  }
  const registry = new client.Registry()
  prometheus.register(engine, registry)
  const before = parsePrometheusText(await registry.metrics())
  engine.admit('shop', undefined, T0 + 400_000)
  await new Promise((resolve) => setImmediate(resolve))
  const after = parsePrometheusText(await registry.metrics())
  const newKey = key('velvet_rope_room_admissions_total', { room: 'shop', kind: 'new' })
  assert.equal(after.get(newKey), before.get(newKey) + 1)
  assert.throws(() => prometheus.register(engine, {}), TypeError)
})

test('over cluster workers the host is counted once (aggregator "first")', async () => {
  const engine = new Engine(CONFIG)
  const { letIn } = crowd(engine)
  // Two workers' registries (each with the engine, whose figures are the host's, and a
  // counter of its own), as prom-client's AggregatorRegistry gathers them in the primary.
  const workers = [new client.Registry(), new client.Registry()]
  for (const registry of workers) {
    prometheus.register(engine, registry)
    new client.Counter({ name: 'app_pages_total', help: 'pages', registers: [registry] }).inc(3)
  }
  const merged = client.AggregatorRegistry.aggregate(await Promise.all(workers.map((r) => r.getMetricsAsJSON())))
  const m = parsePrometheusText(await merged.metrics())
  assert.equal(m.get(key('velvet_rope_room_admissions_total', { room: 'shop', kind: 'queue' })), letIn)
  assert.equal(m.get(key('velvet_rope_room_active_users_limit', { room: 'shop' })), 2)
  assert.equal(m.get(key('app_pages_total', {})), 6, 'a worker counter sums')
})

test('the Express and Fastify handlers', async () => {
  const engine = new Engine(CONFIG)
  crowd(engine)
  const sent = {}
  const res = { set (k, v) { sent[k] = v }, send (body) { sent.body = body } }
  await new Promise((resolve, reject) => {
    const done = res.send
    res.send = (body) => { done(body); resolve() }
    prometheus.express(engine)({ headers: {} }, res, reject)
  })
  assert.equal(sent['Content-Type'], prometheus.CONTENT_TYPE)
  assert.equal(sent['Cache-Control'], 'no-store')
  assert.deepEqual(parseOpenMetrics(sent.body), parseOpenMetrics(engine.metricsText()))
  const headers = {}
  const body = await prometheus.fastify(engine)({ headers: {} }, { header (k, v) { headers[k] = v } })
  assert.equal(headers['Content-Type'], prometheus.CONTENT_TYPE)
  assert.deepEqual(parseOpenMetrics(body), parseOpenMetrics(engine.metricsText()))
  // With a registry: its text in its content type.
  const registry = new client.Registry()
  prometheus.register(engine, registry)
  const withRegistry = await prometheus.fastify(engine, { registry })({ headers: {} }, { header (k, v) { headers[k] = v } })
  assert.equal(headers['Content-Type'], registry.contentType)
  assert.ok(parsePrometheusText(withRegistry).has(key('velvet_rope_room_active_users', { room: 'shop' })))
})

test("a lease coordinator's resources, in its text and through prom-client", async () => {
  // The system clock's time: prom-client reads the coordinator at the time of a scrape.
  const t = nowMs()
  const coordinator = new Coordinator('[[resources]]\nidentifier_glob = "api"\ncapacity = 100\n' +
    'algorithm = { kind = "fair_share", lease_length = 60, refresh_interval = 1 }\n', { nowMs: t })
  coordinator.request('a', 'api', 30, { nowMs: t })
  coordinator.request('b', 'api', 90, { nowMs: t })
  const m = parseOpenMetrics(coordinator.metricsText(t))
  assert.equal(m.get(key('velvet_rope_lease_capacity', { resource: 'api' })), 100)
  assert.equal(m.get(key('velvet_rope_lease_clients', { resource: 'api' })), 2)
  assert.equal(m.get(key('velvet_rope_lease_wanted', { resource: 'api' })), 120)
  assert.equal(m.get(key('velvet_rope_lease_refusals_total', { resource: 'api' })), 0)
  const registry = new client.Registry()
  prometheus.register(coordinator, registry)
  const scraped = parsePrometheusText(await registry.metrics())
  assert.equal(scraped.get(key('velvet_rope_lease_clients', { resource: 'api' })), 2)
})

test("the engine's events: drained, and emitted by its ticker", async () => {
  const engine = new Engine(CONFIG, { nowMs: T0 })
  for (let i = 0; i < 4; i++) engine.admit('shop', undefined, T0)
  engine.tick(T0 + 1000)
  const events = engine.drainEvents()
  assert.deepEqual(events.map((e) => [e.event, e.room, e.fields, e.warning]), [
    ['queueing_started', 'shop', { queue_length: '2' }, false]
  ])
  assert.equal(JSON.parse(events[0].line).event, 'queueing_started')
  assert.deepEqual(engine.drainEvents(), [])
  // A refused reload: a warning, emitted after the next tick.
  assert.throws(() => engine.reload(CONFIG.replace('session_duration = 1', 'session_duration = 100')))
  const seen = []
  engine.on('event', (e) => seen.push(e))
  engine.startTicking(10)
  await new Promise((resolve) => setTimeout(resolve, 100))
  engine.stopTicking()
  assert.deepEqual(seen.map((e) => [e.event, e.warning]), [['config_refused', true]])
  assert.match(seen[0].fields.error, /session_duration/)
})

test('a listener that throws becomes a warning, not a crash', () => {
  const engine = new Engine(CONFIG, { nowMs: T0 })
  for (let i = 0; i < 4; i++) engine.admit('shop', undefined, T0)
  engine.tick(T0 + 1000)
  const seen = []
  const warnings = []
  const onWarning = (w) => warnings.push(w.code)
  process.on('warning', onWarning)
  engine.on('event', (e) => { seen.push(e.event); throw new Error('a broken listener') })
  engine.emitEvents()
  assert.deepEqual(seen, ['queueing_started'])
  return new Promise((resolve) => setImmediate(() => {
    process.off('warning', onWarning)
    assert.deepEqual(warnings, ['VELVET_ROPE_EVENT_LISTENER'])
    resolve()
  }))
})
