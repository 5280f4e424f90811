// Pause and resume through the SDKs, unchanged: a kernel's variable and a
// background server's memory survive sandbox.pause() and Sandbox.connect
// (TestSDKsPauseGVisor runs this on the gVisor driver).
import { writeFileSync } from 'node:fs'
import { Sandbox } from '@e2b/code-interpreter'
import { Sandbox as BaseSandbox } from 'e2b'
import { assert, test, until, rejects, RUN } from './harness.mjs'

const fetchSecret = `python3 -c "
import urllib.request, time
for i in range(200):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8000', timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.05)
"`

test('pause: a kernel variable and a background server survive pause and connect', async () => {
  const sb = await Sandbox.create({ metadata: { run: RUN, purpose: 'pause' } })
  try {
    assert.equal((await sb.runCode('x = 41\nx')).text, '41')
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
    const before = (await sb.commands.run(fetchSecret)).stdout.trim()
    assert.equal(before.length, 16)
    await h.disconnect()

    let t0 = Date.now()
    assert.equal(await sb.pause(), true)
    const pauseMS = Date.now() - t0
    assert.equal(await sb.pause(), false, 'a second pause says it was paused already')
    const listed = await BaseSandbox.list({ query: { metadata: { run: RUN, purpose: 'pause' }, state: ['paused'] } }).nextItems()
    assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[sb.sandboxId, 'paused']])

    t0 = Date.now()
    const again = await Sandbox.connect(sb.sandboxId)
    const after = (await again.commands.run(fetchSecret)).stdout.trim()
    const resumeMS = Date.now() - t0
    assert.equal(after, before, 'the server answers with the secret it held in memory')
    assert.equal((await again.runCode('x + 1')).text, '42')
    const procs = await again.commands.list()
    assert.ok(procs.some((p) => p.pid === h.pid), `the background server is not listed after the resume: ${JSON.stringify(procs)}`)
    if (process.env.AIRLOCK_E2B_TIMES) writeFileSync(process.env.AIRLOCK_E2B_TIMES, `sandbox.pause() ${pauseMS} ms; Sandbox.connect to the server's answer ${resumeMS} ms`)
  } finally {
    await BaseSandbox.kill(sb.sandboxId)
  }
}, 240_000)

test('lifecycle: onTimeout pause pauses at the timeout; autoResume resumes on a command', async () => {
  const meta = { run: RUN, purpose: 'lifecycle' }
  const sb = await Sandbox.create({ timeoutMs: 5_000, lifecycle: { onTimeout: 'pause', autoResume: true }, metadata: meta })
  const plain = await BaseSandbox.create({ timeoutMs: 5_000, lifecycle: { onTimeout: 'pause' }, metadata: meta })
  try {
    const info = await sb.getInfo()
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
    assert.equal((await sb.runCode('y = 6 * 7\ny')).text, '42')
    await sb.files.write('/tmp/kept', 'on disk')
    const listed = await until('both sandboxes listed paused after their 5 s timeout', async () => {
      const l = await BaseSandbox.list({ query: { metadata: meta, state: ['paused'] } }).nextItems()
      return l.length === 2 && l
    }, 60_000)
    assert.deepEqual(listed.map((s) => s.state), ['paused', 'paused'])

    // autoResume: a command resumes it, its memory and files kept.
    const t0 = Date.now()
    const r = await sb.commands.run('cat /tmp/kept')
    const wakeMS = Date.now() - t0
    assert.equal(r.stdout, 'on disk')
    assert.equal((await sb.runCode('y + 1')).text, '43')
    assert.equal((await sb.getInfo()).state, 'running')

    // Without autoResume, a command is refused and connect resumes it.
    const err = await rejects(plain.commands.run('true'), 'a command in a paused sandbox without autoResume')
    assert.match(`${err.name} ${err.message}`, /paused|not running|timeout/i)
    assert.equal((await plain.getInfo()).state, 'paused')
    const again = await BaseSandbox.connect(plain.sandboxId)
    assert.equal((await again.commands.run('echo back')).stdout, 'back\n')
    if (process.env.AIRLOCK_E2B_TIMES) writeFileSync(process.env.AIRLOCK_E2B_TIMES, `\nautoResume: a command in a paused sandbox answered in ${wakeMS} ms`, { flag: 'a' })
  } finally {
    await BaseSandbox.kill(sb.sandboxId)
    await BaseSandbox.kill(plain.sandboxId)
  }
}, 240_000)
