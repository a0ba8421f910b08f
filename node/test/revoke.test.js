'use strict'
/**
 * Origin commands through real servers: Express and Fastify, each a `node:cluster` of two
 * workers sharing one state file (test/apps/revoke.toml, revoke_server.js). A route answering
 * `Velvet-Rope-Command: revoke` ends the visitor's session: the header never reaches the
 * client, the response clears the ticket cookie, the seat is freed (exactly one), and the
 * old ticket is refused by both workers.
 */

const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { describe, it, before, after } = require('node:test')

const { Jar, get, startServer } = require('./helpers.js')

const SEATS = 3 // total_active_users of every room in revoke.toml
/**
 * A revocation frees the seat at once, by a tick the revoking call runs, unless another
 * process is ticking the room at that moment: then its tick (once a second) does. Counting
 * waits past that.
 */
const SETTLE = 1500
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** The response has no `Velvet-Rope-Command` (fetch's headers are case-insensitive). */
function noCommand (r) {
  return r.header('velvet-rope-command') === null
}

function cookiesOf (r, room) {
  return r.setCookies.filter((c) => c.startsWith(`__vr_${room}=`))
}

/** The response's only Set-Cookie of the room's ticket clears it. */
function clears (r, room) {
  const mine = cookiesOf(r, room)
  return mine.length === 1 && mine[0].startsWith(`__vr_${room}=;`) && /;\s*Max-Age=0\s*(;|$)/i.test(mine[0])
}

for (const kind of ['express', 'fastify']) {
  describe(`${kind}: origin commands, two cluster workers`, () => {
    let server
    let port

    before(async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `velvet-rope-revoke-${kind}-`))
      server = await startServer(kind, path.join(dir, 'rooms.state'), 'revoke_server.js')
      port = server.port
    })
    after(async () => {
      if (server) assert.equal(await server.stop(), 0, server.log())
    })

    async function stats () {
      return (await get(port, '/health/stats')).json().rooms
    }

    /** `n` new visitors, each admitted. */
    async function fill (url, n) {
      const jars = []
      for (let i = 0; i < n; i++) {
        const jar = new Jar()
        const r = await get(port, url, jar)
        assert.ok(r.admitted, `visitor ${i + 1} of ${n} not admitted: ${r.status}`)
        jars.push(jar)
      }
      return jars
    }

    /** New visitors (no ticket) admitted before the first one that waits. */
    async function newUntilQueued (url) {
      for (let n = 0; n < 20; n++) {
        const r = await get(port, url)
        if (!r.admitted) {
          assert.ok(r.waiting, `neither admitted nor waiting: ${r.status} ${r.body.slice(0, 200)}`)
          return n
        }
      }
      assert.fail('never queued')
    }

    /**
     * Presents a revoked ticket (`cookies` or `headers`) until both workers have answered it
     * (a few at once, so that both take some); each must be a new arrival that waits (the
     * room is full) with a new ticket. How many requests were made.
     */
    async function refusedByBothWorkers (url, room, ticket, { cookies, headers }) {
      const pids = new Set()
      let made = 0
      for (let round = 0; round < 8 && pids.size < 2; round++) {
        const replies = await Promise.all(Array.from({ length: 6 },
          () => get(port, url, new Jar(cookies || {}), headers || {})))
        for (const r of replies) {
          made++
          pids.add(r.header('x-worker-pid'))
          assert.ok(!r.admitted && r.waiting, `a revoked ticket got in: ${r.status}`)
          const fresh = r.header('velvet-rope-ticket') ||
            (cookiesOf(r, room)[0] || '').split(';', 1)[0].split('=')[1]
          assert.ok(fresh && fresh !== ticket, 'no new ticket for a revoked one')
        }
      }
      assert.equal(pids.size, 2, `one worker answered every request: ${[...pids]}`)
      return made
    }

    it('a revoke command ends the session and frees exactly its seat', async () => {
      const room = 'rv'
      const visitors = await fill('/rv/page', SEATS)
      const leaving = visitors[0]
      const old = leaving.cookies[`__vr_${room}`]
      const r = await get(port, '/rv/logout', leaving)
      assert.ok(r.admitted && r.json().logout, 'the logout page is served')
      assert.ok(noCommand(r), 'the command reached the client')
      assert.ok(clears(r, room), `the ticket cookie is not cleared: ${r.setCookies}`)
      assert.equal(leaving.cookies[`__vr_${room}`], undefined)
      await sleep(SETTLE)
      assert.equal(await newUntilQueued('/rv/page'), 1, 'not exactly the one seat freed')
      const made = await refusedByBothWorkers('/rv/page', room, old, { cookies: { [`__vr_${room}`]: old } })
      for (const jar of visitors.slice(1)) assert.ok((await get(port, '/rv/page', jar)).admitted)
      const st = (await stats())[room]
      assert.equal(st.revocations.made, 1)
      assert.equal(st.ticket_rejections.revoked, made)
    })

    it('a room without origin commands only loses the header', async () => {
      const visitors = await fill('/plain/page', SEATS)
      const ticket = visitors[0].cookies.__vr_plain
      const r = await get(port, '/plain/logout', visitors[0])
      assert.ok(r.admitted && noCommand(r))
      assert.deepEqual(cookiesOf(r, 'plain'), [], 'a cookie was cleared or set')
      assert.equal(visitors[0].cookies.__vr_plain, ticket)
      await sleep(SETTLE)
      assert.equal(await newUntilQueued('/plain/page'), 0, 'a seat was freed')
      for (let i = 0; i < 6; i++) {
        assert.ok((await get(port, '/plain/page', new Jar(visitors[0].cookies))).admitted, 'the session goes on')
      }
      const st = (await stats()).plain
      assert.equal(st.revocations, null)
      assert.equal(st.ticket_rejections.revoked, 0)
    })

    it('a header-ticket client is revoked the same way', async () => {
      const hget = (url, ticket) => get(port, url, new Jar(), ticket ? { 'velvet-rope-ticket': ticket } : {})
      // A first request that is a logout: the ticket its own decision issued is revoked, and
      // neither header hands it out.
      let r = await hget('/hdr/logout')
      assert.ok(r.admitted && noCommand(r))
      assert.equal(r.header('velvet-rope-ticket'), null, 'the revoked ticket was handed out')
      assert.ok(clears(r, 'hdr'), `${r.setCookies}`)
      await sleep(SETTLE)
      // Its seat is free again: three new clients fill the room.
      const tickets = []
      for (let i = 0; i < SEATS; i++) {
        r = await hget('/hdr/page')
        assert.ok(r.admitted, 'the revoked first visitor still holds a seat')
        assert.ok(r.header('velvet-rope-ticket'))
        tickets.push(r.header('velvet-rope-ticket'))
      }
      for (const t of tickets) assert.ok((await hget('/hdr/page', t)).admitted)
      r = await hget('/hdr/logout', tickets[0])
      assert.ok(r.admitted && noCommand(r) && r.header('velvet-rope-ticket') === null)
      assert.ok(clears(r, 'hdr'))
      await sleep(SETTLE)
      assert.equal(await newUntilQueued('/hdr/page'), 1, 'not exactly the one seat freed')
      const made = await refusedByBothWorkers('/hdr/page', 'hdr', tickets[0],
        { headers: { 'velvet-rope-ticket': tickets[0] } })
      for (const t of tickets.slice(1)) assert.ok((await hget('/hdr/page', t)).admitted)
      const st = (await stats()).hdr
      assert.equal(st.revocations.made, 2)
      assert.equal(st.ticket_rejections.revoked, made)
    })

    it('a request a bypass rule lets pass revokes nothing', async () => {
      const visitors = await fill('/rvb/page', SEATS - 1)
      const r = await get(port, '/rvb/public/logout', visitors[0])
      assert.equal(r.status, 200)
      assert.ok(r.json().logout && noCommand(r))
      assert.deepEqual(cookiesOf(r, 'rvb'), [])
      await sleep(SETTLE)
      assert.ok((await get(port, '/rvb/page', visitors[0])).admitted)
      assert.equal(await newUntilQueued('/rvb/page'), 1, 'the last seat, and no other')
      const st = (await stats()).rvb
      assert.equal(st.revocations.made, 0)
      assert.equal(st.ticket_rejections.revoked, 0)
    })

    it('commands are removed from undecided responses', async () => {
      const urls = ['/health/cmd', '/free/cmd']
      if (kind === 'fastify') urls.push('/rv/optout/logout')
      for (const url of urls) {
        for (let i = 0; i < 4; i++) { // both workers, most likely
          const r = await get(port, url)
          assert.equal(r.status, 200, url)
          assert.ok(r.json().ok && noCommand(r), url)
          assert.deepEqual(r.setCookies, [], url)
        }
      }
    })
  })
}
