'use strict'
/**
 * Rules, header tickets and dry runs through the Express and Fastify middleware on real
 * servers (test/apps/rules.toml: one seat, header tickets, a rule refusing bots, a dry-run
 * room), the configuration's routes placing requests.
 */

const assert = require('node:assert/strict')
const path = require('node:path')
const readline = require('node:readline')
const { spawn } = require('node:child_process')
const { describe, it, before, after } = require('node:test')

const CONFIG = path.join(__dirname, 'apps', 'rules.toml')

function start (kind) {
  const child = spawn(process.execPath, [path.join(__dirname, 'apps', 'conformance_server.js'), kind, CONFIG],
    { stdio: ['ignore', 'pipe', 'pipe'] })
  let log = ''
  child.stderr.on('data', (d) => { log += d })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(log)) }, 30_000)
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`exited ${code}: ${log}`)) })
    readline.createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer)
      resolve({ port: JSON.parse(line).port, child })
    })
  })
}

async function get (port, path, headers = {}) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { headers })
  return { status: r.status, headers: r.headers, body: await r.text() }
}

for (const kind of ['express', 'fastify']) {
  describe(`rules and header tickets through ${kind}`, () => {
    let server
    before(async () => { server = await start(kind) })
    after(() => new Promise((resolve) => {
      server.child.removeAllListeners('exit')
      server.child.on('exit', resolve)
      server.child.kill('SIGTERM')
    }))

    it('lets a header ticket hold a place', async () => {
      const first = await get(server.port, '/cart')
      assert.equal(first.status, 200)
      const ticket = first.headers.get('velvet-rope-ticket')
      assert.ok(ticket, 'the new ticket comes back in a header')
      assert.ok(first.headers.get('set-cookie').startsWith(`__vr_app=${ticket};`))
      for (let i = 0; i < 3; i++) {
        const again = await get(server.port, '/cart', { 'Velvet-Rope-Ticket': ticket })
        assert.equal(again.body, 'origin\n')
        assert.equal(again.headers.get('set-cookie'), null)
      }
      const other = await get(server.port, '/cart', { Accept: 'application/json' })
      const page = JSON.parse(other.body)
      assert.equal(page.outcome, 'queue')
      assert.equal(other.headers.get('velvet-rope-ticket'), page.ticket)
      const back = JSON.parse((await get(server.port, '/cart',
        { Accept: 'application/json', 'Velvet-Rope-Ticket': page.ticket })).body)
      assert.equal(back.outcome, 'queue')
      assert.equal(back.position, 1)
      assert.ok(back.ticket)
      assert.equal((await get(server.port, '/cart', { 'Velvet-Rope-Ticket': ticket })).body, 'origin\n')
    })

    it('answers a reject rule with problem details, in rule order', async () => {
      const r = await get(server.port, '/cart', { 'User-Agent': 'a bot', Accept: 'application/json' })
      assert.equal(r.status, 403)
      assert.equal(r.headers.get('content-type').split(';')[0], 'application/problem+json')
      const problem = JSON.parse(r.body)
      assert.equal(problem.status, 403)
      assert.match(problem.type, /refused-by-rule$/)
      assert.equal((await get(server.port, '/health', { 'User-Agent': 'a bot' })).status, 403)
      const health = await get(server.port, '/health')
      assert.equal(health.body, 'origin\n')
      assert.equal(health.headers.get('set-cookie'), null)
    })

    it('lets everyone through a dry run, with a ticket', async () => {
      for (let i = 0; i < 4; i++) {
        const r = await get(server.port, '/trial/x')
        assert.equal(r.body, 'origin\n')
        assert.match(r.headers.get('set-cookie'), /^__vr_trial=/)
      }
    })
  })
}
