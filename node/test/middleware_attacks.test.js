'use strict'
/**
 * Found by an adversarial review of the Express and Fastify middleware (each failed before
 * its fix): a room walked past by a sub-router's case rule or a rewritten `req.url`, a new
 * ticket lost when the app replaces the response's `Set-Cookie` or writes its own head, and
 * a waiting page echoing two `Velvet-Rope-Ticket` lines joined.
 */

const assert = require('node:assert/strict')
const { test } = require('node:test')
const express = require('express')
const Fastify = require('fastify')

const velvetRope = require('..')
const { Engine, fastify: plugin } = velvetRope
const { rawGet } = require('./helpers.js')

const MANY = '[[rooms]]\nname = "shop"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n' +
  '[rooms.cookie]\nsecure = false\n'

/** Serves `app` on 127.0.0.1 for `body(port)`, then closes it. */
async function serving (app, body) {
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  try {
    return await body(server.address().port)
  } finally {
    server.close()
  }
}

const ticketOf = (r) => r.setCookies.find((c) => c.startsWith('__vr_shop='))

test('express: a case-insensitive sub-router in a case-sensitive app is still decided', async () => {
  const engine = new Engine(MANY)
  const app = express()
  app.set('case sensitive routing', true)
  app.use(velvetRope.express(engine, { rooms: { '/shop/': 'shop' } }))
  const r = express.Router() // case-insensitive, whatever the app says
  r.get('/shop/buy', (req, res) => res.send('bought'))
  app.use(r)
  await serving(app, async (port) => {
    const got = await rawGet(port, '/SHOP/buy')
    assert.equal(got.body, 'bought')
    assert.ok(ticketOf(got), 'the sub-router served /SHOP/buy undecided')
    // What neither router reads as the room's stays undecided.
    const other = await rawGet(port, '/other')
    assert.equal(ticketOf(other), undefined)
  })
  engine.stopTicking()
})

test('express: a req.url rewritten before the middleware is decided as the app routes it', async () => {
  const engine = new Engine(MANY)
  const app = express()
  app.use((req, res, next) => {
    const m = /^\/(en|de)(\/.*)$/.exec(req.url)
    if (m) req.url = m[2]
    next()
  })
  app.use(velvetRope.express(engine, { rooms: { '/shop/': 'shop' } }))
  app.get('/shop/checkout', (req, res) => res.send('checkout'))
  await serving(app, async (port) => {
    const got = await rawGet(port, '/en/shop/checkout')
    assert.equal(got.body, 'checkout')
    assert.ok(ticketOf(got), 'the rewritten request reached the room\'s route undecided')
  })
  engine.stopTicking()
})

// The ways an Express app replaces the response's Set-Cookie: each must still carry the ticket
// (and the app's own cookie).
const replacing = [
  ['res.set', (res) => res.set('Set-Cookie', 'theme=dark').send('in')],
  ['res.setHeader', (res) => { res.setHeader('Set-Cookie', ['theme=dark']); res.end('in') }],
  ['writeHead with an object', (res) => res.writeHead(200, { 'set-cookie': 'theme=dark' }).end('in')],
  ['writeHead with a flat array', (res) => res.writeHead(200, ['Set-Cookie', 'theme=dark']).end('in')],
  ['writeHead with pairs', (res) => res.writeHead(200, [['SET-COOKIE', 'theme=dark']]).end('in')]
]
for (const [name, reply] of replacing) {
  test(`express: the ticket survives ${name} replacing Set-Cookie`, async () => {
    const engine = new Engine(MANY)
    const app = express()
    // (Express's own `X-Powered-By` would make Node 20 refuse header pairs given to writeHead.)
    app.disable('x-powered-by')
    app.use(velvetRope.express(engine, { room: 'shop' }))
    app.get('/', (req, res) => reply(res))
    await serving(app, async (port) => {
      const got = await rawGet(port, '/')
      assert.equal(got.body, 'in')
      assert.ok(got.setCookies.includes('theme=dark'), JSON.stringify(got.setCookies))
      const ticket = ticketOf(got)
      assert.ok(ticket, `no ticket in ${JSON.stringify(got.setCookies)}`)
      // The ticket holds the place: the visitor comes back steady, with no new ticket.
      const again = await rawGet(port, '/', [['Cookie', ticket.split(';')[0]]])
      assert.equal(again.body, 'in')
      assert.equal(ticketOf(again), undefined)
    })
    engine.stopTicking()
  })
}

test('fastify: a hijacked reply written raw carries the ticket', async () => {
  const engine = new Engine(MANY)
  const app = Fastify()
  await app.register(plugin, { engine, room: 'shop' })
  app.get('/events', (request, reply) => {
    reply.hijack()
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream' })
    reply.raw.end('data: hi\n\n')
  })
  const res = await app.inject('/events')
  assert.equal(res.body, 'data: hi\n\n')
  assert.match(String(res.headers['set-cookie']), /^__vr_shop=/)
  await app.close()
})

test('fastify: the ticket survives an onSend hook replacing Set-Cookie, and is sent once', async () => {
  const engine = new Engine(MANY)
  const app = Fastify()
  await app.register(plugin, { engine, room: 'shop' })
  app.addHook('onSend', (request, reply, payload, done) => {
    reply.removeHeader('set-cookie')
    reply.header('set-cookie', 'theme=dark')
    done(null, payload)
  })
  app.get('/', async () => 'in')
  const res = await app.inject('/')
  const cookies = [].concat(res.headers['set-cookie'])
  assert.equal(cookies.filter((c) => c.startsWith('__vr_shop=')).length, 1, JSON.stringify(cookies))
  assert.ok(cookies.includes('theme=dark'))
  await app.close()
})

test('fastify: a waiting page echoes the first Velvet-Rope-Ticket line, not the lines joined', async () => {
  const engine = new Engine('[[rooms]]\nname = "shop"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n' +
    'ticket_header = true\n[rooms.cookie]\nsecure = false\n')
  const app = Fastify()
  await app.register(plugin, { engine, room: 'shop' })
  app.get('/', async () => 'in')
  assert.equal((await app.inject('/')).statusCode, 200)
  const json = { accept: 'application/json' }
  const queued = JSON.parse((await app.inject({ url: '/', headers: json })).body)
  assert.equal(queued.outcome, 'queue')
  const page = JSON.parse((await app.inject({
    url: '/',
    headers: { ...json, 'velvet-rope-ticket': [queued.ticket, 'junk'] }
  })).body)
  assert.equal(page.outcome, 'queue')
  assert.equal(page.position, 1, 'the first line holds the place')
  assert.equal(page.ticket, queued.ticket)
  await app.close()
})

// Found by the review of the fixes above: the readings were tried one after another, and the
// first room found won, so a default room (or a shorter prefix) under one case rule or one
// reading of the URL hid the room another put the request in.
const TWO = '[[rooms]]\nname = "shop"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n' +
  'routes = [{ path = "/shop/" }]\n[rooms.cookie]\nsecure = false\n' +
  '[[rooms]]\nname = "site"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n' +
  'routes = [{ path = "/" }]\n[rooms.cookie]\nsecure = false\n'

/** Express app: `mw`, then `before` ahead of it, a case-insensitive router serving `/shop/...`. */
function shopApp (engine, options, before) {
  const app = express()
  app.set('case sensitive routing', true)
  if (before) app.use(before)
  app.use(velvetRope.express(engine, options))
  const r = express.Router()
  r.get('/shop/*rest', (req, res) => res.send('shop'))
  r.get('/en/*rest', (req, res) => res.send('never'))
  app.use(r)
  return app
}

const stripLocale = (req, res, next) => {
  const m = /^\/(en|de)(\/.*)$/.exec(req.url)
  if (m) req.url = m[2]
  next()
}

const held = [
  ['a default room under the sensitive rule', { room: 'site', rooms: { '/shop/': 'shop' } }, null, '/SHOP/buy'],
  ['a shorter prefix under the sensitive rule', { rooms: { '/shop/': 'site', '/shop/vip/': 'shop' } }, null, '/shop/VIP/buy', '/shop/vip/first'],
  ['a default room for the URL as sent', { room: 'site', rooms: { '/shop/': 'shop' } }, stripLocale, '/en/shop/checkout'],
  ['the configuration\'s routes, the URL rewritten', {}, stripLocale, '/en/shop/checkout'],
  // Under `either`, `/SHOP/buy` is the shop's compared without case and the site's with it:
  // two deciding rooms might govern it, and it is refused (400) rather than decided in one.
  ['the configuration\'s routes (path_case left as is), another case', {}, null, '/SHOP/buy', undefined, 400]
]
for (const [name, options, before, target, firstTarget = '/shop/first', refused] of held) {
  test(`express: the room is not hidden by ${name}`, async () => {
    const engine = new Engine(TWO)
    const app = shopApp(engine, options, before)
    await serving(app, async (port) => {
      const first = await rawGet(port, firstTarget)
      assert.equal(first.body, 'shop')
      assert.ok(ticketOf(first), 'the first visitor takes the shop\'s one seat')
      const next = await rawGet(port, target)
      assert.notEqual(next.body, 'shop', `${target} was served past the full shop`)
      if (refused) {
        assert.equal(next.status, refused)
        assert.match(next.body, /400 Bad Request/)
      } else {
        assert.match(next.body, /id="position"/)
      }
    })
    engine.stopTicking()
  })
}

// Node checks a flat array's length before it touches the response's headers: so does the
// ticket's fold (it removed the app's header, then threw).
test('express: a writeHead that Node refuses leaves the app\'s headers as they were', async () => {
  const engine = new Engine(MANY)
  const app = express()
  app.use(velvetRope.express(engine, { room: 'shop' }))
  app.get('/', (req, res) => {
    res.setHeader('X-Keep', '1')
    try { res.writeHead(200, ['X-Keep']) } catch {}
    res.end('in')
  })
  await serving(app, async (port) => {
    const got = await rawGet(port, '/')
    assert.equal(got.headers['x-keep'], '1')
    assert.ok(ticketOf(got))
  })
  engine.stopTicking()
})

// A mounted layer keeps an absolute-form target's scheme and host in `req.url` (found by
// review: the mount path glued to it named no room, and the route behind served it).
test('express: a mounted middleware decides an absolute-form target', async () => {
  const engine = new Engine(TWO.replace('path = "/shop/"', 'path = "/api/shop/"'))
  const app = express()
  app.use('/api', velvetRope.express(engine, { rooms: { '/api/shop/': 'shop' } }))
  const r = express.Router()
  r.get('/shop/*rest', (req, res) => res.send('shop'))
  app.use('/api', r)
  await serving(app, async (port) => {
    assert.equal((await rawGet(port, '/api/shop/first')).body, 'shop')
    for (const target of [`http://127.0.0.1:${port}/api/shop/buy`, '/api/shop/buy']) {
      const next = await rawGet(port, target)
      assert.match(next.body, /id="position"/, `${target} was served past the full shop`)
    }
  })
  engine.stopTicking()
})
