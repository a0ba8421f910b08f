'use strict'
/**
 * A minimal Fastify app for the benchmarks, on 127.0.0.1: `plain <port>` (bare), `roomed
 * <port>` (behind the waiting-room plugin, a room far larger than the benchmark's visitors),
 * or `both <plain port> <roomed port>` (the two apps in one process, for counting
 * instructions: `benches/instructions.py fastify`).
 */
const velvetRope = require('..')

async function app (kind, port) {
  const app = require('fastify')()
  if (kind === 'roomed') {
    // BUCKET_WIDTH_SECS: the room's "minute" (an hour keeps tickets unrenewed through a long
    // count; default 60 s).
    const bucket = Number(process.env.BUCKET_WIDTH_SECS || 60)
    const engine = new velvetRope.Engine(`[settings]\nbucket_width_secs = ${bucket}\n` +
      '[[rooms]]\nname = "shop"\ntotal_active_users = 1000000\n' +
      'new_users_per_minute = 1000000\n[rooms.cookie]\nsecure = false\n')
    // Registered as Fastify's plugins that hook routes are (`await`, then the routes): each
    // route gets its own hook. `PLUGIN_NOT_AWAITED=1`: the routes first, one hook for all.
    if (process.env.PLUGIN_NOT_AWAITED === '1') app.register(velvetRope.fastify, { engine, room: 'shop' })
    else await app.register(velvetRope.fastify, { engine, room: 'shop' })
  }
  app.get('/', async () => ({ hello: 'world' }))
  await app.listen({ port: Number(port), host: '127.0.0.1' })
}

const [kind, ...ports] = process.argv.slice(2)
const started = kind === 'both'
  ? Promise.all([app('plain', ports[0]), app('roomed', ports[1])])
  : app(kind, ports[0])
started.catch((e) => {
  console.error(e)
  process.exit(1)
})
