'use strict'
/**
 * A minimal Fastify app for `fastify_bench.mjs`: `plain` (bare) or `roomed` (behind the
 * waiting-room plugin, a room far larger than the benchmark's visitors), on 127.0.0.1.
 */
const velvetRope = require('..')

const [kind, port] = process.argv.slice(2)
const app = require('fastify')()
if (kind === 'roomed') {
  const engine = new velvetRope.Engine('[[rooms]]\nname = "shop"\ntotal_active_users = 1000000\n' +
    'new_users_per_minute = 1000000\n[rooms.cookie]\nsecure = false\n')
  app.register(velvetRope.fastify, { engine, room: 'shop' })
}
app.get('/', async () => ({ hello: 'world' }))
app.listen({ port: Number(port), host: '127.0.0.1' })
