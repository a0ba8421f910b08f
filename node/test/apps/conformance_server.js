'use strict'
/**
 * The front-door conformance table's server: Express or Fastify (argv[2]) behind the
 * middleware with no room named (the configuration's routes place requests), configuration
 * from argv[3]. Every path answers `origin`. Prints `{"port": ...}` once listening on
 * 127.0.0.1; stops on SIGTERM.
 */

const velvetRope = require('../..')

const [kind, config] = process.argv.slice(2)
const engine = velvetRope.Engine.fromFile(config)

async function main () {
  let server
  if (kind === 'express') {
    const app = require('express')()
    app.use(velvetRope.express(engine))
    app.use((req, res) => res.type('text/plain').send('origin\n'))
    server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s))
    })
  } else {
    const app = require('fastify')()
    await app.register(velvetRope.fastify, { engine })
    const origin = async (request, reply) => reply.type('text/plain').send('origin\n')
    app.all('/', origin)
    app.all('/*', origin)
    await app.listen({ port: 0, host: '127.0.0.1' })
    server = app.server
  }
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n')
  process.on('SIGTERM', () => {
    engine.stopTicking()
    server.close(() => process.exit(0))
    setTimeout(() => process.exit(0), 2000).unref()
  })
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack) + '\n')
  process.exit(1)
})
