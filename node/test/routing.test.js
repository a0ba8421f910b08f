'use strict'
/**
 * Which room decides a request: the shared table of request targets (a copy of
 * `core/tests/data/routing_vectors.json`), through the middleware's router, in process.
 */

const assert = require('node:assert/strict')
const path = require('node:path')
const { test } = require('node:test')

const { Engine, InvalidArgumentError } = require('..')
const { router } = require('../middleware.js')
const native = require('../binding.js')

const VECTORS = require(path.join(__dirname, 'data', 'routing_vectors.json'))

function engineWith (names) {
  return new Engine([...names].sort().map((n) =>
    `[[rooms]]\nname = "${n}"\ntotal_active_users = 1\nnew_users_per_minute = 1\n`).join(''))
}

test('every vector goes to its room', () => {
  const configs = VECTORS.configs
  const names = new Set()
  for (const c of Object.values(configs)) {
    for (const r of [...Object.values(c.rooms), c.default_room]) if (r) names.add(r)
  }
  const engine = engineWith(names)
  const routers = {}
  for (const [name, c] of Object.entries(configs)) {
    routers[name] = router(engine, {
      rooms: c.rooms, room: c.default_room ?? undefined, bypass: c.bypass, caseSensitive: c.case_sensitive
    })
  }
  const wrong = []
  for (const [config, target, want, why] of VECTORS.cases) {
    const room = routers[config](target)
    const got = room === null ? null : room.name
    if (got !== want) wrong.push(`${config} ${JSON.stringify(target)}: ${got}, want ${want} (${why})`)
  }
  assert.deepEqual(wrong, [])
  assert.ok(VECTORS.cases.length >= 90)
})

test('the native router refuses what cannot route, and reads any string', () => {
  for (const spec of [
    { rooms: [['shop', 'r']], bypass: [], caseSensitive: true },
    { rooms: [], defaultRoom: 'r', bypass: ['/a?b'], caseSensitive: true },
    { rooms: [['/a']], bypass: [], caseSensitive: true },
    { rooms: [], bypass: [], caseSensitive: true }
  ]) {
    assert.throws(() => {
      try { native.routerNew(spec) } catch (e) { throw require('../errors.js').convert(e) }
    }, InvalidArgumentError, JSON.stringify(spec))
  }
  assert.throws(() => router(engineWith(['r']), { room: 'r', bypass: ['static/'] }), InvalidArgumentError)
  const route = native.routerNew({ rooms: [['/shop', 'shop']], bypass: ['/static/'], caseSensitive: true })
  assert.deepEqual(route.rooms, ['shop'])
  assert.equal(route('/shop/x'), 0)
  assert.equal(route('/static/x'), -1)
  // A character above U+00FF is never read as its low byte (U+0173 would be `s`).
  assert.equal(route('/\u0173hop/x'), -1)
  assert.equal(route('/static/\u0173/../../shop'), 0)
  assert.equal(route('/shop/' + 'x'.repeat(100_000)), 0, 'long targets are read whole')
  assert.equal(route('/static/' + 'x'.repeat(100_000) + '/../../shop'), 0)
  assert.throws(() => route(42), (e) => e.code === 'ERR_VELVET_ROPE_INVALID_ARGUMENT')
})
