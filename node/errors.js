'use strict'
/**
 * Errors thrown by velvet-rope: `Error` subclasses with a stable `code`. Outcomes (admit,
 * queue, reject) are values, never errors; these are for misuse and bad input.
 */

class VelvetRopeError extends Error {
  constructor (message, code) {
    super(message)
    this.name = new.target.name
    this.code = code
  }
}
/** The configuration cannot be read, parsed or validated; the message names the field. */
class ConfigError extends VelvetRopeError {}
/** No room of that name in the running configuration. */
class UnknownRoomError extends VelvetRopeError {}
/** A state file (shared memory) cannot be opened or does not fit the configuration. */
class SharedMemoryError extends VelvetRopeError {}
/** A bad argument: a wrong type, or a value out of range. */
class InvalidArgumentError extends VelvetRopeError {}
/** A lease could not be granted, refreshed or enforced. */
class LeaseError extends VelvetRopeError {}
/** No resource template matches the resource. */
class UnknownResourceError extends LeaseError {}
/** More permits or units asked at once than can ever be given, or more released than held. */
class CapacityError extends LeaseError {}

const BY_CODE = {
  ERR_VELVET_ROPE_CONFIG: ConfigError,
  ERR_VELVET_ROPE_UNKNOWN_ROOM: UnknownRoomError,
  ERR_VELVET_ROPE_SHARED_MEMORY: SharedMemoryError,
  ERR_VELVET_ROPE_INVALID_ARGUMENT: InvalidArgumentError,
  ERR_VELVET_ROPE_LEASE: LeaseError,
  ERR_VELVET_ROPE_UNKNOWN_RESOURCE: UnknownResourceError,
  ERR_VELVET_ROPE_CAPACITY: CapacityError
}

/**
 * Codes napi-rs gives an argument of the wrong type (a number where a string goes, ...):
 * `InvalidArgumentError`s, as the module's own checks throw.
 */
const NAPI_TYPE_CODES = new Set([
  'InvalidArg', 'ObjectExpected', 'StringExpected', 'NameExpected', 'FunctionExpected',
  'NumberExpected', 'BooleanExpected', 'ArrayExpected', 'BigintExpected', 'DateExpected'
])

/** The typed error for an error the native module threw (others pass through unchanged). */
function convert (e) {
  const Class = e && BY_CODE[e.code]
  if (Class) return new Class(e.message, e.code)
  if (e && NAPI_TYPE_CODES.has(e.code)) {
    return new InvalidArgumentError(e.message, 'ERR_VELVET_ROPE_INVALID_ARGUMENT')
  }
  return e
}

module.exports = {
  VelvetRopeError,
  ConfigError,
  UnknownRoomError,
  SharedMemoryError,
  InvalidArgumentError,
  LeaseError,
  UnknownResourceError,
  CapacityError,
  convert
}
