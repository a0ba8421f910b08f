'use strict'
/**
 * Attacks on origin commands in the Express and Fastify middleware, from an adversarial
 * review (and the holes found next to its findings): ways the `Velvet-Rope-Command` header
 * could reach the client, revocations that missed a room or the ticket the request was
 * admitted with, and cookies left set after a revoke. Each test failed before its fix.
 */

const assert = require('node:assert/strict')
const http = require('node:http')
const http2 = require('node:http2')
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

/** The response's only `Set-Cookie` of `room`'s ticket clears it. */
function clears (r, engine, room) {
  const mine = r.setCookies.filter((c) => c.startsWith(`__vr_${room}=`))
  return mine.length === 1 && mine[0] === engine.clearCookie(room)
}

/**
 * An Express app behind `velvetRope.express(engine, { room })` with one route, `/x`, served
 * by `route`; `fn(port)` runs against it, then the server and the engine stop.
 */
async function withExpress (engine, room, route, fn, setUp = () => {}) {
  const app = require('express')()
  setUp(app)
  app.use(velvetRope.express(engine, { room }))
  app.get('/x', route)
  const server = await listen(app)
  try {
    return await fn(server.address().port)
  } finally {
    server.close()
    engine.stopTicking()
  }
}

/**
 * Runs `route` behind Express for a visitor holding a steady ticket of room `r`, and checks
 * what every revoking response must be: no command, the ticket revoked, and (unless
 * `cleared` is false: the headers were out before the command came) the cookie cleared.
 * Resolves with the response.
 */
async function expressRevokes (route, { cleared = true, setUp } = {}) {
  const engine = new Engine(CONFIG)
  return withExpress(engine, 'r', route, async (port) => {
    const t = steadyTicket(engine, 'r')
    const r = await rawGet(port, '/x', [['Cookie', `__vr_r=${t}`]])
    assert.equal(r.status, 200, r.body)
    assert.equal(r.headers['velvet-rope-command'], undefined, 'the command reached the client')
    assert.equal(r.trailers['velvet-rope-command'], undefined, 'the command reached the client (trailer)')
    for (const info of r.informational) {
      assert.equal(info.headers['velvet-rope-command'], undefined, `in a ${info.statusCode}`)
    }
    assert.equal(engine.revoke('r', t), 'already_revoked', 'not revoked')
    if (cleared) {
      assert.ok(clears(r, engine, 'r'), `the ticket cookie is not cleared: ${JSON.stringify(r.setCookies)}`)
    }
    return r
  }, setUp)
}

// Express: `res.writeHead(status, [name, value, ...])` with the app's own Set-Cookie in the
// array. The clearing cookie was put on the response with setHeader, and Node then applied
// the array's Set-Cookie over it: the response did not clear the revoked ticket.

test('express: writeHead with a flat array carrying Set-Cookie still clears the ticket', async () => {
  const r = await expressRevokes((req, res) => {
    res.writeHead(200, ['Content-Type', 'text/plain', 'Set-Cookie', 'app=; Max-Age=0',
      'Velvet-Rope-Command', 'revoke'])
    res.end('origin')
  })
  assert.ok(r.setCookies.includes('app=; Max-Age=0'), `the app's own cookie is lost: ${r.setCookies}`)
  assert.equal(r.headers['content-type'], 'text/plain')
})

// The forms of writeHead's headers Node reads: an object (any case, any position of the
// headers argument), a flat array, an array of pairs; a Headers object or a Map, which Node
// ignores, must not carry it either. Found next to the review's: `writeHead(200, headers,
// undefined)` (Node takes the second argument when the third is undefined; the wrapper looked
// at the last one only).

for (const [name, write, keeps] of [
  ['an object', (res) => res.writeHead(200, { 'VELVET-rope-Command': 'revoke', 'Set-Cookie': ['a=1', 'b=2'] }), ['a=1', 'b=2']],
  ['an object, then undefined', (res) => res.writeHead(200, { 'velvet-rope-command': 'revoke' }, undefined), []],
  ['a reason and an object', (res) => res.writeHead(200, 'Fine', { 'velvet-rope-command': ['x', 'revoke'] }), []],
  ['an array of pairs', (res) => res.writeHead(200, [['Velvet-Rope-Command', 'revoke'], ['Set-Cookie', 'a=1']]), ['a=1']]
]) {
  test(`express: writeHead with ${name} loses the command and revokes`, async () => {
    const r = await expressRevokes((req, res) => {
      write(res)
      res.end('origin')
    }, { setUp: (app) => app.disable('x-powered-by') }) // Node reads pairs only on a bare response
    for (const cookie of keeps) assert.ok(r.setCookies.includes(cookie), `${cookie} lost: ${r.setCookies}`)
  })
}

test('express: a Headers object or a Map given to writeHead carries no command', async () => {
  for (const given of [new Headers({ 'velvet-rope-command': 'revoke' }),
    new Map([['velvet-rope-command', 'revoke']])]) {
    const engine = new Engine(CONFIG)
    await withExpress(engine, 'r', (req, res) => {
      res.writeHead(200, given)
      res.end('origin')
    }, async (port) => {
      const t = steadyTicket(engine, 'r')
      const r = await rawGet(port, '/x', [['Cookie', `__vr_r=${t}`]])
      assert.equal(r.status, 200)
      assert.equal(r.headers['velvet-rope-command'], undefined, given.constructor.name)
    })
  }
})

// Node's other ways to put a header on the response: setHeaders (a Map or Headers),
// appendHeader, the deprecated writeHeader (the prototype's writeHead under another name: it
// went around the wrapper), flushHeaders.

for (const [name, write] of [
  ['res.setHeaders(Map)', (res) => res.setHeaders(new Map([['Velvet-Rope-Command', 'revoke']])).end('origin')],
  ['res.setHeaders(Headers)', (res) => res.setHeaders(new Headers({ 'Velvet-Rope-Command': 'revoke' })).end('origin')],
  ['res.appendHeader', (res) => res.appendHeader('velvet-rope-command', 'x').appendHeader('Velvet-Rope-Command', 'revoke').end('origin')],
  ['res.writeHeader', (res) => res.writeHeader(200, { 'Velvet-Rope-Command': 'revoke' }).end('origin')],
  ['res.flushHeaders', (res) => {
    res.setHeader('Velvet-Rope-Command', 'revoke')
    res.flushHeaders()
    res.end('origin')
  }]
]) {
  test(`express: ${name} loses the command and revokes`, async () => {
    await expressRevokes((req, res) => write(res))
  })
}

// A writeHead that throws (a bad header) left the response unwatched: the wrapper put the
// original back before calling it, and the app's second writeHead went out with the command.

test('express: a writeHead that throws leaves the response watched', async () => {
  await expressRevokes((req, res) => {
    try {
      res.writeHead(200, { 'bad name': 'x', 'velvet-rope-command': 'revoke' })
    } catch {}
    res.writeHead(200, { 'velvet-rope-command': 'revoke' })
    res.end('origin')
  })
})

// Express: the header in an early-hints 103 (res.writeEarlyHints) was never looked at and
// reached the client. It is the origin's command like any other: followed, and the final
// response clears the cookie.

test('express: Velvet-Rope-Command in a 103 Early Hints never reaches the client', async () => {
  const r = await expressRevokes((req, res) => {
    res.writeEarlyHints({ link: '</a.css>; rel=preload', 'velvet-rope-command': 'revoke' })
    res.send('origin')
  })
  assert.equal(r.informational.length, 1, 'no 103')
  assert.equal(r.informational[0].statusCode, 103)
  assert.equal(r.informational[0].headers.link, '</a.css>; rel=preload')
})

// Express: the header as a trailer (res.addTrailers on a chunked response) reached the client.
// A trailer comes after the headers: the session is revoked, the cookie cannot be cleared any
// more (it was when the trailer was given before the headers went out).

for (const [name, trailers] of [
  ['an object', { 'Velvet-Rope-Command': 'revoke', 'X-Sum': '1' }],
  ['pairs', [['x-sum', '1'], ['velvet-rope-command', 'revoke']]]
]) {
  test(`express: Velvet-Rope-Command as a trailer (${name}) never reaches the client, and revokes`, async () => {
    const r = await expressRevokes((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/plain', Trailer: 'Velvet-Rope-Command, X-Sum' })
      res.write('origin')
      res.addTrailers(trailers)
      res.end()
    }, { cleared: false })
    assert.equal(r.trailers['x-sum'], '1', 'the app\'s own trailer is lost')
    assert.equal(r.body, 'origin')
  })
}

test('express: a trailer command given before the headers go out also clears the cookie', async () => {
  await expressRevokes((req, res) => {
    res.addTrailers({ 'Velvet-Rope-Command': 'revoke' })
    res.writeHead(200, { 'Content-Type': 'text/plain', Trailer: 'Velvet-Rope-Command' })
    res.end('origin')
  })
})

// Express: a request decided by two rooms that both accept commands (a site-wide middleware
// and a route's own): each wrapped writeHead, the one called first removed the command and
// revoked in its room only, and the other then found nothing: the visitor kept its session in
// the other room. Whatever the order of the middleware, and whether the rooms share an engine.

for (const order of [['r', 'r2'], ['r2', 'r']]) {
  for (const engines of ['one engine', 'two engines']) {
    test(`express: two rooms deciding one request are both revoked (${order.join(' then ')}, ${engines})`, async () => {
      const two = CONFIG.replace('name = "r"', 'name = "r2"').split('[[rooms]]\nname = "hdr"')[0]
      const shared = new Engine(CONFIG + two)
      const byRoom = engines === 'one engine'
        ? { r: shared, r2: shared }
        : { r: new Engine(CONFIG), r2: new Engine(two) }
      const app = require('express')()
      app.use(velvetRope.express(byRoom[order[0]], { room: order[0] }))
      app.get('/logout', velvetRope.express(byRoom[order[1]], { room: order[1] }),
        (req, res) => res.set('Velvet-Rope-Command', 'revoke').send('origin'))
      const server = await listen(app)
      try {
        const t1 = steadyTicket(byRoom.r, 'r')
        const t2 = steadyTicket(byRoom.r2, 'r2')
        const r = await rawGet(server.address().port, '/logout', [['Cookie', `__vr_r=${t1}; __vr_r2=${t2}`]])
        assert.equal(r.status, 200)
        assert.equal(r.body, 'origin')
        assert.equal(r.headers['velvet-rope-command'], undefined)
        assert.deepEqual([byRoom.r.revoke('r', t1), byRoom.r2.revoke('r2', t2)], ['already_revoked', 'already_revoked'],
          `not revoked in both rooms; Set-Cookie: ${JSON.stringify(r.setCookies)}`)
        assert.ok(clears(r, byRoom.r, 'r') && clears(r, byRoom.r2, 'r2'), JSON.stringify(r.setCookies))
      } finally {
        server.close()
        for (const e of new Set(Object.values(byRoom))) e.stopTicking()
      }
    })
  }
}

test('express: two header-ticket rooms lose both their new tickets on a revoke', async () => {
  const two = CONFIG.split('[[rooms]]\nname = "hdr"')[1].replace(/^/, '[[rooms]]\nname = "hdr2"')
  const engine = new Engine(CONFIG + two)
  const app = require('express')()
  app.use(velvetRope.express(engine, { room: 'hdr' }))
  app.get('/logout', velvetRope.express(engine, { room: 'hdr2' }),
    (req, res) => res.set('Velvet-Rope-Command', 'revoke').send('origin'))
  const server = await listen(app)
  try {
    const r = await rawGet(server.address().port, '/logout') // a new visitor: two new tickets
    assert.equal(r.status, 200)
    assert.equal(r.headers['velvet-rope-command'], undefined)
    assert.equal(r.headers['velvet-rope-ticket'], undefined, 'a revoked ticket was handed out')
    assert.ok(clears(r, engine, 'hdr') && clears(r, engine, 'hdr2'), JSON.stringify(r.setCookies))
  } finally {
    server.close()
    engine.stopTicking()
  }
})

/**
 * A Fastify app behind the plugin (room `r`), `routes(app)` declaring its routes after it
 * (`awaited`: each route gets a hook of its own) or before it loads (not `awaited`: one
 * application-wide hook); `fn(app)` runs against it, listening on 127.0.0.1 when `listen`.
 */
async function withFastify (routes, fn, { listen = false, options = {}, engine = new Engine(CONFIG), awaited = true } = {}) {
  const app = Fastify(options)
  const loading = app.register(plugin, { engine, room: 'r' })
  if (awaited) await loading
  routes(app, engine)
  await app.ready()
  if (listen) await app.listen({ port: 0, host: '127.0.0.1' })
  try {
    return await fn(app, engine)
  } finally {
    await app.close()
  }
}

// Fastify: a route that writes its response on the raw one (reply.hijack(), then
// reply.raw.writeHead): the onSend hook never ran, the header reached the client and the
// session went on. A reply no room decided is hijacked the same way, and loses the header.

for (const awaited of [true, false]) {
  test(`fastify: reply.raw.writeHead after hijack loses the command and revokes (plugin ${awaited ? '' : 'not '}awaited)`, async () => {
    await withFastify((app) => {
      const raw = (req, reply) => {
        reply.hijack()
        reply.raw.writeHead(200, { 'content-type': 'text/plain', 'velvet-rope-command': 'revoke' })
        reply.raw.end('origin')
      }
      app.get('/logout', raw)
      app.get('/free', { config: { velvetRope: false } }, raw)
    }, async (app, engine) => {
      const t = steadyTicket(engine, 'r')
      let r = await rawGet(app.server.address().port, '/logout', [['Cookie', `__vr_r=${t}`]])
      assert.equal(r.status, 200)
      assert.equal(r.body, 'origin')
      assert.equal(r.headers['velvet-rope-command'], undefined, 'the command reached the client')
      assert.equal(engine.revoke('r', t), 'already_revoked', 'not revoked')
      assert.ok(clears(r, engine, 'r'), JSON.stringify(r.setCookies))
      r = await rawGet(app.server.address().port, '/free')
      assert.equal(r.headers['velvet-rope-command'], undefined, 'the command reached the client (no room)')
    }, { listen: true, awaited })
  })
}

// Fastify: the plugin's onSend hook ran in registration order; an application onSend hook
// registered after the plugin (or a route's own onSend) that set the header was never looked
// at: the header reached the client and the session went on.

for (const awaited of [true, false]) {
  test(`fastify: a command set by a later onSend hook is still removed and followed (plugin ${awaited ? '' : 'not '}awaited)`, async () => {
    await withFastify((app) => {
      app.addHook('onSend', async (request, reply, payload) => {
        if (request.url === '/logout') reply.header('Velvet-Rope-Command', 'revoke')
        return payload
      })
      app.get('/logout', async () => 'origin')
      app.get('/own', {
        onSend: (request, reply, payload, done) => {
          reply.header('velvet-rope-command', 'Revoke')
          done(null, payload)
        }
      }, async () => 'origin')
    }, async (app, engine) => {
      for (const url of ['/logout', '/own']) {
        const t = steadyTicket(engine, 'r')
        const r = await app.inject({ url, headers: { cookie: `__vr_r=${t}` } })
        assert.equal(r.statusCode, 200)
        assert.equal(r.headers['velvet-rope-command'], undefined, `${url}: the command reached the client`)
        assert.equal(engine.revoke('r', t), 'already_revoked', `${url}: not revoked`)
        assert.equal(r.headers['set-cookie'], engine.clearCookie('r'), url)
      }
    }, { awaited })
  })
}

// Replies no hook of the plugin saw on the way in: a 404 (each route having a hook of its
// own, none runs for it) and a reply an earlier onRequest hook sent. Their onSend still
// watches them.

for (const awaited of [true, false]) {
  test(`fastify: a 404 or a reply sent before the plugin's hook loses the command (plugin ${awaited ? '' : 'not '}awaited)`, async () => {
    const app = Fastify()
    app.addHook('onRequest', (request, reply, next) => {
      if (request.url !== '/early') return next()
      reply.header('Velvet-Rope-Command', 'revoke').send('early')
    })
    app.setNotFoundHandler((request, reply) => reply.code(404).header('Velvet-Rope-Command', 'revoke').send('none'))
    const engine = new Engine(CONFIG)
    const loading = app.register(plugin, { engine, room: 'r' })
    if (awaited) await loading
    app.get('/early', async () => 'origin')
    try {
      for (const [url, status] of [['/early', 200], ['/nope', 404]]) {
        const r = await app.inject(url)
        assert.equal(r.statusCode, status, url)
        assert.equal(r.headers['velvet-rope-command'], undefined, `${url}: the command reached the client`)
      }
    } finally {
      await app.close()
    }
  })
}

// Fastify's other ways out: reply.trailer (Fastify's trailers go through res.addTrailers) and
// reply.writeEarlyHints.

test('fastify: a trailer or a 103 never carries the command', async () => {
  await withFastify((app) => {
    app.get('/trailer', (req, reply) => {
      reply.trailer('velvet-rope-command', async () => 'revoke')
      reply.send('origin')
    })
    app.get('/hints', async (req, reply) => {
      reply.writeEarlyHints({ link: '</a.css>; rel=preload', 'Velvet-Rope-Command': 'revoke' })
      return 'origin'
    })
  }, async (app, engine) => {
    const port = app.server.address().port
    let t = steadyTicket(engine, 'r')
    let r = await rawGet(port, '/trailer', [['Cookie', `__vr_r=${t}`]])
    assert.equal(r.body, 'origin')
    assert.equal(r.trailers['velvet-rope-command'], undefined, JSON.stringify(r.trailers))
    assert.equal(engine.revoke('r', t), 'already_revoked', 'not revoked (trailer)')
    t = steadyTicket(engine, 'r')
    r = await rawGet(port, '/hints', [['Cookie', `__vr_r=${t}`]])
    assert.equal(r.body, 'origin')
    assert.equal(r.informational.length, 1)
    assert.equal(r.informational[0].headers['velvet-rope-command'], undefined)
    assert.equal(engine.revoke('r', t), 'already_revoked', 'not revoked (103)')
    assert.ok(clears(r, engine, 'r'), JSON.stringify(r.setCookies))
  }, { listen: true })
})

// Fastify, as Express: without a room that accepts commands, the header is the app's own.

test('fastify: without a room taking commands, replies pass untouched', async () => {
  const engine = new Engine('[[rooms]]\nname = "r"\ntotal_active_users = 10\n' +
    'new_users_per_minute = 100000\n[rooms.cookie]\nsecure = false\n')
  await withFastify((app) => {
    app.get('/', (req, reply) => reply.header('Velvet-Rope-Command', 'revoke').send('origin'))
  }, async (app) => {
    const t = steadyTicket(engine, 'r')
    const r = await app.inject({ url: '/', headers: { cookie: `__vr_r=${t}` } })
    assert.equal(r.headers['velvet-rope-command'], 'revoke', 'the app\'s own header')
    assert.equal(engine.admit('r', `__vr_r=${t}`).ticketError, undefined)
  }, { engine })
})

/**
 * A GET over HTTP/2 (cleartext) with `headers`: the status, headers, trailers and body, and
 * those of any pushed response.
 */
function h2Get (port, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const client = http2.connect(`http://127.0.0.1:${port}`)
    const pushed = []
    client.on('error', reject)
    client.on('stream', (stream, pushHeaders) => {
      stream.on('push', (h) => pushed.push({ path: pushHeaders[':path'], headers: h }))
      stream.resume()
    })
    const req = client.request({ ':path': path, ...headers })
    let response
    let trailers = {}
    let body = ''
    req.on('response', (h) => { response = h })
    req.on('trailers', (h) => { trailers = h })
    req.setEncoding('latin1')
    req.on('data', (chunk) => { body += chunk })
    req.on('end', () => {
      // A pushed stream's headers arrive on their own stream: a moment for them.
      setTimeout(() => {
        client.close()
        resolve({
          status: response[':status'],
          headers: response,
          setCookies: [].concat(response['set-cookie'] || []),
          trailers,
          pushed,
          body
        })
      }, 50)
    })
    req.on('error', reject)
    req.end()
  })
}

// Fastify over HTTP/2 (Node's compatibility API): the same wrappers, and its own ways in:
// names with spaces around them (the compatibility API trims them), res.setTrailer, and
// pushed responses (res.createPushResponse).

test('fastify over HTTP/2: the command never reaches the client, and revokes', async () => {
  await withFastify((app) => {
    app.get('/head', (req, reply) => reply.header('Velvet-Rope-Command', 'revoke').send('origin'))
    app.get('/raw', (req, reply) => {
      reply.hijack()
      reply.raw.writeHead(200, { ' velvet-rope-command ': 'revoke' })
      reply.raw.end('origin')
    })
    app.get('/trailer', (req, reply) => {
      reply.hijack()
      reply.raw.setTrailer('Velvet-Rope-Command', 'revoke')
      reply.raw.addTrailers({ 'x-sum': '1', ' Velvet-Rope-Command': 'revoke' })
      reply.raw.end('origin')
    })
    app.get('/push', (req, reply) => {
      reply.raw.createPushResponse({ ':path': '/a.css' }, (err, res) => {
        if (err) throw err
        res.writeHead(200, { 'velvet-rope-command': 'revoke' })
        res.end('a')
        reply.send('origin')
      })
    })
  }, async (app, engine) => {
    const port = app.server.address().port
    for (const url of ['/head', '/raw', '/trailer', '/push']) {
      const t = steadyTicket(engine, 'r')
      const r = await h2Get(port, url, { cookie: `__vr_r=${t}` })
      assert.equal(r.status, 200, url)
      assert.equal(r.body, 'origin', url)
      assert.equal(r.headers['velvet-rope-command'], undefined, `${url}: the command reached the client`)
      assert.equal(r.trailers['velvet-rope-command'], undefined, `${url}: in the trailers`)
      for (const p of r.pushed) assert.equal(p.headers['velvet-rope-command'], undefined, `${url}: pushed`)
      assert.equal(engine.revoke('r', t), 'already_revoked', `${url}: not revoked`)
      if (url !== '/trailer') assert.ok(clears(r, engine, 'r'), `${url}: ${JSON.stringify(r.setCookies)}`)
    }
  }, { listen: true, options: { http2: true } })
})

// Express: the waiting page (or a reject) is the middleware's own response, but a middleware
// ahead of it may have set the command on the response: it went out with the page.

test('express: the waiting page never carries a command set ahead of the middleware', async () => {
  const engine = new Engine(CONFIG.replace('total_active_users = 10', 'total_active_users = 1'))
  await withExpress(engine, 'r', (req, res) => res.send('origin'), async (port) => {
    let r = await rawGet(port, '/x')
    assert.equal(r.body, 'origin')
    r = await rawGet(port, '/x', [['X-Set-Command', '1']])
    assert.notEqual(r.body, 'origin', 'the second visitor should wait')
    assert.equal(r.headers['velvet-rope-command'], undefined, 'the command reached the client with the waiting page')
  }, (app) => app.use((req, res, next) => {
    if (req.headers['x-set-command']) res.setHeader('Velvet-Rope-Command', 'revoke')
    next()
  }))
})

// Fastify, the plugin awaited (each route its own hook): a reply hijacked before any route
// hook ran (an application onRequest hook, the not-found handler) kept the command.

test('fastify: replies hijacked outside the route hooks lose the command (plugin awaited)', async () => {
  await withFastify((app) => {
    app.addHook('onRequest', (request, reply, next) => {
      if (request.url !== '/early') return next()
      reply.hijack()
      reply.raw.writeHead(200, { 'velvet-rope-command': 'revoke' })
      reply.raw.end('early')
    })
    app.setNotFoundHandler((request, reply) => {
      reply.hijack()
      reply.raw.writeHead(404, { 'velvet-rope-command': 'revoke' })
      reply.raw.end('nothing')
    })
    app.get('/x', async () => 'origin')
  }, async (app) => {
    for (const target of ['/early', '/missing']) {
      const r = await rawGet(app.server.address().port, target)
      assert.equal(r.headers['velvet-rope-command'], undefined, `${target}: the command reached the client`)
    }
  }, { listen: true, awaited: true })
})
