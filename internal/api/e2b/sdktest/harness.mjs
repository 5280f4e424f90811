// A small test runner for the SDK tests: test files register tests with
// test(), run.mjs runs them one at a time (but those marked beside) and prints one JSON line per
// test ({"test", "ok", "ms", "error"}), which internal/api/e2b's TestSDKs
// reports as Go subtests.
import assert from 'node:assert/strict'

export { assert }

export const tests = []

// test registers fn under name; it fails past timeoutMs. With beside
// set, run.mjs starts it first and runs the others while it runs: for a
// test that mostly waits (a long command in its own sandbox) and asserts
// no duration of the others'.
export function test(name, fn, timeoutMs = 60_000, { beside = false } = {}) {
  tests.push({ name, fn, timeoutMs, beside })
}

// until polls cond every 50 ms until it is truthy, or fails after ms.
export async function until(what, cond, ms = 10_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

// rejects awaits p and returns what it threw; it fails when p resolves.
export async function rejects(p, what) {
  try {
    await p
  } catch (e) {
    return e
  }
  throw new Error(`${what}: expected an error, got none`)
}

// The run's own label, so that lists see only this run's sandboxes.
export const RUN = process.env.AIRLOCK_E2B_RUN || `run-${process.pid}`

// env returns a variable the Go test sets, or fails.
export function env(name) {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set: run this through go test ./internal/api/e2b`)
  return v
}
