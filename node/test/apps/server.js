'use strict'
/**
 * A test server: Express or Fastify (argv[2]) in a `node:cluster` of two workers sharing the
 * rooms' counts through one state file (argv[3]). The primary prints `{"port": ...}` once
 * both workers listen on 127.0.0.1, and stops them on SIGTERM.
 *
 * Routes: `/shop/*` waits in room `shop`; `/health` is bypassed; `/open` is in no room;
 * Fastify's `/checkout` names room `checkout` in its route config, `/shop/free` opts out.
 */

const cluster = require('node:cluster')
const path = require('node:path')
const velvetRope = require('../..')

const [kind, statePath] = process.argv.slice(2)
const WORKERS = 2
const ROOMS = path.join(__dirname, 'rooms.toml')

function handler (req) {
  return { ok: true, path: req.url, pid: process.pid }
}

function express (engine) {
  const app = require('express')()
  app.use((req, res, next) => {
    res.set('X-Worker-Pid', String(process.pid))
    next()
  })
  app.use(velvetRope.express(engine, { rooms: { '/shop': 'shop' }, bypass: ['/health'] }))
  app.get('/health', (req, res) => res.json({ ok: true }))
  app.get('/open', (req, res) => res.json(handler(req)))
  app.get('/shop/:page', (req, res) => res.json(handler(req)))
  return (port, ready) => app.listen(port, '127.0.0.1', ready)
}

function fastify (engine) {
  const app = require('fastify')()
  app.addHook('onRequest', async (request, reply) => {
    reply.header('X-Worker-Pid', String(process.pid))
  })
  app.register(velvetRope.fastify, { engine, rooms: { '/shop': 'shop' }, bypass: ['/health'] })
  app.register(async (scoped) => {
    scoped.get('/health', async () => ({ ok: true }))
    scoped.get('/open', async (req) => handler(req))
    scoped.get('/shop/free', { config: { velvetRope: false } }, async (req) => handler(req))
    scoped.get('/shop/:page', async (req) => handler(req))
    scoped.get('/checkout', { config: { velvetRope: { room: 'checkout' } } }, async (req) => handler(req))
  })
  return (port, ready) => app.listen({ port, host: '127.0.0.1' }).then(() => ready())
}

if (cluster.isPrimary) {
  let listening = 0
  let port = null
  for (let i = 0; i < WORKERS; i++) cluster.fork()
  cluster.on('listening', (_worker, address) => {
    port = address.port
    if (++listening === WORKERS) process.stdout.write(JSON.stringify({ port }) + '\n')
  })
  cluster.on('exit', (worker, code) => {
    if (code !== 0 && !stopping) {
      console.error(`worker ${worker.process.pid} died (code ${code})`)
      process.exit(1)
    }
  })
  let stopping = false
  process.on('SIGTERM', () => {
    stopping = true
    cluster.disconnect(() => process.exit(0))
  })
} else {
  const engine = velvetRope.Engine.fromFile(ROOMS, { sharedMemory: statePath })
  const listen = kind === 'fastify' ? fastify(engine) : express(engine)
  listen(0, () => {})
}
