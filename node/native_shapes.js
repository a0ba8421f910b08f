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

/**
 * Emits each of `events` as `'event'` on `emitter`: a listener that throws becomes a process
 * warning (`VELVET_ROPE_EVENT_LISTENER`) and does not stop the next events (as with any
 * emitter, the listeners after it do not see that event).
 */
function emitEach (emitter, events) {
  for (const e of events) {
    try {
      emitter.emit('event', e)
    } catch (err) {
      process.emitWarning(`an 'event' listener threw: ${err && err.stack ? err.stack : err}`,
        { code: 'VELVET_ROPE_EVENT_LISTENER' })
    }
  }
}

module.exports = { familyOf, eventOf, emitEach }
