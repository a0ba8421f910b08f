'use strict'
/**
 * A minimal Fastify app for the benchmarks, on 127.0.0.1: `plain <port>` (bare), `roomed
 * <port>` (behind the waiting-room plugin, a room far larger than the benchmark's visitors),
 * or `both <plain port> <roomed port>` (the two apps in one process, for counting
 * instructions: `benches/instructions.py fastify`).
 */
const velvetRope = require('..')

function app (kind, port) {
  const app = require('fastify')()
  if (kind === 'roomed') {
    // BUCKET_WIDTH_SECS: the room's "minute" (an hour keeps tickets unrenewed through a long
    // count; default 60 s).
    const bucket = Number(process.env.BUCKET_WIDTH_SECS || 60)
    const engine = new velvetRope.Engine(`[settings]\nbucket_width_secs = ${bucket}\n` +
      '[[rooms]]\nname = "shop"\ntotal_active_users = 1000000\n' +
      'new_users_per_minute = 1000000\n[rooms.cookie]\nsecure = false\n')
    app.register(velvetRope.fastify, { engine, room: 'shop' })
  }
  app.get('/', async () => ({ hello: 'world' }))
  app.listen({ port: Number(port), host: '127.0.0.1' })
}

const [kind, ...ports] = process.argv.slice(2)
if (kind === 'both') {
  app('plain', ports[0])
  app('roomed', ports[1])
} else {
  app(kind, ports[0])
}
