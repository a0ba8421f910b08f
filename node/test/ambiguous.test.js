'use strict'
// A request two deciding rooms might govern is refused (400), not decided in one of them:
// there a visitor could pick the emptier room by how it writes the request. Through real
// Express and Fastify servers (the Node front doors that ask the core for a room).

const assert = require('node:assert/strict')
const { test } = require('node:test')
const Fastify = require('fastify')
const express = require('express')

const velvetRope = require('..')
const { Engine } = velvetRope
const { rawGet } = require('./helpers.js')

// `shop` queues everyone under `/shop/`; `api` (a host of its own) and `blog` admit everyone.
const CONFIG = '[[rooms]]\nname = "shop"\ntotal_active_users = 10\nnew_users_per_minute = 10\n' +
  'queue_all = true\nqueueing_status_code = 503\nroutes = [{ path = "/shop/" }]\n' +
  '[[rooms]]\nname = "api"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n' +
  'routes = [{ host = "api.example.com" }]\n[rooms.cookie]\nsecure = false\n' +
  '[[rooms]]\nname = "blog"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n' +
  'routes = [{ path = "/blog/" }]\n[rooms.cookie]\nsecure = false\n'

test('the engine refuses a request two deciding rooms might govern, and says why', () => {
  const engine = new Engine(CONFIG)
  const placed = engine.decideRequest({ method: 'GET', url: 'http://api.example.com/shop/item', rawHeaders: ['Host', 'www.example.com'] })
  assert.equal(placed.room, 'api')
  assert.equal(placed.decision.outcome, 'reject')
  assert.equal(placed.decision.ambiguous, true)
  assert.equal(placed.decision.setCookie ?? null, null)
  const page = engine.renderPage('api', placed.decision, 'application/json')
  assert.equal(page.status, 400)
  assert.equal(JSON.parse(page.body).type, 'urn:velvet-rope:problem:ambiguous-request')
  const agreed = engine.decideRequest({ method: 'GET', url: 'http://api.example.com/shop/item', rawHeaders: ['Host', 'api.example.com'] })
  assert.equal(agreed.decision.outcome, 'admit')
  assert.ok(!agreed.decision.ambiguous)
  engine.stopTicking()
})

async function listening (server) {
  await new Promise((resolve) => server.once('listening', resolve))
  return server.address().port
}

// The target's host is api's, the `Host` header (127.0.0.1) none of a room's: Express and
// Fastify serve the shop's `/shop/item` for it, nginx the api's. And `/shop/..%2fblog/x`,
// the shop's to both routers, the blog's resolved.
const REFUSED = ['http://api.example.com/shop/item', '/shop/..%2fblog/x', '/shop/%2e%2e/blog/x']

test('express: refused with 400, the application not reached', async () => {
  const engine = new Engine(CONFIG)
  const reached = []
  const app = express()
  app.use(velvetRope.express(engine))
  app.use((req, res) => { reached.push(req.url); res.send('origin') })
  const server = app.listen(0, '127.0.0.1')
  try {
    const port = await listening(server)
    for (const target of REFUSED) {
      const r = await rawGet(port, target, [['Accept', 'application/json']])
      assert.equal(r.status, 400, target)
      assert.equal(JSON.parse(r.body).type, 'urn:velvet-rope:problem:ambiguous-request', target)
    }
    assert.deepEqual(reached, [])
    assert.equal((await rawGet(port, '/blog/x')).status, 200)
    assert.equal((await rawGet(port, '/shop/x')).status, 503)
    assert.deepEqual(reached, ['/blog/x'])
  } finally {
    server.close()
    engine.stopTicking()
  }
})

test('fastify: refused with 400, the route not reached', async () => {
  const engine = new Engine(CONFIG)
  const reached = []
  const app = Fastify()
  await app.register(velvetRope.fastify, { engine })
  app.get('/*', async (req) => { reached.push(req.url); return 'origin' })
  await app.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = app.server.address().port
    for (const target of REFUSED) {
      const r = await rawGet(port, target)
      assert.equal(r.status, 400, target)
    }
    assert.deepEqual(reached, [])
    assert.equal((await rawGet(port, '/blog/x')).status, 200)
    assert.deepEqual(reached, ['/blog/x'])
  } finally {
    await app.close()
    engine.stopTicking()
  }
})
