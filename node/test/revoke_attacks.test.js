'use strict'
/**
 * Attacks on origin commands in the Express and Fastify middleware, from an adversarial
 * review: each test failed before its fix.
 */

const assert = require('node:assert/strict')
const http = require('node:http')
const { test } = require('node:test')
const Fastify = require('fastify')

const velvetRope = require('..')
const { Engine, fastify: plugin } = velvetRope

const CONFIG = '[[rooms]]\nname = "r"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n' +
  'enabled_origin_commands = ["revoke"]\n[rooms.cookie]\nsecure = false\n' +
  '[[rooms]]\nname = "hdr"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n' +
  'enabled_origin_commands = ["revoke"]\nticket_header = true\n[rooms.cookie]\nsecure = false\n'

/** A raw GET: header lines as given (names may repeat); the 1xx responses, headers, trailers. */
function rawGet (port, target, headers = []) {
  return new Promise((resolve, reject) => {
    const informational = []
    const req = http.request({
      host: '127.0.0.1',
      port,
      path: target,
      method: 'GET',
      headers: [['Host', `127.0.0.1:${port}`], ['Connection', 'close'], ...headers].flat()
    }, (res) => {
      let body = ''
      res.setEncoding('latin1')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve({
        status: res.statusCode,
        headers: res.headers,
        setCookies: [].concat(res.headers['set-cookie'] || []),
        trailers: res.trailers,
        informational,
        body
      }))
    })
    req.on('information', (info) => informational.push(info))
    req.setTimeout(10_000, () => req.destroy(new Error(`GET ${target}: no answer`)))
    req.on('error', reject)
    req.end()
  })
}

async function listen (app) {
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  return server
}

/** A steady admission ticket of `room` (its next request is admitted without a new one). */
function steadyTicket (engine, room) {
  const t = engine.admit(room, undefined).ticket
  assert.ok(t)
  return t
}

// A client that sends its Velvet-Rope-Ticket header twice is admitted on the first line
// (decideRequest reads rawHeaders); the revocation read req.headers, where Node joins the lines
// with ", ": the joined value opened as no ticket, and the visitor kept its seat.

for (const kind of ['express', 'fastify']) {
  test(`${kind}: a header ticket sent twice is still the one revoked`, async () => {
    const engine = new Engine(CONFIG)
    let port
    let close
    if (kind === 'express') {
      const app = require('express')()
      app.use(velvetRope.express(engine, { room: 'hdr' }))
      app.get('/logout', (req, res) => res.set('Velvet-Rope-Command', 'revoke').send('origin'))
      const server = await listen(app)
      port = server.address().port
      close = () => server.close()
    } else {
      const app = Fastify()
      await app.register(plugin, { engine, room: 'hdr' })
      app.get('/logout', async (req, reply) => reply.header('Velvet-Rope-Command', 'revoke').send('origin'))
      await app.listen({ port: 0, host: '127.0.0.1' })
      port = app.server.address().port
      close = () => app.close()
    }
    try {
      const t = steadyTicket(engine, 'hdr')
      const r = await rawGet(port, '/logout', [['Velvet-Rope-Ticket', t], ['Velvet-Rope-Ticket', t]])
      assert.equal(r.status, 200)
      assert.equal(r.body, 'origin', 'admitted on its ticket')
      assert.equal(r.headers['velvet-rope-command'], undefined)
      assert.equal(engine.revoke('hdr', t), 'already_revoked',
        'the ticket the request was admitted with was not revoked')
    } finally {
      close()
      engine.stopTicking()
    }
  })
}
