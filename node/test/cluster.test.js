'use strict'
/**
 * Two engines as two hosts sharing one room through a real redis-server (Debian's, started
 * here on a free 127.0.0.1 port, persistence off): a `[cluster]` table starts the sync loop.
 */

const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')
const { setTimeout: sleep } = require('node:timers/promises')

const { ConfigError, Engine } = require('..')

const LIMIT = 5

function freePort () {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

function connects (port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1')
    s.on('connect', () => { s.destroy(); resolve(true) })
    s.on('error', () => resolve(false))
  })
}

async function redisServer () {
  const port = await freePort()
  // A directory of its own: a server loads a dump.rdb it finds in its directory.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vr-redis-'))
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1',
    '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' })
  proc.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }))
  const failed = new Promise((resolve, reject) => proc.on('error', (e) =>
    reject(new Error(`redis-server could not start (make test installs Debian's): ${e.message}`))))
  for (let i = 0; i < 500; i++) {
    if (await Promise.race([connects(port), failed])) return { port, proc }
    await sleep(20)
  }
  proc.kill('SIGKILL')
  throw new Error('redis-server did not start')
}

/** The `[cluster]` table of host `name` syncing through the redis-server on `port`. */
function clusterTable (port, name) {
  return `[cluster]
redis_url = "redis://127.0.0.1:${port}"
host_id = "${name}"
sync_interval_ms = 100
lease_ms = 600
timeout_ms = 200
`
}

function host (port, name) {
  return new Engine(`
[settings]
bucket_width_secs = 1
[[tickets.keys]]
id = 1
secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"
${clusterTable(port, name)}[[rooms]]
name = "shop"
total_active_users = ${LIMIT}
new_users_per_minute = 1000
session_duration = 600
refresh_interval = 1
[rooms.cookie]
secure = false
`)
}

const cookieOf = (d) => d.setCookie.split(';', 1)[0]

test('two hosts admit exactly the room through Redis', async () => {
  const redis = await redisServer()
  try {
    const hosts = [host(redis.port, 'node-a'), host(redis.port, 'node-b')]
    await sleep(2400) // a store that knows nobody learns first (2.1 s with these settings)
    let admitted = 0
    let waiters = []
    for (let i = 0; i < 20; i++) {
      const e = hosts[i % 2]
      const d = e.admit('shop')
      if (d.admitted) admitted++
      else waiters.push([e, cookieOf(d)])
    }
    const deadline = Date.now() + 10_000
    while (admitted < LIMIT && Date.now() < deadline) {
      await sleep(100)
      const still = []
      for (const [e, cookie] of waiters) {
        const d = e.admit('shop', cookie)
        if (d.admitted) admitted++
        else still.push([e, d.setCookie ? cookieOf(d) : cookie])
      }
      waiters = still
      assert.ok(admitted <= LIMIT, `${admitted} admitted`)
    }
    await sleep(500)
    for (const [e, cookie] of waiters) assert.equal(e.admit('shop', cookie).admitted, false)
    assert.equal(admitted, LIMIT)
    for (const e of hosts) {
      const st = e.clusterStatus()
      assert.ok(st.syncs > 5, JSON.stringify(st))
      assert.equal(st.failures, 0)
      assert.equal(st.hosts, 2)
      assert.equal(st.inOutage, false)
    }
  } finally {
    redis.proc.kill('SIGKILL')
  }
})

test('no cluster table, no sync loop; a bad store URL is a ConfigError', () => {
  const e = new Engine('[[rooms]]\nname = "r"\ntotal_active_users = 1\nnew_users_per_minute = 1\n')
  assert.equal(e.clusterStatus(), null)
  assert.throws(() => new Engine('[cluster]\nredis_url = "http://x"\n[[rooms]]\nname = "r"\n' +
    'total_active_users = 1\nnew_users_per_minute = 1\n'), (err) => {
    assert.ok(err instanceof ConfigError)
    assert.match(err.message, /cluster\.redis_url/)
    return true
  })
})

test('leases are shared fairly across hosts through the Redis root', async () => {
  const { Coordinator } = require('..')
  const redis = await redisServer()
  try {
    const host = (name) => new Coordinator(`
${clusterTable(redis.port, name)}[[resources]]
identifier_glob = "db"
capacity = 90
refresh_failure = "pessimistic"
algorithm = { kind = "fair_share", lease_length = 2, refresh_interval = 0.2 }
`)
    const a = host('node-a')
    const b = host('node-b')
    const clients = [[a, 'a1'], [a, 'a2'], [b, 'b1']]
    const held = { a1: 0, a2: 0, b1: 0 }
    let fairSince = null
    const deadline = Date.now() + 20_000
    while (Date.now() < deadline) {
      for (const [coord, c] of clients) {
        held[c] = coord.request(c, 'db', 100).capacity
        const total = held.a1 + held.a2 + held.b1
        assert.ok(total <= 90 + 1e-9, JSON.stringify(held))
      }
      const fair = Object.values(held).every((v) => Math.abs(v - 30) < 1e-6)
      if (fair && fairSince === null) fairSince = Date.now()
      if (!fair) fairSince = null
      if (fairSince !== null && Date.now() - fairSince > 1000) break
      await sleep(100)
    }
    assert.notEqual(fairSince, null, JSON.stringify(held))
  } finally {
    redis.proc.kill('SIGKILL')
  }
})

test("a leaf coordinator emits its learning and its root's outage as 'event'", async () => {
  const { Coordinator } = require('..')
  const redis = await redisServer()
  const seen = []
  try {
    const leaf = new Coordinator(`
${clusterTable(redis.port, 'node-events')}[[resources]]
identifier_glob = "db"
capacity = 90
algorithm = { kind = "fair_share", lease_length = 2, refresh_interval = 0.2 }
`)
    leaf.on('event', (e) => seen.push([e.event, e.fields.source ?? null, e.warning]))
    const waitFor = async (want) => {
      const deadline = Date.now() + 15_000
      const has = () => seen.some((e) => JSON.stringify(e) === JSON.stringify(want))
      while (!has() && Date.now() < deadline) {
        leaf.request('c', 'db', 10)
        await sleep(100)
      }
      assert.ok(has(), `${JSON.stringify(want)} not in ${JSON.stringify(seen)}`)
    }
    await waitFor(['lease_learning_started', 'coordinator', false])
    await waitFor(['lease_learning_started', 'root', false])
    await waitFor(['lease_learning_ended', 'root', false])
    await waitFor(['lease_learning_ended', 'coordinator', false])
    assert.equal(seen.length, 4, JSON.stringify(seen))
    redis.proc.kill('SIGKILL')
    await waitFor(['lease_root_outage_began', null, true])
  } finally {
    redis.proc.kill('SIGKILL')
  }
  // Without the timer, the events wait for drainEvents.
  const quiet = new Coordinator(`[[resources]]
identifier_glob = "db"
capacity = 9
algorithm = { kind = "fair_share", lease_length = 1, refresh_interval = 1 }
`, { emitEvents: false })
  let emitted = 0
  quiet.on('event', () => { emitted++ })
  await sleep(1200)
  assert.equal(emitted, 0)
  assert.deepEqual(quiet.drainEvents().map((e) => e.event), ['lease_learning_started', 'lease_learning_ended'])
})

/** One command to the redis-server on `port` (a RESP array): the reply's first line. */
function redisCommand (port, ...args) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1')
    let data = ''
    const command = [`*${args.length}\r\n`]
    for (const a of args) command.push(`$${Buffer.byteLength(a)}\r\n${a}\r\n`)
    s.on('connect', () => s.write(command.join('')))
    s.on('data', (chunk) => {
      data += chunk
      const lines = data.split('\r\n')
      if (lines[0].startsWith('$-1')) { s.destroy(); resolve(null) }
      else if (lines[0].startsWith('$') && lines.length >= 3) { s.destroy(); resolve(lines[1]) }
      else if (!lines[0].startsWith('$') && lines.length >= 2) { s.destroy(); resolve(lines[0]) }
    })
    s.on('error', reject)
  })
}

/**
 * A part of room `shop`'s state in the store on `port` (`clock`, `skew`, `seq`, `born`,
 * `frontier`, `ttl`: the first doubles of the sync script's record, field `st`), as a whole
 * number's digits; null without a state.
 */
function roomState (port, part) {
  const at = ['clock', 'skew', 'seq', 'born', 'frontier', 'ttl'].indexOf(part) + 2
  const lua = "local s = redis.call('HGET', KEYS[1], 'st') if not s then return false end " +
    `return string.format('%d', ({ struct.unpack('<Bdddddd', s) })[${at}])`
  return redisCommand(port, 'EVAL', lua, '1', '{vr:shop}:s')
}

test('a reload to another store starts the new sync loop only once the old one stopped', async () => {
  const [a, b] = [await redisServer(), await redisServer()]
  try {
    const e = host(a.port, 'node-reload')
    await sleep(300)
    // The old store answers slowly: a round of the old loop is under way when the reload
    // comes, and ends (answered) a little after.
    process.kill(a.proc.pid, 'SIGSTOP')
    await sleep(150) // longer than the sync interval: a round waits on the old store
    const config = (port) => `
[settings]
bucket_width_secs = 1
${clusterTable(port, 'node-reload')}[[rooms]]
name = "shop"
total_active_users = ${LIMIT}
new_users_per_minute = 1000
session_duration = 600
refresh_interval = 1
`
    e.reload(config(b.port))
    await sleep(20) // within the old round's timeout: it gets its answer
    process.kill(a.proc.pid, 'SIGCONT')
    const deadline = Date.now() + 5000
    let born = null
    while (born === null && Date.now() < deadline) {
      await sleep(20)
      born = await roomState(b.port, 'born')
    }
    assert.ok(born !== null, 'the new loop syncs with the new store')
    await sleep(400)
    const lastOld = await roomState(a.port, 'clock')
    assert.ok(Number(lastOld) <= Number(born),
      `the old loop synced at ${lastOld}, after the new one's first sync at ${born}`)
  } finally {
    process.kill(a.proc.pid, 'SIGCONT')
    a.proc.kill('SIGKILL')
    b.proc.kill('SIGKILL')
  }
})
