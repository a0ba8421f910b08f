'use strict'
/**
 * The front-door conformance table (conformance/front_doors.{toml,json} at the repository's
 * root): every request must get the decision the table states, in process through
 * `engine.decideRequest`, and over HTTP through the Express and Fastify middleware on real
 * servers (raw requests: targets as written, absolute form included; the client's address
 * sent as `X-Forwarded-For` from 127.0.0.1, a trusted proxy).
 */

const assert = require('node:assert/strict')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')
const readline = require('node:readline')
const { spawn } = require('node:child_process')
const { describe, it, before, after } = require('node:test')

const velvetRope = require('..')

const ROOT = path.join(__dirname, '..', '..')
const CONFIG = path.join(ROOT, 'conformance', 'front_doors.toml')
const CASES = JSON.parse(fs.readFileSync(path.join(ROOT, 'conformance', 'front_doors.json'), 'utf8')).cases
const NOW = 1_800_000_000_000

/** A decision as the table names it. */
function verdict (placed) {
  if (placed === null) return ['unrouted', null]
  const d = placed.decision
  if (d.bypassed) return ['bypass', placed.room]
  if (d.wouldHave) return ['pass', placed.room]
  return [d.outcome, placed.room]
}

describe('the conformance table in process', () => {
  const engine = velvetRope.Engine.fromFile(CONFIG, { nowMs: NOW })
  for (const c of CASES) {
    it(c.name, () => {
      const rawHeaders = ['Host', c.host]
      for (const [n, v] of c.headers) rawHeaders.push(n, v)
      rawHeaders.push('X-Forwarded-For', c.client)
      const req = { method: c.method, url: c.target, rawHeaders, socket: { remoteAddress: '::ffff:127.0.0.1' } }
      assert.deepEqual(verdict(engine.decideRequest(req, { nowMs: NOW })), [c.expect, c.room])
    })
  }
})

/** Sends a row as written; resolves with the status, headers (lower-case) and body. */
function rawRequest (port, c) {
  const lines = [`${c.method} ${c.target} HTTP/1.1`, `Host: ${c.host}`]
  for (const [n, v] of c.headers) lines.push(`${n}: ${v}`)
  lines.push(`X-Forwarded-For: ${c.client}`, 'Connection: close', '', '')
  return new Promise((resolve, reject) => {
    const chunks = []
    const socket = net.connect(port, '127.0.0.1', () => socket.end(lines.join('\r\n'), 'latin1'))
    socket.on('data', (d) => chunks.push(d))
    socket.on('error', reject)
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1')
      const [head, ...rest] = text.split('\r\n\r\n')
      const [statusLine, ...headerLines] = head.split('\r\n')
      const headers = {}
      for (const line of headerLines) {
        const at = line.indexOf(':')
        const name = line.slice(0, at).trim().toLowerCase()
        ;(headers[name] ||= []).push(line.slice(at + 1).trim())
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') })
    })
  })
}

/** A response as the table names it (see front_doors.toml's header). */
function classify (c, r) {
  const ours = (r.headers['set-cookie'] || []).some((v) => v.startsWith('__vr_'))
  if (r.status === 503) return 'queue'
  if (r.status === 403) return 'reject'
  if (r.status !== 200) return `status ${r.status}`
  if (c.method !== 'HEAD' && !r.body.endsWith('origin\n')) return `body ${r.body.slice(0, 80)}`
  if (!ours) return 'bypass-or-unrouted'
  return c.expect === 'pass' ? 'pass' : 'admit'
}

/** What HTTP shows of the expected decision (a bypass and an unrouted request look alike). */
function overHttp (c) {
  return c.expect === 'bypass' || c.expect === 'unrouted' ? 'bypass-or-unrouted' : c.expect
}

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
      resolve({ port: JSON.parse(line).port, child, log: () => log })
    })
  })
}

for (const kind of ['express', 'fastify']) {
  describe(`the conformance table through ${kind}`, () => {
    let server
    before(async () => { server = await start(kind) })
    after(() => new Promise((resolve) => {
      server.child.removeAllListeners('exit')
      server.child.on('exit', resolve)
      server.child.kill('SIGTERM')
    }))

    it('gives every row its decision', async () => {
      const failures = []
      for (const c of CASES) {
        const r = await rawRequest(server.port, c)
        const got = classify(c, r)
        if (got !== overHttp(c)) {
          failures.push(`${c.name}: ${c.method} ${c.target} (host ${c.host}): expected ${c.expect}, got ${got}`)
        }
      }
      assert.deepEqual(failures, [])
    })
  })
}
