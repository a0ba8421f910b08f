'use strict'
// `import { ... } from 'velvet-rope'`: Node finds a CommonJS module's export names by reading
// its source; every name index.d.ts declares must be importable by name from ES modules too.

const test = require('node:test')
const assert = require('node:assert')
const path = require('node:path')
const { pathToFileURL } = require('node:url')

test('every export can be imported by name from an ES module', async () => {
  const cjs = require('..')
  const esm = await import(pathToFileURL(path.join(__dirname, '..', 'index.js')).href)
  for (const name of Object.keys(cjs)) {
    assert.strictEqual(esm[name], cjs[name], `import { ${name} } from 'velvet-rope'`)
  }
  assert.strictEqual(esm.default, cjs)
  assert.ok(Object.keys(cjs).includes('express') && Object.keys(cjs).includes('fastify'))
})
