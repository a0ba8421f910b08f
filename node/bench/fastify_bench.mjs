// Requests per second of a minimal Fastify app behind the waiting-room plugin and bare, in
// interleaved rounds (`make bench-node`). Visitors hold valid tickets: 2,000 distinct ones in
// turn (wrk's Lua script picks the next cookie per request), as during a sale, kept fresh as a
// browser keeps them (see `beforeRound`).
//
// The servers run pinned to the first CPU and wrk to the second (`taskset`), one side at a
// time, alternating which goes first. `CONTROL=1` serves the bare app on both sides: an A/A
// control that shows how well the method resolves a few percent on this machine. Prints
// every round and the median of the per-round ratios (roomed / plain).
import { spawn, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const ROUNDS = Number(process.env.ROUNDS || 10)
const SECONDS = Number(process.env.SECONDS_PER_ROUND || 3)
const CONTROL = process.env.CONTROL === '1'
const VISITORS = 2000

async function start (kind, port) {
  const p = spawn('taskset', ['-c', '0', process.execPath, path.join(HERE, 'fastify_app.js'), kind, String(port)],
    { stdio: 'ignore' })
  for (let i = 0; i < 200; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/`)
      return p
    } catch {
      await sleep(100)
    }
  }
  p.kill()
  throw new Error(`the ${kind} app did not start`)
}

function wrk (port, script) {
  const out = execFileSync('taskset', ['-c', '1', 'wrk', '-t1', '-c32', `-d${SECONDS}s`, '-s', script,
    `http://127.0.0.1:${port}/`], { encoding: 'utf8' })
  const m = /Requests\/sec:\s+([\d.]+)/.exec(out)
  if (!m) throw new Error(out)
  return Number(m[1])
}

const ports = { plain: 18101, roomed: 18102 }
const procs = [await start('plain', ports.plain), await start(CONTROL ? 'plain' : 'roomed', ports.roomed)]
const tickets = CONTROL ? await start('roomed', 18103) : null
const issuer = `http://127.0.0.1:${CONTROL ? 18103 : ports.roomed}/`
const script = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'vr-bench-')), 'cookies.lua')

/**
 * Each visitor's request with its current cookie (none: a new visitor), keeping the ticket
 * the server sets, as a browser does. Sixteen at a time.
 */
async function visit (cookies) {
  let next = 0
  async function worker () {
    while (next < cookies.length) {
      const i = next++
      const res = await fetch(issuer, cookies[i] ? { headers: { cookie: cookies[i] } } : {})
      await res.text()
      const set = res.headers.get('set-cookie')
      if (set) cookies[i] = set.split(';', 1)[0]
    }
  }
  await Promise.all(Array.from({ length: 16 }, worker))
  fs.writeFileSync(script, `cookies = {${cookies.map((c) => `"${c}"`).join(',')}}\n` +
    'i = 0\nrequest = function()\n  i = i % #cookies + 1\n' +
    '  return wrk.format(nil, nil, {Cookie = cookies[i]})\nend\n')
}

/**
 * Tickets are renewed when the minute (the room's time bucket) turns; a browser keeps the
 * renewed ticket, but wrk replays the old one, which would then be renewed on every request.
 * So a round never spans a minute boundary, and the visitors come back first (one request
 * each: the renewal a sale sees once per visitor per minute).
 */
async function beforeRound () {
  const leftMs = 60_000 - (Date.now() % 60_000)
  if (leftMs < (2 * SECONDS + 4) * 1000) await sleep(leftMs + 250)
  if (!CONTROL) await visit(cookies)
}

const cookies = new Array(VISITORS).fill(null)
try {
  await visit(cookies)
  if (tickets) tickets.kill()
  const ratios = []
  for (let r = 0; r < ROUNDS; r++) {
    await beforeRound()
    const order = r % 2 === 0 ? ['plain', 'roomed'] : ['roomed', 'plain']
    const got = {}
    for (const side of order) got[side] = wrk(ports[side], script)
    ratios.push(got.roomed / got.plain)
    console.log(`round ${r + 1}: plain ${got.plain.toFixed(0)} req/s, roomed ${got.roomed.toFixed(0)} req/s, ` +
      `ratio ${ratios.at(-1).toFixed(3)}`)
  }
  const sorted = [...ratios].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
  console.log(`median ratio (${CONTROL ? 'A/A control (bare / bare)' : 'roomed / plain'}) over ${ROUNDS} rounds: ` +
    `${median.toFixed(3)}; rounds from ${sorted[0].toFixed(3)} to ${sorted.at(-1).toFixed(3)}`)
} finally {
  for (const p of procs) p.kill()
}
