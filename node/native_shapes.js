'use strict'
/**
 * Native results as JavaScript uses them. The addon hands ordered name/value pairs as two
 * arrays (an object from Rust would lose their order: a sample's `room` label comes first).
 */

/** An object of `names[i]: values[i]`, in order. */
function objectOf (names, values) {
  const out = {}
  for (let i = 0; i < names.length; i++) out[names[i]] = values[i]
  return out
}

/** A native metric family: each sample's labels an object. */
function familyOf (f) {
  return {
    name: f.name,
    type: f.type,
    help: f.help,
    samples: f.samples.map((s) => ({ name: s.name, labels: objectOf(s.labelNames, s.labelValues), value: s.value }))
  }
}

/** A native event: its fields an object. */
function eventOf (e) {
  return { event: e.event, atMs: e.atMs, room: e.room ?? null, fields: objectOf(e.fieldNames, e.fieldValues), warning: e.warning, line: e.line }
}

module.exports = { familyOf, eventOf }
