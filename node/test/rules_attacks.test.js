'use strict'
/**
 * Adversarial review of routes and rules through the Node front doors: the conformance
 * configuration (`shop` queues everyone with a 503) behind Express and Fastify, requests
 * written on a raw socket so that nothing normalises them first.
 */

const assert = require('node:assert/strict')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')
const readline = require('node:readline')
const { spawn } = require('node:child_process')
const { describe, it, before, after } = require('node:test')

const { Engine } = require('..')

const CONFIG = path.join(__dirname, '..', '..', 'conformance', 'front_doors.toml')

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

/** The status code the server answers `raw` (a whole request) with. */
function status (port, raw) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(raw))
    let out = ''
    s.on('data', (d) => { out += d })
    s.on('error', reject)
    s.on('end', () => resolve(Number(out.split(' ')[1])))
  })
}

describe('a link-local peer (Node reports `fe80::1%eth0`, zone included)', () => {
  it('is decided, not refused with an error', () => {
    const engine = new Engine(fs.readFileSync(CONFIG, 'utf8'))
    for (const peer of ['fe80::1%eth0', 'fe80::1%2']) {
      const placed = engine.decideRequest({
        method: 'GET',
        url: '/cart',
        rawHeaders: ['Host', 'shop.example.com'],
        socket: { remoteAddress: peer }
      })
      assert.equal(placed.room, 'shop')
      assert.equal(placed.decision.outcome, 'queue')
    }
  })
})

for (const kind of ['express', 'fastify']) {
  describe(`requests the shop must decide, through ${kind}`, () => {
    let server
    before(async () => { server = await start(kind) })
    after(() => new Promise((resolve) => {
      server.child.once('exit', resolve)
      server.child.kill('SIGTERM')
    }))

    it('the control: GET /cart on the shop host waits (503)', async () => {
      assert.equal(await status(server.port,
        'GET /cart HTTP/1.1\r\nHost: shop.example.com\r\nConnection: close\r\n\r\n'), 503)
    })

    it('a query after a fragment does not satisfy the preview bypass', async () => {
      // The application reads no query here (`req.query` is `{}`); the rule reads preview=yes.
      assert.equal(await status(server.port,
        'GET /cart#?preview=yes HTTP/1.1\r\nHost: shop.example.com\r\nConnection: close\r\n\r\n'), 503)
    })

    it('a repeated preview key does not bypass', async () => {
      assert.equal(await status(server.port,
        'GET /cart?preview=no&preview=yes HTTP/1.1\r\nHost: shop.example.com\r\nConnection: close\r\n\r\n'), 503)
    })

    it('an HTTP/1.0 request without a Host header is not let through', async () => {
      // It may be any host's: the shop's, the api's, the events' (each deciding it), so it
      // is refused (400) rather than decided in one of them.
      assert.equal(await status(server.port, 'GET /cart HTTP/1.0\r\n\r\n'), 400)
    })
  })
}
