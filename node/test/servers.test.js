'use strict'
/**
 * Real servers on 127.0.0.1, driven with `fetch`: Express and Fastify, each a `node:cluster`
 * of two workers sharing the rooms' counts through one state file.
 */

const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { describe, it, before, after } = require('node:test')

const { Jar, get, rawGet, startServer, attackTargets, parseOpenMetrics, parsePrometheusText, sampleKey } = require('./helpers.js')

const K = 10 // total_active_users of room `shop` (test/apps/rooms.toml)
const N = 40 // concurrent new visitors
const COOKIE = '__vr_shop'

for (const kind of ['express', 'fastify']) {
  describe(`${kind}, two cluster workers`, () => {
    let server
    let admitted = []

    before(async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `velvet-rope-${kind}-`))
      server = await startServer(kind, path.join(dir, 'rooms.state'))
    })
    after(async () => {
      if (server) await server.stop()
    })

    it('admits exactly K of N concurrent new visitors across both workers', async () => {
      const jars = Array.from({ length: N }, () => new Jar())
      const replies = await Promise.all(jars.map((jar) => get(server.port, '/shop/a', jar)))
      admitted = jars.filter((_, i) => replies[i].admitted)
      const waiting = replies.filter((r) => r.waiting)
      assert.equal(admitted.length, K, `${admitted.length} of ${N} admitted, the limit is ${K}`)
      assert.equal(waiting.length, N - K)
      const pids = new Set(replies.map((r) => r.header('x-worker-pid')))
      assert.equal(pids.size, 2, `one worker served every request: ${[...pids]}`)
      for (const jar of admitted) assert.ok(jar.cookies[COOKIE], 'an admitted visitor gets a ticket')
    })

    it("reports the host's figures from either worker's /metrics", async () => {
      assert.equal(admitted.length, K, "needs the crowd's admitted visitors")
      const byWorker = new Map()
      for (let i = 0; i < 40 && byWorker.size < 2; i++) {
        const r = await get(server.port, `/metrics?n=${i}`, new Jar())
        assert.equal(r.status, 200)
        const type = r.header('content-type')
        const m = type.startsWith('application/openmetrics-text') ? parseOpenMetrics(r.body) : parsePrometheusText(r.body)
        if (kind === 'fastify') assert.equal(type, 'application/openmetrics-text; version=1.0.0; charset=utf-8')
        const pick = (name, labels) => m.get(sampleKey(name, labels))
        const hostWide = {
          newOnes: pick('velvet_rope_room_admissions_total', { room: 'shop', kind: 'new' }),
          queued: pick('velvet_rope_room_decisions_total', { room: 'shop', outcome: 'queue' })
        }
        assert.deepEqual(hostWide, { newOnes: K, queued: N - K })
        // Express's registry holds the worker's own counter beside the engine's families.
        if (kind === 'express') assert.equal(typeof pick('app_shop_pages_total', {}), 'number')
        byWorker.set(r.header('x-worker-pid'), hostWide)
      }
      assert.equal(byWorker.size, 2, `one worker answered every scrape: ${[...byWorker.keys()]}`)
    })

    it('re-admits visitors by their cookies, with nothing more to set', async () => {
      assert.equal(admitted.length, K, "needs the crowd's admitted visitors")
      for (const jar of admitted) {
        for (let i = 0; i < 2; i++) {
          const r = await get(server.port, '/shop/b', jar)
          assert.ok(r.admitted, `status ${r.status}`)
        }
      }
    })

    it('serves the waiting page to visitors over the limit', async () => {
      const jar = new Jar()
      let r = await get(server.port, '/shop/c', jar)
      assert.ok(!r.admitted && r.waiting)
      assert.equal(r.status, 202, "the room's queueing_status_code")
      assert.match(r.header('content-type'), /^text\/html/)
      assert.equal(r.header('refresh'), '5')
      assert.equal(r.header('cache-control'), 'no-store')
      assert.match(r.body, /id="position"/)
      assert.ok(jar.cookies[COOKIE], 'a waiter gets a queued ticket')
      r = await get(server.port, '/shop/c', new Jar(), { accept: 'application/json' })
      assert.equal(r.status, 202)
      assert.match(r.header('content-type'), /^application\/json/)
      const doc = r.json()
      assert.equal(doc.outcome, 'queue')
      assert.ok(doc.position >= 1)
    })

    it('treats a tampered cookie as a new visitor', async () => {
      assert.equal(admitted.length, K, "needs the crowd's admitted visitors")
      const value = admitted[0].cookies[COOKIE]
      const i = value.length >> 1
      const forged = new Jar({ [COOKIE]: value.slice(0, i) + (value[i] === 'A' ? 'B' : 'A') + value.slice(i + 1) })
      const r = await get(server.port, '/shop/d', forged)
      assert.ok(!r.admitted && r.waiting, 'a forged ticket got in')
      assert.notEqual(forged.cookies[COOKIE], value, 'treated as new: a queued ticket of its own')
    })

    it('lets bypassed and unroomed paths pass untouched', async () => {
      for (const url of ['/health', '/open']) {
        const r = await get(server.port, url)
        assert.equal(r.status, 200, url)
        assert.equal(r.json().ok, true)
        assert.deepEqual(r.setCookies, [], `${url} set a cookie`)
      }
    })

    /** Whether a reply was decided in `room`: its waiting page, or its ticket set. */
    function decidedIn (r, room) {
      return r.status === 202 || r.status === 429 || r.setCookies.some((c) => c.startsWith(`__vr_${room}=`))
    }

    it('decides what the framework routes to a room, however the target is written', async () => {
      const wrong = []
      // The room `shop` is full (the crowd above): its requests get the waiting page.
      const shop = ['http://x/shop/item', 'http://user@x/shop/item?q=1', '/SHOP/item', '/sHoP/item']
      if (kind === 'fastify') shop.push('/%73hop/item', '/%73HOP/item')
      for (const target of shop) {
        const r = await rawGet(server.port, target)
        if (!decidedIn(r, 'shop')) wrong.push(`${target}: reached the route undecided (${r.status})`)
      }
      // A static handler at the root resolves `..` (and its escapes) after the bypass prefix.
      for (const target of ['/static/../vault.html', '/static/%2e%2e/vault.html', '/static/.%2E/vault.html',
        '/static/..%2Fvault.html', '/static//../vault.html']) {
        const r = await rawGet(server.port, target)
        if (r.status !== 200 || !/id="vault"/.test(r.body)) wrong.push(`${target}: not the vault's page (${r.status})`)
        else if (!decidedIn(r, 'vault')) wrong.push(`${target}: served the vault's page undecided`)
      }
      // What the bypass and no room cover still passes.
      for (const target of ['/static/app.css', '/health', '/open', 'http://x/static/app.css']) {
        const r = await rawGet(server.port, target)
        if (r.status !== 200 || r.setCookies.length > 0) wrong.push(`${target}: ${r.status}, decided: ${r.setCookies}`)
      }
      assert.deepEqual(wrong, [])
    })

    it('lets no spelling of a protected path reach it undecided (seeded attack targets)', async () => {
      const { vault, shop } = attackTargets()
      const escaped = []
      let served = 0
      for (const target of vault) {
        let r
        try {
          r = await rawGet(server.port, target)
        } catch (e) {
          continue // refused by the server's parser: reaches nothing
        }
        if (r.status === 200 && /id="vault"/.test(r.body)) {
          served++
          if (!decidedIn(r, 'vault')) escaped.push(target)
        }
      }
      for (const target of shop) {
        let r
        try {
          r = await rawGet(server.port, target)
        } catch (e) {
          continue
        }
        // The room is full: the route runs only for a request that was not decided.
        if (r.status === 200 && /"route":"shop"/.test(r.body)) escaped.push(target)
      }
      assert.deepEqual(escaped, [])
      assert.ok(served >= 20, `only ${served} spellings served the vault's page: the attack is too weak`)
    })

    if (kind === 'fastify') {
      it('follows per-route options: a room of its own, or none', async () => {
        const outcomes = []
        for (let i = 0; i < 4; i++) outcomes.push(await get(server.port, '/checkout'))
        assert.deepEqual(outcomes.map((r) => r.status), [200, 200, 429, 429], 'room `checkout` rejects past 2')
        assert.ok(outcomes[2].header('retry-after'))
        assert.ok(outcomes[0].setCookies.some((c) => c.startsWith('__vr_checkout=')))
        const free = await get(server.port, '/shop/free')
        assert.ok(free.admitted, 'the route turned the waiting room off')
        assert.deepEqual(free.setCookies, [])
      })
    }

    it('stops cleanly', async () => {
      const code = await server.stop()
      server = null
      assert.equal(code, 0)
    })
  })
}
