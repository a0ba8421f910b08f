'use strict'
/**
 * A test server: Express or Fastify (argv[2]) in a `node:cluster` of two workers sharing the
 * rooms' counts through one state file (argv[3]). The primary prints `{"port": ...}` once
 * both workers listen on 127.0.0.1, and stops them on SIGTERM.
 *
 * Routes: `/shop/*` waits in room `shop`; `/health` and `/static/` are bypassed; `/open` is in
 * no room; Fastify's `/checkout` names room `checkout` in its route config, `/shop/free` opts
 * out. `/metrics` serves the metrics (Express: a prom-client registry holding the engine's
 * families; Fastify: the engine's text). Files under `test/apps/public` are served at the root (Express's `express.static`; for
 * Fastify a wildcard route that resolves its parameter as `send` does, decoding what
 * find-my-way decoded already, as careless handlers do): `/vault.html` is in room
 * `vault`, `/static/app.css` is bypassed. Both routers fold case (Express's default; Fastify's
 * `caseSensitive: false`), so `/SHOP/x` is a `/shop/:page` request.
 */

const cluster = require('node:cluster')
const fs = require('node:fs')
const path = require('node:path')
const velvetRope = require('../..')

const [kind, statePath] = process.argv.slice(2)
const WORKERS = 2
const ROOMS = path.join(__dirname, 'rooms.toml')
const PUBLIC = path.join(__dirname, 'public')
const ROUTING = { rooms: { '/shop': 'shop', '/vault': 'vault' }, bypass: ['/health', '/static/'] }

function handler (req, route) {
  return { ok: true, path: req.url, pid: process.pid, route }
}

function express (engine) {
  const app = require('express')()
  app.use((req, res, next) => {
    res.set('X-Worker-Pid', String(process.pid))
    next()
  })
  app.use(velvetRope.express(engine, ROUTING))
  // Metrics through prom-client: the engine's families beside the worker's own counter.
  const client = require('prom-client')
  const registry = new client.Registry()
  const shopPages = new client.Counter({ name: 'app_shop_pages_total', help: 'Shop pages served', registers: [registry] })
  velvetRope.prometheus.register(engine, registry)
  app.get('/metrics', velvetRope.prometheus.express(engine, { registry }))
  app.get('/health', (req, res) => res.json({ ok: true }))
  app.get('/open', (req, res) => res.json(handler(req)))
  app.get('/shop/:page', (req, res) => {
    shopPages.inc()
    res.json(handler(req, 'shop'))
  })
  app.use(require('express').static(PUBLIC))
  return (port, ready) => app.listen(port, '127.0.0.1', ready)
}

/**
 * A file under `PUBLIC` for a path, resolved as `send` (behind `express.static` and
 * `@fastify/static`) resolves it: percent-decoded, then normalised, never above the root.
 */
function publicFile (urlPath) {
  let decoded
  try {
    decoded = decodeURIComponent(urlPath)
  } catch {
    return null
  }
  const relative = path.normalize('.' + path.sep + decoded)
  if (relative.startsWith('..') || decoded.includes('\0')) return null
  const file = path.join(PUBLIC, relative)
  return fs.existsSync(file) && fs.statSync(file).isFile() ? file : null
}

function fastify (engine) {
  const app = require('fastify')({ routerOptions: { caseSensitive: false } })
  app.addHook('onRequest', async (request, reply) => {
    reply.header('X-Worker-Pid', String(process.pid))
  })
  app.register(velvetRope.fastify, { engine, ...ROUTING })
  app.register(async (scoped) => {
    scoped.get('/health', async () => ({ ok: true }))
    // The engine's own OpenMetrics text.
    scoped.get('/metrics', velvetRope.prometheus.fastify(engine))
    scoped.get('/open', async (req) => handler(req))
    scoped.get('/shop/free', { config: { velvetRope: false } }, async (req) => handler(req))
    scoped.get('/shop/:page', async (req) => handler(req, 'shop'))
    scoped.get('/checkout', { config: { velvetRope: { room: 'checkout' } } }, async (req) => handler(req))
    scoped.get('/*', async (req, reply) => {
      // The wildcard (decoded by find-my-way), decoded again by `publicFile`: a careless
      // handler, which the router must allow for (`%252e%252e` is `..` to it).
      const file = publicFile('/' + req.params['*'])
      if (file === null) return reply.code(404).send({ ok: false })
      return reply.type(file.endsWith('.html') ? 'text/html' : 'text/css').send(fs.readFileSync(file))
    })
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
