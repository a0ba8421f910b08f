'use strict'
/**
 * Run by `api.test.js` in a process of its own: worker threads that make many native handles
 * and end (by themselves, or terminated while running); then the main thread makes more.
 * Each worker makes 17,000 rate limiters and as many gauges, and some engines and
 * coordinators, and keeps them all to its end: four workers make 68,000 of each kind, more
 * than one handle table holds (65,536) if an ended worker's handles stayed behind. Prints
 * `ok`, or exits non-zero naming what failed.
 */

const path = require('node:path')
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads')

const pkg = path.resolve(__dirname, '..', '..')
const PER_WORKER = 17000
const ROOM = '[[rooms]]\nname = "r"\ntotal_active_users = 1\nnew_users_per_minute = 1\n'
const RESOURCE = '[[resources]]\nidentifier_glob = "*"\ncapacity = 1\n'

if (isMainThread) {
  ;(async () => {
    for (let i = 0; i < 4; i++) {
      const linger = i % 2 === 1
      const w = new Worker(__filename, { workerData: { linger } })
      const made = await new Promise((resolve) => {
        w.once('message', () => resolve(null))
        w.once('error', (e) => resolve(e))
      })
      if (made !== null) {
        console.error(`worker ${i}: ${made.message}`)
        process.exit(3)
      }
      if (linger) await w.terminate()
      else await new Promise((resolve) => w.once('exit', resolve))
    }
    const { RateLimiter, Gauge, Engine, Coordinator } = require(pkg)
    new RateLimiter(1) // eslint-disable-line no-new
    new Gauge(1) // eslint-disable-line no-new
    new Engine(ROOM) // eslint-disable-line no-new
    new Coordinator(RESOURCE) // eslint-disable-line no-new
    console.log('ok')
  })()
} else {
  const { RateLimiter, Gauge, Coordinator, Engine } = require(pkg)
  const kept = []
  for (let i = 0; i < PER_WORKER; i++) kept.push(new RateLimiter(10), new Gauge(1))
  for (let i = 0; i < 50; i++) kept.push(new Engine(ROOM).startTicking(), new Coordinator(RESOURCE))
  globalThis.kept = kept
  parentPort.postMessage('made')
  if (workerData.linger) setInterval(() => {}, 1000)
}
