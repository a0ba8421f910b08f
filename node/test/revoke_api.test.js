'use strict'
/**
 * Origin commands in process: `engine.revoke`, `revokeRequest` and `clearCookie`, and what the
 * Express and Fastify middleware do when a revocation is refused or fails (reported; the
 * response goes out all the same). The servers' side is test/revoke.test.js.
 */

const assert = require('node:assert/strict')
const { test } = require('node:test')
const Fastify = require('fastify')

const velvetRope = require('..')
const { Engine, UnknownRoomError, fastify: plugin } = velvetRope
const { get } = require('./helpers.js')

const T0 = 1_800_000_000_000 // on a minute boundary

function config (extra = '') {
  return '[[rooms]]\nname = "r"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n' +
    `enabled_origin_commands = ["revoke"]\n${extra}\n[rooms.cookie]\nsecure = false\n` +
    '[[rooms]]\nname = "hdr"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n' +
    'enabled_origin_commands = ["revoke"]\nticket_header = true\n' +
    '[[rooms]]\nname = "off"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n'
}

function ticket (engine, room, now = T0 + 1) {
  const d = engine.admit(room, undefined, now)
  assert.ok(d.admitted && d.ticket)
  return d.ticket
}

test('revoke ends a session once; the ticket is refused from then on', () => {
  const e = new Engine(config(), { nowMs: T0 })
  const t = ticket(e, 'r')
  assert.equal(e.revoke('r', t, T0 + 2), 'revoked')
  assert.equal(e.revoke('r', t, T0 + 3), 'already_revoked')
  const d = e.admit('r', `__vr_r=${t}`, T0 + 4)
  assert.equal(d.ticketError, 'revoked')
  assert.notEqual(d.ticket, t)
  assert.equal(e.stats('r').ticketRejections.revoked, 1)
  assert.equal(e.revoke('r', 'not-a-ticket', T0 + 5), 'no_session')
  assert.equal(e.revoke('off', ticket(e, 'off'), T0 + 5), 'not_enabled')
  assert.throws(() => e.revoke('nope', t), UnknownRoomError)
})

test('revokeRequest takes the issued ticket, then the cookie, then the header', () => {
  const e = new Engine(config(), { nowMs: T0 })
  const issued = ticket(e, 'r')
  const carried = ticket(e, 'r')
  assert.equal(e.revokeRequest('r', { cookie: `a=1; __vr_r=${carried}`, issued, nowMs: T0 + 2 }), 'revoked')
  assert.equal(e.revoke('r', issued, T0 + 3), 'already_revoked')
  assert.equal(e.revokeRequest('r', { cookie: `a=1; __vr_r=${carried}`, nowMs: T0 + 3 }), 'revoked')
  // A room without header tickets ignores the header; one with them reads it.
  assert.equal(e.revokeRequest('r', { ticketHeader: ticket(e, 'r'), nowMs: T0 + 4 }), 'no_session')
  assert.equal(e.revokeRequest('hdr', { ticketHeader: ` ${ticket(e, 'hdr')} `, nowMs: T0 + 4 }), 'revoked')
  assert.equal(e.revokeRequest('r', { issued: '', cookie: null, nowMs: T0 + 4 }), 'no_session')
  assert.equal(e.revokeRequest('r'), 'no_session')
  assert.throws(() => e.revokeRequest('nope', {}), UnknownRoomError)
})

test('past max_revocations a revocation is refused', () => {
  const e = new Engine(config('max_revocations = 2'), { nowMs: T0 })
  const tickets = [ticket(e, 'r'), ticket(e, 'r'), ticket(e, 'r')]
  assert.deepEqual(tickets.map((t) => e.revoke('r', t, T0 + 2)), ['revoked', 'revoked', 'refused_full'])
  assert.equal(e.admit('r', `__vr_r=${tickets[2]}`, T0 + 3).ticketError, undefined)
})

test('clearCookie and the command header', () => {
  const e = new Engine(config())
  assert.match(e.clearCookie('r'), /^__vr_r=; Max-Age=0/)
  assert.match(e.clearCookie('r'), /Path=\//)
  assert.throws(() => e.clearCookie('nope'), UnknownRoomError)
  assert.equal(velvetRope.COMMAND_HEADER, 'Velvet-Rope-Command')
  for (const yes of ['revoke', ' Revoke ', 'REVOKE', 'x, revoke', ['x', 'revoke']]) {
    assert.ok(velvetRope.isRevokeCommand(yes), String(yes))
  }
  for (const no of ['', 'revoked', 're voke', 'x', undefined, null, []]) {
    assert.ok(!velvetRope.isRevokeCommand(no), String(no))
  }
})

test('express: a refused or failing revocation is reported, and the response goes out', async () => {
  const express = require('express')
  const engine = new Engine(config('max_revocations = 1'))
  const gone = config().replace('name = "r"', 'name = "gone"')
  const app = express()
  app.use(velvetRope.express(engine, { room: 'r' }))
  app.get('/logout', (req, res) => res.set('Velvet-Rope-Command', 'revoke').send('origin'))
  app.get('/reload', (req, res) => {
    engine.reload(gone) // the room is gone by the time the response goes out
    res.set('Velvet-Rope-Command', 'revoke').send('origin')
  })
  const warnings = []
  const onWarning = (w) => warnings.push(w)
  process.on('warning', onWarning)
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  try {
    const port = server.address().port
    // A new visitor whose first request is revoked: only the clearing cookie goes out.
    let r = await get(port, '/logout')
    assert.equal(r.status, 200)
    assert.equal(r.body, 'origin')
    assert.equal(r.header('velvet-rope-command'), null)
    assert.deepEqual(r.setCookies, [engine.clearCookie('r')])
    // The room keeps one revocation: the next is refused, reported, the ticket kept.
    const held = ticket(engine, 'r', velvetRope.nowMs())
    r = await get(port, '/logout', undefined, { cookie: `__vr_r=${held}` })
    assert.equal(r.status, 200)
    assert.equal(r.header('velvet-rope-command'), null)
    assert.deepEqual(r.setCookies, [])
    await new Promise((resolve) => setImmediate(resolve))
    assert.ok(warnings.some((w) => w.code === 'VELVET_ROPE_REVOKE_REFUSED' && /refused_full/.test(w.message)),
      warnings.map(String).join('\n'))
    r = await get(port, '/reload')
    assert.equal(r.status, 200)
    assert.equal(r.body, 'origin')
    assert.equal(r.header('velvet-rope-command'), null)
    await new Promise((resolve) => setImmediate(resolve))
    assert.ok(warnings.some((w) => w.code === 'VELVET_ROPE_REVOKE_FAILED'), warnings.map(String).join('\n'))
  } finally {
    process.off('warning', onWarning)
    server.close()
    engine.stopTicking()
  }
})

test('fastify: a refused or failing revocation is logged, and the reply goes out', async () => {
  const lines = []
  const stream = { write: (line) => lines.push(JSON.parse(line)) }
  const engine = new Engine(config('max_revocations = 1'))
  const gone = config().replace('name = "r"', 'name = "gone"')
  const app = Fastify({ logger: { level: 'warn', stream } })
  await app.register(plugin, { engine, room: 'r' })
  app.get('/logout', async (req, reply) => reply.header('Velvet-Rope-Command', 'Revoke').send('origin'))
  app.get('/reload', async (req, reply) => {
    engine.reload(gone)
    return reply.header('velvet-rope-command', 'revoke').send('origin')
  })
  let r = await app.inject('/logout')
  assert.equal(r.statusCode, 200)
  assert.equal(r.body, 'origin')
  assert.equal(r.headers['velvet-rope-command'], undefined)
  assert.equal(r.headers['set-cookie'], engine.clearCookie('r'))
  const held = ticket(engine, 'r', velvetRope.nowMs())
  r = await app.inject({ url: '/logout', headers: { cookie: `__vr_r=${held}` } })
  assert.equal(r.statusCode, 200)
  assert.equal(r.headers['velvet-rope-command'], undefined)
  assert.equal(r.headers['set-cookie'], undefined)
  assert.ok(lines.some((l) => l.level === 40 && l.code === 'VELVET_ROPE_REVOKE_REFUSED' && /refused_full/.test(l.msg)),
    JSON.stringify(lines))
  r = await app.inject('/reload')
  assert.equal(r.statusCode, 200)
  assert.equal(r.body, 'origin')
  assert.equal(r.headers['velvet-rope-command'], undefined)
  assert.ok(lines.some((l) => l.code === 'VELVET_ROPE_REVOKE_FAILED'), JSON.stringify(lines))
  await app.close()
})

test('acceptsOriginCommands follows a reload', () => {
  // A room's own setting is fixed for its counters' life; a room added or removed is not.
  const plain = '[[rooms]]\nname = "p"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n'
  const engine = new Engine(plain)
  assert.equal(engine.acceptsOriginCommands, false)
  engine.reload(plain + config())
  assert.equal(engine.acceptsOriginCommands, true)
  assert.throws(() => engine.reload('not toml ['))
  assert.equal(engine.acceptsOriginCommands, true, 'a refused reload changes nothing')
  engine.reload(plain)
  assert.equal(engine.acceptsOriginCommands, false)
})

test('express: without a room taking commands, responses pass untouched', async () => {
  const express = require('express')
  const engine = new Engine('[[rooms]]\nname = "plain"\ntotal_active_users = 10\n' +
    'new_users_per_minute = 100000\n[rooms.cookie]\nsecure = false\n')
  assert.equal(engine.acceptsOriginCommands, false)
  assert.equal(new Engine(config()).acceptsOriginCommands, true)
  const app = express()
  app.use(velvetRope.express(engine, { room: 'plain' }))
  app.get('/', (req, res) => res.set('Velvet-Rope-Command', 'revoke').send('origin'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  try {
    const port = server.address().port
    const r = await get(port, '/')
    assert.equal(r.header('velvet-rope-command'), 'revoke', 'the app\'s own header')
    const cookie = r.setCookies[0].split(';')[0]
    const again = await get(port, '/', undefined, { cookie })
    assert.equal(again.header('velvet-rope-command'), 'revoke')
    assert.equal(engine.admit('plain', cookie).ticketError, undefined)
  } finally {
    server.close()
    engine.stopTicking()
  }
})
