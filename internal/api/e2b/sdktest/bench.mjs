// node bench.mjs N: what `airlock bench` times through the official SDKs
// (its e2b rows), against the daemon in E2B_API_URL. Prints one JSON
// object: milliseconds of N runs each of create + first commands.run, cold
// (template "base") and from a warm pool (template "pooled"; the pool is
// full before each run), and of runCode("1+1") in a warm context. Sandboxes
// are killed after each run, outside the timed part.
import { Sandbox } from '@e2b/code-interpreter'

const n = Number(process.argv[2] || 20)
const out = { cold: [], pool: [], runCode: [], errors: [] }
const api = process.env.E2B_API_URL

async function poolFull() {
  for (let i = 0; i < 600; i++) {
    const h = await (await fetch(`${api}/healthz`)).json()
    if (h.pools?.every((p) => p.ready === p.size)) return
    await new Promise((r) => setTimeout(r, 10))
  }
  throw new Error('the warm pool did not fill within 6 s')
}

async function createRun(template) {
  const t0 = performance.now()
  const sb = await Sandbox.create(template)
  const r = await sb.commands.run('true')
  const ms = performance.now() - t0
  await sb.kill()
  if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  return ms
}

for (const [key, template] of [['cold', 'base'], ['pool', 'pooled']]) {
  for (let i = 0; i < n + 2; i++) {
    try {
      if (key === 'pool') await poolFull()
      const ms = await createRun(template)
      if (i >= 2) out[key].push(ms) // two warm-ups
    } catch (e) {
      out.errors.push(`${key}: ${e.message}`)
    }
  }
}
try {
  const sb = await Sandbox.create('code-interpreter-v1')
  try {
    for (let i = 0; i < n + 3; i++) {
      const t0 = performance.now()
      const ex = await sb.runCode('1+1')
      const ms = performance.now() - t0
      if (ex.text !== '2') throw new Error(`1+1 gave ${ex.text} ${JSON.stringify(ex.error)}`)
      if (i >= 3) out.runCode.push(ms) // the first starts the kernel
    }
  } finally {
    await sb.kill()
  }
} catch (e) {
  out.errors.push(`runCode: ${e.message}`)
}
console.log(JSON.stringify(out))
process.exit(0)
