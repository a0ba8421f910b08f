'use strict'
/** What the server tests share: a cookie jar, `get`, and a test server's lifecycle. */

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

module.exports = { Jar, get, rawGet, startServer, attackTargets }
