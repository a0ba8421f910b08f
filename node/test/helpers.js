'use strict'
/**
 * What the tests share: a cookie jar, `get`, a test server's lifecycle, and parsers of the
 * metrics' text formats.
 */

const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const http = require('node:http')
const path = require('node:path')
const readline = require('node:readline')

/** Cookies by name, as a browser keeps them (only the name=value part matters here). */
class Jar {
  constructor (cookies = {}) {
    this.cookies = { ...cookies }
  }

  header () {
    const pairs = Object.entries(this.cookies).map(([k, v]) => `${k}=${v}`)
    return pairs.length ? pairs.join('; ') : undefined
  }

  take (setCookies) {
    for (const line of setCookies) {
      const [pair] = line.split(';', 1)
      const eq = pair.indexOf('=')
      const name = pair.slice(0, eq).trim()
      if (/;\s*max-age\s*=\s*0\s*(;|$)/i.test(line)) {
        delete this.cookies[name] // cleared, as a browser drops it
      } else {
        this.cookies[name] = pair.slice(eq + 1).trim()
      }
    }
  }
}

/** A response, read whole, with what the tests ask of it. */
class Reply {
  constructor (res, body) {
    this.status = res.status
    this.headers = res.headers
    this.setCookies = res.headers.getSetCookie()
    this.body = body
  }

  header (name) {
    return this.headers.get(name)
  }

  /** The route ran (it answers JSON with `ok`). */
  get admitted () {
    return this.status === 200 && this.body.startsWith('{"ok":true')
  }

  /** The waiting page (a queue or reject decision). */
  get waiting () {
    return this.status === 202 || this.status === 429
  }

  json () {
    return JSON.parse(this.body)
  }
}

/** GETs a path on 127.0.0.1, sending the jar's cookies and keeping the ones set. */
async function get (port, url, jar = new Jar(), headers = {}) {
  const cookie = jar.header()
  const res = await fetch(`http://127.0.0.1:${port}${url}`, {
    headers: { ...headers, ...(cookie ? { cookie } : {}) },
    signal: AbortSignal.timeout(10_000)
  })
  const reply = new Reply(res, await res.text())
  jar.take(reply.setCookies)
  return reply
}

/**
 * Sends `target` exactly as written (`fetch` would resolve `..` and absolute forms first):
 * `GET <target> HTTP/1.1` with `headers`, a list of `[name, value]` lines (a name may repeat).
 * Resolves with the status, the `Set-Cookie` lines and the body.
 */
function rawGet (port, target, headers = []) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: target, method: 'GET', headers: [['Host', `127.0.0.1:${port}`], ['Connection', 'close'], ...headers].flat() }, (res) => {
      let body = ''
      res.setEncoding('latin1')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => {
        const setCookies = [].concat(res.headers['set-cookie'] || [])
        resolve({ status: res.statusCode, headers: res.headers, setCookies, body })
      })
    })
    req.setTimeout(10_000, () => req.destroy(new Error(`GET ${target}: no answer in 10 s`)))
    req.on('error', reject)
    req.end()
  })
}

/**
 * Starts `test/apps/server.js` (or another app of `test/apps`: a two-worker cluster); resolves
 * once both workers listen.
 */
function startServer (kind, statePath, app = 'server.js') {
  const child = spawn(process.execPath, [path.join(__dirname, 'apps', app), kind, statePath], {
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let log = ''
  child.stderr.on('data', (chunk) => { log += chunk })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal)))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`the ${kind} server did not start in 30 s:\n${log}`))
    }, 30_000)
    exited.then((code) => {
      clearTimeout(timer)
      reject(new Error(`the ${kind} server exited (${code}) before listening:\n${log}`))
    })
    readline.createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer)
      const { port } = JSON.parse(line)
      resolve({
        port,
        log: () => log,
        /** Stops the server; resolves with its exit code. */
        stop () {
          const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
          child.kill('SIGTERM')
          return exited.finally(() => clearTimeout(timer))
        }
      })
    })
  })
}

/**
 * Request targets that name a protected path in some encoding, for trying to get past a room:
 * `/static/` (a bypass prefix) then `..` segments in their spellings and separators, then the
 * vault's page; and the shop's route in several spellings. A seeded choice among the
 * combinations, the same on every run (`count` of each kind).
 */
function attackTargets (count = 400) {
  let seed = 0x5eed
  const pick = (list) => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
    return list[(seed >>> 8) % list.length]
  }
  const starts = ['/static/', '/STATIC/', '//static/', '/static//', '/static/./', '/health/', '/static/x/',
    '/./static/', '/static;/', '/static/%2e/', '/static%2f']
  const dots = ['..', '%2e%2e', '%2E%2E', '.%2e', '%2e.', '%2E.', '..;', '%252e%252e', '.%2E']
  const seps = ['/', '%2f', '%2F', '\\', '%5c', '//', '/./', ';/', '/%2e/']
  const vaults = ['vault.html', '%76ault.html', 'v%61ult.html', 'vault%2ehtml', 'vault.html?x=1',
    'vault.html#x', 'VAULT.html', '%56ault.html']
  const hosts = ['', '', '', 'http://x', 'http://u@x:80', 'HTTP://X']
  const targets = new Set()
  while (targets.size < count) {
    let t = pick(hosts) + pick(starts)
    const ups = 1 + (pick([0, 1, 2]) === 2 ? 1 : 0)
    for (let i = 0; i < ups; i++) t += pick(dots) + pick(seps)
    targets.add(t + pick(vaults))
  }
  const shops = ['/shop/', '/SHOP/', '/%73hop/', '/%53HOP/', '/sh%6fp/', '//shop/', '/./shop/', '/static/../shop/',
    '/static/%2e%2e/shop/', '/x/..%2fshop/', '/shop//', '/shop/./']
  const shopTargets = new Set()
  while (shopTargets.size < Math.min(count, 150)) { // of 12 x 4 x 4 distinct
    shopTargets.add(pick(hosts) + pick(shops) + pick(['item', 'item?x=1', 'item#y', 'it%65m']))
  }
  return { vault: [...targets], shop: [...shopTargets] }
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?)\})? (-?[0-9.e+]+|\+Inf|-Inf|NaN)$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"/g

function unescape (v) {
  return v.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c))
}

/** `name` and its labels as one key: `name[["label","value"],...]`, labels sorted. */
function sampleKey (name, labels) {
  return `${name}${JSON.stringify(Object.entries(labels).sort())}`
}

function sampleOf (line) {
  const m = SAMPLE.exec(line)
  assert.ok(m, `not a sample line: ${JSON.stringify(line)}`)
  const labels = {}
  for (const [, k, v] of (m[2] || '').matchAll(LABEL)) labels[k] = unescape(v)
  return { name: m[1], labels, value: Number(m[3].replace('Inf', 'Infinity')) }
}

/**
 * OpenMetrics text, checked line by line: each family's TYPE and HELP (in either order)
 * before its samples, declared once, samples named after their family (a counter's with `_total`, a histogram's
 * with `_bucket`, `_count` or `_sum`), `# EOF` last. A map of `sampleKey` to value.
 */
function parseOpenMetrics (text) {
  const lines = text.split('\n')
  assert.deepEqual(lines.slice(-2), ['# EOF', ''], 'OpenMetrics text ends with # EOF')
  const suffixes = { gauge: [''], counter: ['_total'], histogram: ['_bucket', '_count', '_sum'] }
  const types = new Map()
  const out = new Map()
  let family = null
  const seen = new Set()
  for (const line of lines.slice(0, -2)) {
    if (line.startsWith('# TYPE ') || line.startsWith('# HELP ')) {
      // A family's metadata (TYPE and HELP, in either order) before its samples, once.
      const [, what, name, ...rest] = line.split(' ')
      if (name !== family) {
        assert.ok(!seen.has(name), `${name} declared twice`)
        seen.add(name)
        family = name
      }
      if (what === 'TYPE') {
        assert.ok(suffixes[rest[0]] && rest.length === 1, line)
        types.set(name, rest[0])
      }
    } else {
      const s = sampleOf(line)
      assert.ok(suffixes[types.get(family)].some((x) => s.name === family + x), `${line} outside ${family}`)
      const k = sampleKey(s.name, s.labels)
      assert.ok(!out.has(k), `sample twice: ${line}`)
      out.set(k, s.value)
    }
  }
  return out
}

/** Prometheus' text format (0.0.4): every sample line. A map of `sampleKey` to value. */
function parsePrometheusText (text) {
  const out = new Map()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const s = sampleOf(line)
    out.set(sampleKey(s.name, s.labels), s.value)
  }
  return out
}

module.exports = { Jar, get, rawGet, startServer, attackTargets, parseOpenMetrics, parsePrometheusText, sampleKey }
