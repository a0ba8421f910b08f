'use strict'
/**
 * A test server for test/revoke.test.js: Express or Fastify (argv[2]) in a `node:cluster` of
 * two workers sharing the rooms of `revoke.toml` through one state file (argv[3]); the
 * primary prints `{"port": ...}` once both workers listen.
 *
 * `/<room>/page` is an ordinary page; `/<room>/logout` answers with `Velvet-Rope-Command`
 * (the origin ends the visitor's session), set the ways apps set headers: Express's
 * `res.set` and `res.writeHead(status, headers)`, Fastify's `reply.header` and its raw
 * response's `setHeader`. `/health` (and under it) is bypassed, `/free/` is in no room;
 * Fastify's `/rv/optout/logout` turns the waiting room off in its route config.
 */

const cluster = require('node:cluster')
const path = require('node:path')
const velvetRope = require('../..')

const [kind, statePath] = process.argv.slice(2)
const WORKERS = 2
const ROOMS = path.join(__dirname, 'revoke.toml')
const ROUTING = { rooms: { '/rv/': 'rv', '/plain/': 'plain', '/hdr/': 'hdr', '/rvb/': 'rvb' }, bypass: ['/health'] }
/** Several commands, `revoke` among them, in another case: as an origin may send them. */
const COMMAND = 'x-later, Revoke'

function body (extra = {}) {
  return JSON.stringify({ ok: true, pid: process.pid, ...extra })
}

const LOGOUT_HEADERS = Object.freeze({ 'content-type': 'application/json', 'velvet-rope-command': 'revoke' })

function express (engine) {
  const app = require('express')()
  app.use((req, res, next) => {
    res.set('X-Worker-Pid', String(process.pid))
    next()
  })
  app.use(velvetRope.express(engine, ROUTING))
  app.get('/health', (req, res) => res.type('json').send(body()))
  app.get('/health/stats', (req, res) => res.type('json').send(engine.statsJson()))
  app.get(['/health/cmd', '/free/cmd'], (req, res) => {
    res.set('Velvet-Rope-Command', COMMAND).type('json').send(body())
  })
  app.get('/hdr/logout', (req, res) => {
    // Given to writeHead itself, an object used for every response: it must not be changed.
    res.writeHead(200, LOGOUT_HEADERS)
    res.end(body({ logout: true }))
  })
  app.get('/:room/page', (req, res) => res.type('json').send(body()))
  app.get(['/:room/logout', '/:room/public/logout'], (req, res) => {
    res.set('Velvet-Rope-Command', COMMAND).type('json').send(body({ logout: true }))
  })
  return (port, ready) => app.listen(port, '127.0.0.1', ready)
}

function fastify (engine) {
  const app = require('fastify')()
  app.addHook('onRequest', async (request, reply) => {
    reply.header('X-Worker-Pid', String(process.pid))
  })
  app.register(velvetRope.fastify, { engine, ...ROUTING })
  app.register(async (scoped) => {
    const json = (reply, extra) => reply.type('application/json').send(body(extra))
    scoped.get('/health', async (req, reply) => json(reply))
    scoped.get('/health/stats', async (req, reply) => reply.type('application/json').send(engine.statsJson()))
    for (const url of ['/health/cmd', '/free/cmd']) {
      scoped.get(url, async (req, reply) => json(reply.header('Velvet-Rope-Command', COMMAND)))
    }
    scoped.get('/rv/optout/logout', { config: { velvetRope: false } },
      async (req, reply) => json(reply.header('Velvet-Rope-Command', COMMAND), { logout: true }))
    scoped.get('/hdr/logout', async (req, reply) => {
      reply.raw.setHeader('velvet-rope-command', 'revoke') // on the raw response
      return json(reply, { logout: true })
    })
    scoped.get('/:room/page', async (req, reply) => json(reply))
    for (const url of ['/:room/logout', '/:room/public/logout']) {
      scoped.get(url, async (req, reply) => json(reply.header('Velvet-Rope-Command', COMMAND), { logout: true }))
    }
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
