// Node benchmarks (`make bench-node`, not part of `make test`): velvet-rope's calls against
// the npm peers in one run, with a native no-op as the floor. mitata reports the average time
// per call (with its own loop overhead subtracted); every limiter is set far above what the
// loop takes, so each call is an allowed call, as in steady traffic, except where named.
import { createRequire } from 'node:module'
import { bench, group, run, summary } from 'mitata'

const require = createRequire(import.meta.url)
const vr = require('../index.js')
const { RateLimiter: LimiterPeer } = await import('limiter')
const { RateLimiterMemory } = require('rate-limiter-flexible')

// Hour-wide buckets: with the default minute, a run that crosses a minute boundary renews
// every replayed ticket on every call from then on (a new ticket sealed per call: ~5x the
// time), which is what a client that never stores its new cookie costs, not steady traffic.
const room = '[settings]\nbucket_width_secs = 3600\n[[rooms]]\nname = "shop"\ntotal_active_users = 1000000\nnew_users_per_minute = 1000000\n[rooms.cookie]\nsecure = false\n'
const engine = new vr.Engine(room)
const cookieOf = (d) => d.setCookie.split(';')[0]
const one = cookieOf(engine.admit('shop'))
const many = Array.from({ length: 10000 }, () => cookieOf(engine.admit('shop')))
const shop = engine.room('shop')
let i = 0

const limiter = new vr.RateLimiter(1e12)
const peerLimiter = new LimiterPeer({ tokensPerInterval: 1e12, interval: 'second' })
const flexible = new RateLimiterMemory({ points: 1e12, duration: 1 })
const flexibleFull = new RateLimiterMemory({ points: 1, duration: 3600 })
await flexibleFull.consume('key').catch(() => {})

// The middleware's own cost per request: the Fastify hook and the Express middleware called
// directly with request and reply stand-ins (no server, no sockets), 2,000 visitors holding
// valid tickets in turn, against a hook that only calls `next`.
const visitors = many.slice(0, 2000).map((c) => ({
  url: '/',
  method: 'GET',
  raw: { rawHeaders: ['Host', '127.0.0.1', 'Accept', '*/*', 'Cookie', c] },
  rawHeaders: ['Host', '127.0.0.1', 'Accept', '*/*', 'Cookie', c],
  originalUrl: '/',
  // Fastify builds routeOptions in a getter on each access; so does the stand-in.
  get routeOptions () { return { method: 'GET', url: '/', config: { url: '/', method: 'GET' } } }
}))
// The Fastify plugin both ways: registered after a route (one application-wide hook), and
// before any (the hook it gives each route as the route is declared).
const hooks = {}
const fastifyStandIn = (routes) => ({ printRoutes: () => routes, addHook: (name, fn) => { hooks[name] = fn } })
vr.fastify(fastifyStandIn('└── / (GET)\n'), { engine, room: 'shop' }, () => {})
const appWideHook = hooks.onRequest
engine.stopTicking()
vr.fastify(fastifyStandIn('(empty tree)'), { engine, room: 'shop' }, () => {})
const route = { method: 'GET', url: '/' }
hooks.onRoute(route)
const routeHook = route.onRequest[0]
engine.stopTicking()
const expressMw = vr.express(engine, { room: 'shop' })
engine.stopTicking()
const reply = { header () { return this }, code () { return this }, send () { return this } }
const res = { append () { return this }, status () { return this }, send () { return this } }
let nexts = 0
const next = () => { nexts++ }
let v = 0

summary(() => {
  group('middleware, own cost per request (2,000 visitors with valid tickets in turn)', () => {
    bench('a hook that only calls next (the floor)', () => {
      v = (v + 1) % visitors.length
      next(visitors[v], reply)
    })
    bench('fastify plugin, the route\'s own hook (registered before the routes)', () => {
      v = (v + 1) % visitors.length
      routeHook(visitors[v], reply, next)
    })
    bench('fastify plugin, the application-wide hook (registered after)', () => {
      v = (v + 1) % visitors.length
      appWideHook(visitors[v], reply, next)
    })
    bench('express middleware', () => {
      v = (v + 1) % visitors.length
      expressMw(visitors[v], res, next)
    })
  })
  group('floor', () => {
    bench('napi no-op (velvet-rope binding)', () => vr.noop())
  })
  group('admission', () => {
    bench('engine.admit, valid cookie, one visitor (warm)', () => engine.admit('shop', one))
    bench('engine.admit, valid cookie, 10,000 visitors in turn', () => {
      i = (i + 1) % many.length
      return engine.admit('shop', many[i])
    })
    bench('room.admit (engine.room), valid cookie, 10,000 visitors in turn', () => {
      i = (i + 1) % many.length
      return shop.admit(many[i])
    })
  })
  group('leases', () => {
    bench('velvet-rope rateLimiter.tryAcquire()', () => limiter.tryAcquire())
    bench('limiter tryRemoveTokens(1)', () => peerLimiter.tryRemoveTokens(1))
    bench('rate-limiter-flexible consume, allowed (awaited)', async () => { await flexible.consume('key') })
    bench('rate-limiter-flexible consume, rejected (awaited)', async () => { await flexibleFull.consume('key').catch(() => {}) })
  })
})

await run()
if (nexts === 0) throw new Error('the middleware never let a visitor through')
