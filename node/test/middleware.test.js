'use strict'
/** The middleware's set-up: what is guarded, and mistakes that fail at start-up. */

const assert = require('node:assert/strict')
const { test } = require('node:test')
const Fastify = require('fastify')

const velvetRope = require('..')
const { Engine, UnknownRoomError, fastify: plugin } = velvetRope
const { cookieOf } = require('../middleware.js')

const ROOMS = '[[rooms]]\nname = "shop"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n' +
  'queueing_status_code = 202\n[rooms.cookie]\nsecure = false\n'

test('fastify: a route declared on the root after the plugin is guarded', async () => {
  const engine = new Engine(ROOMS)
  const app = Fastify()
  app.register(plugin, { engine, room: 'shop', bypass: ['/health'] })
  app.get('/', async () => 'in')
  app.get('/health', async () => 'ok')
  const first = await app.inject('/')
  assert.equal(first.statusCode, 200)
  assert.match(first.headers['set-cookie'], /^__vr_shop=/)
  const second = await app.inject('/')
  assert.equal(second.statusCode, 202, 'the room holds one')
  assert.match(second.body, /id="position"/)
  const again = await app.inject({ url: '/', headers: { cookie: first.headers['set-cookie'].split(';')[0] } })
  assert.equal(again.statusCode, 200)
  assert.equal(again.headers['set-cookie'], undefined)
  assert.equal((await app.inject('/health')).statusCode, 200)
  await app.close()
})

test('fastify: registered with await, each route carries its own hook, first of its hooks', async () => {
  const app = Fastify()
  await app.register(plugin, { engine: new Engine(ROOMS), room: 'shop' })
  const ran = []
  app.get('/', { onRequest: [(_q, _r, next) => { ran.push('theirs'); next() }] }, async () => 'in')
  app.get('/free', { config: { velvetRope: false } }, async () => 'free')
  await app.ready()
  const hooks = app.printRoutes({ includeHooks: true, commonPrefix: false })
  assert.match(hooks, /└── \/ \(GET\)\n {4}• \(onRequest\) \["velvetRopeRoute\(\)","anonymous\(\)"\]/)
  assert.doesNotMatch(hooks, /free \(GET\)\n *• \(onRequest\)/, 'a route with the room off has no hook')
  // The HEAD route Fastify adds has one hook of its own: one visitor, one slot (the room holds one).
  const head = await app.inject({ method: 'HEAD', url: '/' })
  assert.equal(head.statusCode, 200)
  assert.match(head.headers['set-cookie'], /^__vr_shop=/)
  assert.deepEqual(ran, ['theirs'])
  const second = await app.inject('/')
  assert.equal(second.statusCode, 202, 'the room holds one')
  assert.deepEqual(ran, ['theirs'], 'a waiting visitor never reaches the route\'s own hooks')
  const again = await app.inject({ url: '/', headers: { cookie: head.headers['set-cookie'].split(';')[0] } })
  assert.equal(again.statusCode, 200)
  assert.equal((await app.inject('/free')).statusCode, 200)
  await app.close()
})

// With the configuration's routes choosing, a route with the room off is still not decided,
// whether or not a room accepts origin commands (the route then carries a hook, that only
// takes the command off).
for (const commands of [false, true]) {
  test(`fastify: the configuration's routes, and a route with the room off (${commands ? '' : 'no '}origin commands)`, async () => {
    const engine = new Engine(ROOMS.replace('[rooms.cookie]', 'routes = [{ path = "/" }]\n' +
      (commands ? 'enabled_origin_commands = ["revoke"]\n' : '') + '[rooms.cookie]'))
    assert.equal(engine.hasRoutes, true)
    const app = Fastify()
    await app.register(plugin, { engine })
    app.get('/in', async () => 'in')
    app.get('/free', { config: { velvetRope: false } }, async (req, reply) =>
      reply.header('Velvet-Rope-Command', 'revoke').send('free'))
    await app.ready()
    const hooks = app.printRoutes({ includeHooks: true, commonPrefix: false })
    assert.equal(/free \(GET\)\n *• \(onRequest\)/.test(hooks), commands, hooks)
    for (let i = 0; i < 3; i++) {
      const res = await app.inject('/free')
      assert.equal(res.statusCode, 200)
      assert.equal(res.headers['set-cookie'], undefined, 'decided')
      assert.equal(res.headers['velvet-rope-command'], commands ? undefined : 'revoke')
    }
    assert.equal((await app.inject('/in')).statusCode, 200, 'the free requests took no slot')
    assert.equal((await app.inject('/in')).statusCode, 202)
    await app.close()
  })
}

for (const awaited of [true, false]) {
  test(`fastify: a request no route matches is not decided (plugin ${awaited ? '' : 'not '}awaited)`, async () => {
    const app = Fastify()
    const loading = app.register(plugin, { engine: new Engine(ROOMS), room: 'shop' })
    if (awaited) await loading
    app.get('/', async () => 'in')
    for (let i = 0; i < 3; i++) {
      const res = await app.inject('/nope')
      assert.equal(res.statusCode, 404)
      assert.equal(res.headers['set-cookie'], undefined)
    }
    assert.equal((await app.inject('/')).statusCode, 200, 'the 404s took no slot')
    assert.equal((await app.inject('/')).statusCode, 202)
    await app.close()
  })
}

test('fastify: a route naming an unknown room fails at start-up', async () => {
  const app = Fastify()
  app.register(plugin, { engine: new Engine(ROOMS) })
  app.register(async (scoped) => {
    scoped.get('/x', { config: { velvetRope: { room: 'nope' } } }, async () => 'x')
  })
  await assert.rejects(app.ready(), (e) => {
    assert.ok(e instanceof UnknownRoomError, String(e))
    assert.match(e.message, /GET \/x: no room named `nope`/)
    return true
  })
})

test('fastify: without a default room only routes that name one are guarded', async () => {
  const app = Fastify()
  app.register(plugin, { engine: new Engine(ROOMS) })
  app.get('/free', async () => 'free')
  app.get('/shop', { config: { velvetRope: { room: 'shop' } } }, async () => 'shop')
  for (let i = 0; i < 3; i++) assert.equal((await app.inject('/free')).statusCode, 200)
  assert.equal((await app.inject('/shop')).statusCode, 200)
  assert.equal((await app.inject('/shop')).statusCode, 202)
  await app.close()
})

test('fastify: a route declared before the plugin loaded, naming an unknown room, fails on its requests', async () => {
  const app = Fastify()
  app.register(plugin, { engine: new Engine(ROOMS) })
  app.get('/x', { config: { velvetRope: { room: 'nope' } } }, async () => 'x')
  const res = await app.inject('/x')
  assert.equal(res.statusCode, 500)
  assert.equal(res.json().code, 'ERR_VELVET_ROPE_UNKNOWN_ROOM')
  await app.close()
})

test('the Cookie header is read from the raw headers, whatever its case, lines joined', () => {
  assert.equal(cookieOf({ rawHeaders: ['Host', 'a', 'Cookie', 'x=1'] }), 'x=1')
  assert.equal(cookieOf({ rawHeaders: ['cookie', 'x=1', 'Accept', '*/*', 'COOKIE', 'y=2'] }), 'x=1; y=2')
  assert.equal(cookieOf({ rawHeaders: ['Host', 'a', 'Cookies', 'x=1'] }), undefined)
})

test('fastify: an unknown room rejects the awaited register (UnknownRoomError), the process lives', () => {
  // In a process of its own: a plugin that throws synchronously takes the process down.
  const script = `
    const Fastify = require('fastify')
    const { Engine, fastify: plugin, UnknownRoomError } = require(${JSON.stringify(require('node:path').resolve(__dirname, '..'))})
    const engine = new Engine(${JSON.stringify(ROOMS)})
    ;(async () => {
      for (const options of [{ room: 'nope' }, { rooms: { '/a': 'nope' } }, { rooms: {}, bypass: [] }]) {
        const app = Fastify()
        try {
          await app.register(plugin, { engine, ...options })
          console.log('registered: ' + JSON.stringify(options))
        } catch (e) {
          console.log((e instanceof UnknownRoomError ? 'UnknownRoomError' : e.name) + ': ' + e.message)
        }
      }
      console.log('alive')
    })()`
  const run = require('node:child_process').spawnSync(process.execPath, ['-e', script],
    { encoding: 'utf8', cwd: __dirname })
  assert.equal(run.status, 0, run.stderr)
  assert.deepEqual(run.stdout.trim().split('\n'), [
    'UnknownRoomError: no room named `nope` in the configuration (its rooms: shop)',
    'UnknownRoomError: no room named `nope` in the configuration (its rooms: shop)',
    'TypeError: give `room` (every path) or `rooms` (path prefix -> room)',
    'alive'
  ])
})

const GERMAN = '[[rooms]]\nname = "shop"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n' +
  'accept_language = true\n[rooms.cookie]\nsecure = false\n'

test('fastify and express: the waiting page is in the visitor\'s Accept-Language', async () => {
  const app = Fastify()
  await app.register(plugin, { engine: new Engine(GERMAN), room: 'shop' })
  app.get('/', async () => 'in')
  assert.equal((await app.inject('/')).statusCode, 200)
  const page = await app.inject({ url: '/', headers: { 'accept-language': 'de-AT,de;q=0.9,en;q=0.5' } })
  assert.equal(page.statusCode, 200)
  assert.match(page.body, /lang="de-DE"/)
  assert.match(page.body, /Sie sind in der Warteschlange/)
  assert.match(page.body, /id="position"/)
  await app.close()

  const express = require('express')
  const { get } = require('./helpers.js')
  const engine = new Engine(GERMAN)
  const web = express()
  web.use(velvetRope.express(engine, { room: 'shop' }))
  web.get('/', (req, res) => res.send('in'))
  const server = web.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  try {
    const port = server.address().port
    await get(port, '/')
    const r = await get(port, '/', undefined, { 'Accept-Language': 'de' })
    assert.match(r.body, /lang="de-DE"/)
    assert.match(r.body, /Sie sind in der Warteschlange/)
  } finally {
    server.close()
    engine.stopTicking()
  }
})

const MANY = '[[rooms]]\nname = "shop"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n' +
  '[rooms.cookie]\nsecure = false\n'

// The app's `case sensitive routing` does not say how its routers compare (`express.Router()`
// is case-insensitive whatever the app says): without `caseSensitive`, a path either rule puts
// in a room is decided. `caseSensitive` says it for every router of the app.
test('express: paths compare under either case rule, or as `caseSensitive` says', async () => {
  const express = require('express')
  const { rawGet } = require('./helpers.js')
  const engine = new Engine(MANY)
  const decided = {}
  for (const [setting, option] of [[false, undefined], [true, undefined], [false, true], [true, false]]) {
    const app = express()
    if (setting) app.set('case sensitive routing', true)
    app.use(velvetRope.express(engine, { rooms: { '/shop': 'shop' }, caseSensitive: option }))
    app.get('/:a/:b', (req, res) => res.send('in'))
    const server = app.listen(0, '127.0.0.1')
    await new Promise((resolve) => server.once('listening', resolve))
    try {
      const r = await rawGet(server.address().port, '/SHOP/item')
      assert.equal(r.status, 200)
      decided[`${setting} ${option}`] = r.setCookies.some((c) => c.startsWith('__vr_shop='))
    } finally {
      server.close()
    }
  }
  assert.deepEqual(decided, {
    'false undefined': true,
    'true undefined': true,
    'false true': false,
    'true false': true
  })
  engine.stopTicking()
})

test('fastify: paths compare as its router does (`routerOptions.caseSensitive`)', async () => {
  const decided = {}
  for (const caseSensitive of [true, false]) {
    const app = Fastify({ routerOptions: { caseSensitive } })
    await app.register(plugin, { engine: new Engine(MANY), rooms: { '/shop': 'shop' } })
    app.get('/*', async () => 'in')
    const res = await app.inject('/SHOP/item')
    assert.equal(res.statusCode, 200)
    decided[caseSensitive] = /^__vr_shop=/.test(res.headers['set-cookie'] || '')
    await app.close()
  }
  assert.deepEqual(decided, { true: false, false: true })
})

// An application's middleware and a router's, or the plugin registered twice: a room decides a
// request once. Decided again, a new visitor took a second slot (here the room's only one, so
// the visitor admitted by the first was sent the waiting page by the second).
const TWO_ROOMS = ROOMS + '[[rooms]]\nname = "checkout"\ntotal_active_users = 1\n' +
  'new_users_per_minute = 1000\nqueueing_status_code = 202\n[rooms.cookie]\nsecure = false\n'

test('express: a room decides a request once, however many of its middlewares the request meets', async () => {
  const express = require('express')
  const { rawGet } = require('./helpers.js')
  // The application's by a named room, by a prefix, and by the configuration's routes.
  const routed = TWO_ROOMS.replace('queueing_status_code = 202\n', 'queueing_status_code = 202\nroutes = [{ path = "/shop" }]\n')
  assert.notEqual(routed, TWO_ROOMS)
  for (const [config, outer] of [[TWO_ROOMS, { room: 'shop' }], [TWO_ROOMS, { rooms: { '/': 'shop' } }], [routed, {}]]) {
    const engine = new Engine(config)
    const app = express()
    app.use(velvetRope.express(engine, outer))
    const inner = express.Router()
    inner.use(velvetRope.express(engine, { room: 'shop' }))
    // Another room on the same path still decides it: its own slot, its own ticket.
    inner.use('/pay', velvetRope.express(engine, { room: 'checkout' }))
    inner.get('/item', (req, res) => res.send('in'))
    inner.get('/pay', (req, res) => res.send('paid'))
    app.use('/shop', inner)
    const server = app.listen(0, '127.0.0.1')
    await new Promise((resolve) => server.once('listening', resolve))
    try {
      const port = server.address().port
      const first = await rawGet(port, '/shop/item')
      assert.equal(first.status, 200, JSON.stringify(outer))
      assert.equal(first.setCookies.filter((c) => c.startsWith('__vr_shop=')).length, 1)
      const second = await rawGet(port, '/shop/item')
      assert.equal(second.status, 202, 'the room holds one')
      const ticket = first.setCookies[0].split(';')[0]
      const paying = await rawGet(port, '/shop/pay', [['Cookie', ticket]])
      assert.equal(paying.status, 200)
      assert.deepEqual(paying.setCookies.map((c) => c.split('=')[0]), ['__vr_checkout'])
      const both = `${ticket}; ${paying.setCookies[0].split(';')[0]}`
      const again = await rawGet(port, '/shop/pay', [['Cookie', both]])
      assert.equal(again.status, 200, 'the same visitor')
      assert.deepEqual(again.setCookies, [])
      engine.tick()
      assert.equal(engine.stats('shop').activeUsers, 1, 'one slot for the one visitor')
      assert.equal(engine.stats('checkout').activeUsers, 1)
    } finally {
      server.close()
      engine.stopTicking()
    }
  }
})

// The routes choose a room only by deciding: a named room's middleware ahead of one of the
// routes left the routes to decide the request again (a second slot for a new visitor).
test('express: a named room, then the routes that put the request in it, decide it once', async () => {
  const express = require('express')
  const { rawGet } = require('./helpers.js')
  const routed = ROOMS.replace('new_users_per_minute = 1000\n', 'new_users_per_minute = 1000\nroutes = [{ path = "/" }]\n')
  assert.notEqual(routed, ROOMS)
  const engine = new Engine(routed)
  const app = express()
  app.use(velvetRope.express(engine, { room: 'shop' }))
  app.use(velvetRope.express(engine))
  app.get('/item', (req, res) => res.send('in'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  try {
    const port = server.address().port
    const first = await rawGet(port, '/item')
    assert.equal(first.status, 200)
    assert.equal(first.setCookies.length, 1)
    assert.equal((await rawGet(port, '/item')).status, 202, 'the room holds one')
    engine.tick()
    assert.equal(engine.stats('shop').activeUsers, 1)
  } finally {
    server.close()
    engine.stopTicking()
  }
})

test('fastify: the plugin registered twice (a named room, then the same or the routes) decides a request once', async () => {
  const routed = ROOMS.replace('new_users_per_minute = 1000\n', 'new_users_per_minute = 1000\nroutes = [{ path = "/" }]\n')
  for (const [config, second] of [[ROOMS, { room: 'shop' }], [routed, {}]]) {
    const engine = new Engine(config)
    const app = Fastify()
    await app.register(plugin, { engine, room: 'shop' })
    await app.register(plugin, { engine, ...second })
    app.get('/', async () => 'in')
    const first = await app.inject('/')
    assert.equal(first.statusCode, 200, JSON.stringify(second))
    assert.match(first.headers['set-cookie'], /^__vr_shop=/)
    assert.equal((await app.inject('/')).statusCode, 202, 'the room holds one')
    await app.close()
  }
})

// The record is of a room on a target: an internal forward to another room's path, or a
// rewrite out of a bypassed path, is decided again; a dry run's verdict is counted once.
// (Found by the review of the record.)
test('express: a forward or a rewrite is decided again; a dry run counts once', async () => {
  const express = require('express')
  const inject = require('light-my-request')
  const config = (extra) => '[[rooms]]\nname = "shop"\ntotal_active_users = 1000\nnew_users_per_minute = 100000\n' +
    'queueing_status_code = 202\nroutes = [{ path = "/shop" }]\n' + extra + '[rooms.cookie]\nsecure = false\n' +
    '[[rooms.rules]]\naction = "bypass"\npaths = ["/shop/static/"]\n' +
    '[[rooms]]\nname = "checkout"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n' +
    'queueing_status_code = 202\nroutes = [{ path = "/checkout" }]\n[rooms.cookie]\nsecure = false\n'
  {
    const engine = new Engine(config(''))
    const app = express()
    app.use(velvetRope.express(engine))
    app.get('/shop/buy', (req, res) => { req.url = '/checkout/pay'; app.handle(req, res) })
    app.get('/checkout/pay', (req, res) => res.send('paid'))
    assert.equal((await inject(app, { url: '/checkout/pay' })).statusCode, 200)
    assert.equal((await inject(app, { url: '/checkout/pay' })).statusCode, 202, 'the checkout holds one')
    assert.equal((await inject(app, { url: '/shop/buy' })).statusCode, 202, 'forwarded to the full checkout')
    engine.stopTicking()
  }
  {
    const engine = new Engine(config('').replace('total_active_users = 1000', 'total_active_users = 1'))
    const app = express()
    app.use(velvetRope.express(engine, { room: 'shop' }))
    app.use((req, res, next) => { if (req.url.startsWith('/shop/static/')) req.url = '/shop/item'; next() })
    const inner = express.Router()
    inner.use(velvetRope.express(engine, { room: 'shop' }))
    inner.get('/shop/item', (req, res) => res.send('item'))
    app.use(inner)
    assert.equal((await inject(app, { url: '/shop/item' })).statusCode, 200)
    assert.equal((await inject(app, { url: '/shop/static/x' })).statusCode, 202, 'rewritten out of the bypass')
    engine.stopTicking()
  }
  {
    const engine = new Engine(config('mode = "dry_run"\nqueue_all = true\n'))
    const app = express()
    app.use(velvetRope.express(engine, { room: 'shop' }))
    const inner = express.Router()
    inner.use(velvetRope.express(engine, { room: 'shop' }))
    inner.get('/shop/item', (req, res) => res.send('item'))
    app.use(inner)
    const first = await inject(app, { url: '/shop/item' })
    assert.equal(first.statusCode, 200)
    const cookie = [].concat(first.headers['set-cookie'])[0].split(';')[0]
    assert.equal((await inject(app, { url: '/shop/item', headers: { cookie } })).statusCode, 200)
    engine.tick()
    assert.equal(JSON.parse(engine.statsJson()).rooms.shop.would_have_queued, 2, 'one per request')
    engine.stopTicking()
  }
})
