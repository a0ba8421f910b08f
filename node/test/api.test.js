'use strict'
/** The JavaScript API and every error, in process. */

const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')
const { Worker } = require('node:worker_threads')

const velvetRope = require('..')
const {
  CapacityError, ConfigError, Coordinator, Engine, Gauge, InvalidArgumentError, LeaseError,
  RateLimiter, SharedMemoryError, UnknownResourceError, UnknownRoomError, VelvetRopeError
} = velvetRope

const T0 = 1_800_000_000_000

function room ({ name = 'shop', total = 2, extra = '' } = {}) {
  return `[[rooms]]\nname = "${name}"\ntotal_active_users = ${total}\n` +
    `new_users_per_minute = 1000\n${extra}\n[rooms.cookie]\nsecure = false\n`
}

/** The `name=value` part of a decision's `Set-Cookie`. */
function value (d) {
  assert.ok(d.setCookie, 'a cookie to set')
  return d.setCookie.split(';', 1)[0]
}

function tmpdir () {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'velvet-rope-api-'))
}

test('engines from TOML, JSON and a file', () => {
  assert.deepEqual(new Engine(room()).rooms, ['shop'])
  const json = '{"rooms": [{"name": "j", "total_active_users": 1, "new_users_per_minute": 1}]}'
  assert.deepEqual(new Engine(json).rooms, ['j'])
  const file = path.join(tmpdir(), 'rooms.toml')
  fs.writeFileSync(file, room())
  assert.deepEqual(Engine.fromFile(file).rooms, ['shop'])
  assert.ok(velvetRope.sharedMemorySize(room()) > 0)
})

test('configuration errors name the field and carry a stable code', () => {
  assert.throws(() => new Engine(room({ total: 0 })), (e) => {
    assert.ok(e instanceof ConfigError && e instanceof VelvetRopeError && e instanceof Error)
    assert.equal(e.code, 'ERR_VELVET_ROPE_CONFIG')
    assert.equal(e.name, 'ConfigError')
    assert.match(e.message, /rooms\[0\]\.total_active_users/)
    return true
  })
  assert.throws(() => new Engine('[[rooms]]\nname = 3\n'), { name: 'ConfigError', message: /could not be parsed/ })
  assert.throws(() => Engine.fromFile('/nonexistent/rooms.toml'), { name: 'ConfigError', message: /cannot read configuration file/ })
  assert.throws(() => new Engine(''), ConfigError, 'nothing defined')
  assert.throws(() => velvetRope.sharedMemorySize('[[rooms]]'), ConfigError)
})

test('admission: a ticket, the steady re-admit, the queue', () => {
  const e = new Engine(room({ total: 2 }), { nowMs: T0 })
  const first = e.admit('shop', undefined, T0)
  assert.equal(first.outcome, 'admit')
  assert.equal(first.admitted, true)
  assert.equal(first.ticketError, undefined)
  assert.equal(first.position, undefined)
  const cookie = value(first)
  const steady = e.admit('shop', cookie, T0 + 1)
  assert.deepEqual({ ...steady }, { outcome: 'admit', admitted: true })
  assert.ok(Object.isFrozen(steady), 'the steady answer is shared')
  assert.ok(e.admit('shop', `a=1; ${cookie}; b=2`, T0 + 1).admitted, 'among other cookies')
  assert.ok(e.admit('shop', null, T0).admitted)
  const third = e.admit('shop', undefined, T0 + 2)
  assert.equal(third.outcome, 'queue')
  assert.equal(third.admitted, false)
  assert.equal(third.position, 1)
  assert.equal(third.retryAfterSecs, 20)
  assert.equal(typeof third.estimatedWaitSecs, 'number')
  assert.equal(typeof third.queueLength, 'number', 'as of the last tick')
  assert.match(third.setCookie, /^__vr_shop=/)
  assert.ok(e.admitTicket('shop', cookie.split('=')[1], T0 + 3).admitted)
  assert.ok(!e.admitTicket('shop', null, T0 + 3).admitted, 'no ticket: a new visitor, queued')
})

test('a tampered or foreign ticket is a new visitor, and says why', () => {
  const e = new Engine(room({ total: 3 }), { nowMs: T0 })
  const cookie = value(e.admit('shop', undefined, T0))
  const i = cookie.length - 10
  const forged = cookie.slice(0, i) + (cookie[i] === 'A' ? 'B' : 'A') + cookie.slice(i + 1)
  const d = e.admit('shop', forged, T0)
  assert.equal(d.ticketError, 'bad_tag')
  assert.notEqual(value(d), forged, 'a fresh ticket of its own')
  assert.equal(e.admit('shop', '__vr_shop=!!!', T0).ticketError, 'bad_encoding')
  e.tick(T0 + 1000)
  const st = e.stats('shop')
  assert.equal(st.ticketRejections.badTag, 1)
  assert.equal(st.ticketRejections.badEncoding, 1)
  assert.equal(st.activeUsers, 3)
})

test('bad arguments are errors, never crashes', () => {
  const e = new Engine(room())
  for (const call of [
    () => e.admit(42),
    () => e.admit('shop', 42),
    () => e.admit('shop', undefined, 'soon'),
    () => e.admit('shop', undefined, -1),
    () => e.admit('shop', undefined, Number.NaN),
    () => e.admit('shop', undefined, 1.5),
    () => e.admit('shop', undefined, 1e300),
    () => e.tick(-1),
    () => e.stats(42),
    () => e.cookieName({}),
    () => e.admitTicket(null, 'x'),
    () => new Engine(room(), { nowMs: -1 }),
    () => e.admit()
  ]) {
    assert.throws(call, (err) => {
      assert.ok(err instanceof InvalidArgumentError, `${call}: ${err}`)
      assert.equal(err.code, 'ERR_VELVET_ROPE_INVALID_ARGUMENT')
      return true
    })
  }
  assert.throws(() => e.admit('café'), (err) => err instanceof UnknownRoomError &&
    err.message.includes('`café`'), 'a name no room has is named as given')
  assert.throws(() => e.admit('\u0173hop'), UnknownRoomError, 'no character stands for its low byte')
  const long = 'x'.repeat(100_000)
  assert.throws(() => e.admit(long), UnknownRoomError, 'long strings are read whole')
  assert.equal(e.admit('shop', `__vr_shop=${long}`).ticketError, 'bad_encoding')
  assert.ok(e.admit('shop', 'é=ü; ☃').admitted, 'non-ASCII cookies are other cookies')
  // Node's parser makes each header byte one character: a ticket among such cookies is read.
  const f = new Engine(room({ total: 1 }))
  const ticket = value(f.admit('shop'))
  const back = f.admit('shop', `é=ü; ${ticket}; \u00ff=1`)
  assert.ok(back.admitted && back.setCookie === undefined, 'the ticket re-admits, unchanged')
})

test('pages and their headers', () => {
  const e = new Engine(room({ total: 1 }), { nowMs: T0 })
  const admitted = e.admit('shop', undefined, T0)
  assert.equal(e.renderPage('shop', admitted), null)
  const waiting = e.admit('shop', undefined, T0)
  const page = e.renderPage('shop', waiting, 'text/html')
  assert.equal(page.status, 200)
  assert.match(page.contentType, /^text\/html/)
  assert.match(page.body, /id="position"/)
  assert.deepEqual(page.headers.map(([k]) => k), ['Content-Type', 'Cache-Control', 'Refresh', 'Set-Cookie'])
  const json = e.renderPage('shop', waiting, 'application/json')
  assert.equal(json.contentType, 'application/json')
  assert.equal(JSON.parse(json.body).outcome, 'queue')
  const reject = new Engine(room({ total: 1, extra: 'queueing_method = "reject"' }), { nowMs: T0 })
  reject.admit('shop', undefined, T0)
  const d = reject.admit('shop', undefined, T0)
  assert.equal(d.outcome, 'reject')
  assert.equal(d.retryAfterSecs, 20)
  const p = reject.renderPage('shop', d)
  assert.equal(p.status, 429)
  assert.ok(p.headers.some(([k, v]) => k === 'Retry-After' && v === '20'))
  assert.throws(() => e.renderPage('shop', { outcome: 'maybe', admitted: false }), InvalidArgumentError)
})

test('pages in the visitor\'s language', () => {
  const e = new Engine(room({ total: 1, extra: 'accept_language = true' }), { nowMs: T0 })
  e.admit('shop', undefined, T0)
  const waiting = e.admit('shop', undefined, T0)
  const page = e.renderPage('shop', waiting, 'text/html', 'de', T0)
  assert.match(page.body, /lang="de-DE"/)
  assert.match(page.body, /Sie sind in der Warteschlange/)
  assert.match(e.room('shop').renderPage(waiting, null, 'he-IL').body, /lang="he-IL" dir="rtl"/)
  assert.match(e.renderPage('shop', waiting).body, /lang="en-US"/)
  const json = JSON.parse(e.renderPage('shop', waiting, 'application/json', 'fr', T0).body)
  assert.equal(json.language, 'fr-FR')
  assert.equal(json.event_state, 'none')
  assert.equal(json.cfWaitingRoom.inWaitingRoom, true)
  assert.throws(() => new Engine(room({ extra: 'custom_page = "<p>{{#a}}"' })), /line 1, column 4/)
})

test('unknown rooms', () => {
  const e = new Engine(room())
  for (const call of [
    () => e.admit('nope'),
    () => e.admitTicket('nope', 'x'),
    () => e.stats('nope'),
    () => e.cookieName('nope'),
    () => e.renderPage('nope', e.admit('shop'))
  ]) {
    assert.throws(call, (err) => {
      assert.ok(err instanceof UnknownRoomError)
      assert.equal(err.code, 'ERR_VELVET_ROPE_UNKNOWN_ROOM')
      assert.match(err.message, /no room named `nope`/)
      return true
    })
  }
  assert.throws(() => velvetRope.express(e, { room: 'nope' }), UnknownRoomError)
  assert.throws(() => velvetRope.express(e, { rooms: { '/a': 'nope' } }), UnknownRoomError)
  assert.throws(() => velvetRope.express(e, {}), TypeError)
})

test('a room handle decides as the engine does, and follows reloads', () => {
  const e = new Engine(room({ total: 2 }) + room({ name: 'vip', total: 1 }), { nowMs: T0 })
  const shop = e.room('shop')
  assert.ok(shop instanceof velvetRope.Room)
  assert.equal(e.room('shop'), shop, 'one Room per name')
  assert.equal(shop.name, 'shop')
  assert.equal(shop.engine, e)
  const first = shop.admit(undefined, T0)
  assert.equal(first.outcome, 'admit')
  const cookie = value(first)
  assert.ok(e.admit('shop', cookie, T0 + 1).admitted, "the engine re-admits the room's ticket")
  assert.deepEqual({ ...shop.admit(cookie, T0 + 1) }, { outcome: 'admit', admitted: true })
  assert.ok(shop.admit(`a=1; ${cookie}`, T0 + 1).admitted)
  assert.ok(e.admit('shop', undefined, T0).admitted, 'the second of two slots')
  const waiting = shop.admit(undefined, T0 + 2)
  assert.equal(waiting.outcome, 'queue', 'the room counts what the engine admitted')
  assert.equal(shop.renderPage(waiting, 'application/json').contentType, 'application/json')
  assert.equal(shop.renderPage(first), null)
  const vip = e.room('vip')
  const other = vip.admit(cookie, T0 + 3)
  assert.ok(other.admitted && other.ticketError === undefined, "another room's ticket is only a cookie")
  assert.match(other.setCookie, /^__vr_vip=/, 'a new visitor of this room')
  assert.equal(vip.admit(undefined, T0 + 3).outcome, 'queue')
  for (const call of [
    () => shop.admit(42),
    () => shop.admit(undefined, 'soon'),
    () => shop.admit(undefined, -1),
    () => e.room(42)
  ]) {
    assert.throws(call, (err) => {
      assert.ok(err instanceof InvalidArgumentError, `${call}: ${err}`)
      assert.equal(err.code, 'ERR_VELVET_ROPE_INVALID_ARGUMENT')
      return true
    })
  }
  assert.throws(() => e.room('nope'), (err) => err instanceof UnknownRoomError &&
    err.code === 'ERR_VELVET_ROPE_UNKNOWN_ROOM' && /no room named `nope`/.test(err.message))
  // A reload that drops the room makes its calls fail; one that brings it back, work again.
  e.reload(room({ name: 'vip', total: 1 }))
  assert.throws(() => shop.admit(cookie, T0 + 4), UnknownRoomError)
  assert.equal(vip.admit(undefined, T0 + 4).outcome, 'queue', 'the kept room keeps its count')
  e.reload(room({ total: 2 }) + room({ name: 'vip', total: 1 }))
  assert.equal(shop.admit(undefined, T0 + 5).outcome, 'admit', 'a new room: new counters')
})

test('a collected room releases its engine (the state file is unmapped)', () => {
  const file = path.join(tmpdir(), 'state')
  // In a process of its own, which can force collections.
  const script = `
    const fs = require('node:fs')
    const { Engine } = require(${JSON.stringify(path.resolve(__dirname, '..'))})
    const mapped = () => fs.readFileSync('/proc/self/maps', 'utf8').includes(${JSON.stringify(file)})
    ;(() => {
      const room = new Engine(${JSON.stringify(room())}, { sharedMemory: ${JSON.stringify(file)} }).room('shop')
      if (!room.admit(undefined).admitted || !mapped()) process.exit(3)
    })()
    ;(async () => {
      for (let i = 0; i < 50 && mapped(); i++) {
        globalThis.gc()
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      process.exit(mapped() ? 4 : 0)
    })()`
  const run = require('node:child_process').spawnSync(process.execPath, ['--expose-gc', '-e', script],
    { encoding: 'utf8' })
  assert.equal(run.status, 0, `exit ${run.status} (3: not mapped while used; 4: still mapped) ${run.stderr}`)
})

test('stats, tick and reload', () => {
  const e = new Engine(room({ total: 3 }), { nowMs: T0 })
  e.admit('shop', undefined, T0)
  e.admit('shop', undefined, T0)
  e.tick(T0 + 1000)
  const st = e.stats('shop')
  assert.equal(st.activeUsers, 2)
  assert.equal(st.admittedTotal, 2)
  assert.ok(st.memoryBytes > 0)
  assert.equal(typeof st.admissionRate, 'number')
  assert.equal(e.statsByRoom.shop.active_users, 2)
  assert.match(e.statsJson(), /"shop"/)
  assert.equal(e.cookieName('shop'), '__vr_shop')
  assert.throws(() => e.reload(room({ total: 0 })), ConfigError)
  e.reload(room({ total: 5 }))
  e.tick(T0 + 2000)
  assert.equal(e.stats('shop').activeUsers, 2, 'counts kept across a reload')
  assert.throws(() => e.reload(room({ total: 5, extra: 'refresh_interval = 7' })), { name: 'ConfigError', message: /refresh_interval/ })
  assert.equal(e.startTicking(5), e)
  e.startTicking(5)
  e.stopTicking()
  e.stopTicking()
})

test('a state file is shared by engines and kept across restarts', () => {
  const file = path.join(tmpdir(), 'rooms.state')
  const a = new Engine(room({ total: 3 }), { sharedMemory: file, nowMs: T0 })
  const b = new Engine(room({ total: 3 }), { sharedMemory: file, nowMs: T0 })
  const admitted = [a, b, a, b, a].filter((x) => x.admit('shop', undefined, T0).admitted).length
  assert.equal(admitted, 3)
  const c = new Engine(room({ total: 3 }), { sharedMemory: file, nowMs: T0 + 1000 })
  assert.equal(c.stats('shop').activeUsers, 3, 'a restart sees the counts')
  assert.ok(!c.admit('shop', undefined, T0 + 1000).admitted)
  assert.throws(() => new Engine(room(), { sharedMemory: '/nonexistent/dir/rooms.state' }), (err) => {
    assert.ok(err instanceof SharedMemoryError)
    assert.equal(err.code, 'ERR_VELVET_ROPE_SHARED_MEMORY')
    return true
  })
})

test('worker threads over one state file admit exactly the limit while ticking', async () => {
  const file = path.join(tmpdir(), 'rooms.state')
  const config = room({ total: 37 })
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { Engine } = require(workerData.pkg)
    const e = new Engine(workerData.config, { sharedMemory: workerData.file }).startTicking(1)
    const view = new Int32Array(workerData.go)
    Atomics.wait(view, 0, 0)
    let admitted = 0
    for (let i = 0; i < 50; i++) {
      if (e.admit('shop').admitted) admitted++
      e.tick()
    }
    parentPort.postMessage(admitted)`
  const go = new SharedArrayBuffer(4)
  const pkg = path.join(__dirname, '..')
  const workers = Array.from({ length: 4 }, () => new Worker(source, { eval: true, workerData: { pkg, config, file, go } }))
  const counts = workers.map((w) => new Promise((resolve, reject) => {
    w.once('message', resolve)
    w.once('error', reject)
  }))
  await new Promise((resolve) => setTimeout(resolve, 200))
  const view = new Int32Array(go)
  Atomics.store(view, 0, 1)
  Atomics.notify(view, 0)
  const admitted = (await Promise.all(counts)).reduce((a, b) => a + b, 0)
  assert.equal(admitted, 37)
})

test('handles of ended worker threads are freed (more come and go than the table holds)', () => {
  // In a process of its own, so that a leak cannot starve the other tests.
  const run = require('node:child_process').spawnSync(process.execPath,
    [path.join(__dirname, 'apps', 'worker_handles.js')], { encoding: 'utf8' })
  assert.equal(run.status, 0, `exit ${run.status}: ${run.stderr}`)
  assert.equal(run.stdout.trim(), 'ok')
})

test('lease times past 2106 (microseconds for milliseconds) are refused', () => {
  const config = '[[resources]]\nidentifier_glob = "db-*"\ncapacity = 100\n' +
    'algorithm = { kind = "fair_share", lease_length = 60, refresh_interval = 5, learning_mode_duration = 0 }\n'
  const micros = Date.now() * 1000
  assert.throws(() => new Coordinator(config, { nowMs: micros }), InvalidArgumentError)
  const c = new Coordinator(config, { nowMs: T0 })
  for (const nowMs of [micros, velvetRope.nowMs() * 1000, 2 ** 53]) {
    assert.throws(() => c.request('a', 'db-1', 80, { nowMs }), (err) => {
      assert.ok(err instanceof InvalidArgumentError, String(err))
      assert.equal(err.code, 'ERR_VELVET_ROPE_INVALID_ARGUMENT')
      return true
    }, String(nowMs))
  }
  assert.equal(c.request('a', 'db-1', 80, { nowMs: T0 }).capacity, 80, 'nothing was granted to the refused calls')
  assert.equal(c.request('b', 'db-1', 80, { nowMs: T0 }).capacity, 20)
})

test('coordinator and leases', () => {
  const c = new Coordinator(
    '[[resources]]\nidentifier_glob = "db-*"\ncapacity = 100\n' +
    'algorithm = { kind = "fair_share", lease_length = 60, refresh_interval = 5, learning_mode_duration = 0 }\n',
    { nowMs: T0 })
  const a = c.request('a', 'db-1', 80, { nowMs: T0 })
  const b = c.request('b', 'db-1', 80, { nowMs: T0 })
  assert.equal(a.capacity, 80)
  assert.ok(b.capacity >= 0 && b.capacity <= 20)
  assert.ok(a.expiresAtMs > T0)
  assert.equal(a.refreshIntervalSecs, 5)
  assert.equal(c.release('a', 'db-1'), true)
  assert.equal(c.release('a', 'db-1'), false)
  assert.throws(() => c.request('a', 'cache-1', 1), (err) => {
    assert.ok(err instanceof UnknownResourceError && err instanceof LeaseError)
    assert.equal(err.code, 'ERR_VELVET_ROPE_UNKNOWN_RESOURCE')
    return true
  })
  assert.throws(() => c.request('a', 'db-1', -1), InvalidArgumentError)
  assert.throws(() => c.request('a', 'db-1', 1, { priority: -1 }), InvalidArgumentError)
  assert.throws(() => new Coordinator('[[resources]]\nidentifier_glob = "x"\ncapacity = -1\n'), ConfigError)
  assert.ok(RateLimiter.fromLease(b) instanceof RateLimiter)
  assert.equal(Gauge.fromLease(a).capacity, 80)
})

test('rate limiter: tryAcquire, acquire, setRate, errors', async () => {
  const rl = new RateLimiter(10)
  assert.equal(rl.rate, 10)
  let got = 0
  for (let i = 0; i < 100; i++) if (rl.tryAcquire()) got++
  assert.ok(got >= 1 && got <= 10, `${got} permits at once`)
  await assert.rejects(rl.acquire(1000), (err) => {
    assert.ok(err instanceof CapacityError)
    assert.equal(err.code, 'ERR_VELVET_ROPE_CAPACITY')
    return true
  })
  assert.throws(() => rl.tryAcquire(1000), CapacityError)
  assert.throws(() => rl.tryAcquire(-1), InvalidArgumentError)
  assert.throws(() => rl.tryAcquire('1'), InvalidArgumentError)
  await assert.rejects(rl.acquire(1.5), InvalidArgumentError)
  assert.throws(() => new RateLimiter(-1), InvalidArgumentError)
  rl.setRate(0)
  assert.equal(rl.tryAcquire(), false)
  assert.throws(() => rl.setRate(Number.NaN), InvalidArgumentError)
})

test('rate limiter: acquire spreads permits without blocking the event loop', async () => {
  const rl = new RateLimiter(20) // one permit each 50 ms
  while (rl.tryAcquire());
  let ticks = 0
  const timer = setInterval(() => ticks++, 5)
  const start = performance.now()
  for (let i = 0; i < 4; i++) await rl.acquire()
  const elapsed = performance.now() - start
  clearInterval(timer)
  assert.ok(elapsed >= 150, `the permits were not spread out: ${elapsed.toFixed(0)} ms`)
  assert.ok(ticks >= 10, `the loop stalled: ${ticks} timer ticks in ${elapsed.toFixed(0)} ms`)
})

test('gauge: tryAcquire, acquire with a permit, withPermit, errors', async () => {
  const g = new Gauge(2)
  assert.ok(g.tryAcquire(2))
  assert.ok(!g.tryAcquire())
  assert.equal(g.inUse, 2)
  g.release(2)
  {
    const permit = await g.acquire()
    assert.equal(g.inUse, 1)
    permit[Symbol.dispose || Symbol.for('nodejs.dispose')]()
    permit.release()
    assert.equal(g.inUse, 0, 'released once')
  }
  const held = await g.acquire(2)
  const waiter = g.acquire(1)
  let done = false
  waiter.then(() => { done = true })
  await new Promise((resolve) => setTimeout(resolve, 20))
  assert.ok(!done, 'waits while the gauge is full')
  held.release()
  ;(await waiter).release()
  assert.equal(await g.withPermit(async () => g.inUse, 2), 2)
  assert.equal(g.inUse, 0)
  await assert.rejects(g.withPermit(() => { throw new Error('boom') }), /boom/)
  assert.equal(g.inUse, 0, 'given back however it ends')
  assert.throws(() => g.release(), CapacityError)
  assert.throws(() => g.tryAcquire(3), CapacityError)
  await assert.rejects(g.acquire(3), CapacityError)
  assert.throws(() => new Gauge(-1), InvalidArgumentError)
  g.setCapacity(5)
  assert.equal(g.capacity, 5)
})

test('native floor and clock', () => {
  velvetRope.noop()
  assert.ok(Math.abs(velvetRope.nowMs() - Date.now()) < 5_000)
  assert.equal(require('../package.json').version, '0.3.0')
})
