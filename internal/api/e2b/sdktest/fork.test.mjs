// Live fork through the SDK, unchanged: sandbox.fork({ count: 2 }) copies
// a running sandbox whose background server holds a secret only in its
// memory; the source runs on, each copy answers the secret, and each has
// a machine id, a host name and random bytes of its own
// (TestSDKsForkGVisor runs this on the gVisor driver).
import { writeFileSync } from 'node:fs'
import { Sandbox } from 'e2b'
import { assert, test, RUN } from './harness.mjs'

const fetchSecret = `python3 -c "
import urllib.request, time
for i in range(200):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8000', timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.05)
"`
const identity = `sh -c "cat /etc/machine-id; hostname; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo"`

test('fork: two running copies answer the secret, each with its own identity', async () => {
  const sb = await Sandbox.create({ metadata: { run: RUN, purpose: 'fork' } })
  const made = [sb]
  try {
    const server = `python3 -c "
import http.server, os
secret = os.urandom(8).hex()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(secret.encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
"`
    const h = await sb.commands.run(server, { background: true })
    const secret = (await sb.commands.run(fetchSecret)).stdout.trim()
    assert.equal(secret.length, 16)
    await h.disconnect()

    const t0 = Date.now()
    const forks = await sb.fork({ count: 2 })
    const forkMS = Date.now() - t0
    assert.equal(forks.length, 2)
    for (const f of forks) {
      assert.ok(f instanceof Sandbox, `a fork failed: ${f}`)
      made.push(f)
    }
    const seen = new Map()
    for (const s of made) {
      assert.equal((await s.commands.run(fetchSecret)).stdout.trim(), secret, `${s.sandboxId} answers the source's secret`)
      const id = (await s.commands.run(identity)).stdout.trim().split(/\s+/)
      assert.equal(id.length, 3, `identity of ${s.sandboxId}: ${id}`)
      for (const v of id) {
        assert.ok(!seen.has(v), `${s.sandboxId} and ${seen.get(v)} share ${v}`)
        seen.set(v, s.sandboxId)
      }
    }
    assert.equal(await sb.isRunning(), true, 'the source runs on')
    if (process.env.AIRLOCK_E2B_TIMES) writeFileSync(process.env.AIRLOCK_E2B_TIMES, `sandbox.fork({ count: 2 }) ${forkMS} ms`)
  } finally {
    for (const s of made) await Sandbox.kill(s.sandboxId)
  }
}, 240_000)
