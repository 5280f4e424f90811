// node run.mjs FILE... runs the tests the files register (see harness.mjs).
import { tests } from './harness.mjs'
import { pathToFileURL } from 'node:url'
import { resolve } from 'node:path'

for (const f of process.argv.slice(2)) await import(pathToFileURL(resolve(f)).href)
const only = process.env.AIRLOCK_E2B_ONLY ? new RegExp(process.env.AIRLOCK_E2B_ONLY) : null
// run runs t and prints its line.
async function run(t) {
  const start = Date.now()
  let timer
  try {
    await Promise.race([
      t.fn(),
      new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timed out after ${t.timeoutMs} ms`)), t.timeoutMs) }),
    ])
    console.log(JSON.stringify({ test: t.name, ok: true, ms: Date.now() - start }))
  } catch (e) {
    const msg = `${e?.name ?? 'Error'}: ${e?.message ?? e}\n${(e?.stack ?? '').split('\n').slice(1, 6).join('\n')}`
    console.log(JSON.stringify({ test: t.name, ok: false, ms: Date.now() - start, error: msg }))
  } finally {
    clearTimeout(timer)
  }
}
const chosen = tests.filter((t) => !only || only.test(t.name))
// The tests marked beside start first and run while the others run one at
// a time.
const beside = chosen.filter((t) => t.beside).map(run)
for (const t of chosen.filter((t) => !t.beside)) await run(t)
await Promise.all(beside)
// Undici keeps idle connections open; leave at once.
process.exit(0)
