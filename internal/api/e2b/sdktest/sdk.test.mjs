// The official e2b SDK's documented flows against airlock: create with
// options, commands, files, lifecycle and PTY. Every sandbox is killed by
// the test that made it.
import { Sandbox, CommandExitError, SandboxNotFoundError, NotFoundError, AuthenticationError, TimeoutError, NotEnoughSpaceError } from 'e2b'
import { assert, test, until, rejects, RUN, env } from './harness.mjs'

// withSandbox runs fn with a new sandbox and kills it after.
async function withSandbox(opts, fn) {
  const sb = await Sandbox.create({ ...opts, metadata: { run: RUN, ...(opts?.metadata ?? {}) } })
  try {
    return await fn(sb)
  } finally {
    await sb.kill()
  }
}

test('create with options', async () => {
  const sb = await Sandbox.create('base', { timeoutMs: 120_000, metadata: { run: RUN, purpose: 'options' }, envs: { GREETING: 'hello from envs' } })
  try {
    assert.match(sb.sandboxId, /^sb-[0-9a-f]+$/)
    const r = await sb.commands.run('echo "$GREETING"')
    assert.equal(r.stdout, 'hello from envs\n')
    const info = await sb.getInfo()
    assert.equal(info.sandboxId, sb.sandboxId)
    assert.deepEqual(info.metadata, { run: RUN, purpose: 'options' })
    assert.equal(info.state, 'running')
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 100_000 && left <= 121_000, `the sandbox ends in ${left} ms, not about 120 s`)
    assert.equal(await sb.isRunning(), true)
  } finally {
    await sb.kill()
  }
})

test('a template with a warm pool', async () => {
  const sb = await Sandbox.create('pooled', { metadata: { run: RUN } })
  try {
    assert.equal((await sb.commands.run('echo from the pool')).stdout, 'from the pool\n')
    // The template gives its pooled sandboxes E2B's home, so this one is
    // claimed from the pool: its home is there too.
    assert.equal((await sb.commands.run('pwd; echo $HOME')).stdout, '/home/user\n/home/user\n')
    assert.deepEqual((await sb.getInfo()).metadata, { run: RUN })
  } finally {
    await sb.kill()
  }
})

test('unknown template', async () => {
  const e = await rejects(Sandbox.create('no-such-template'), 'create from an unknown template')
  assert.match(e.message, /404.*template 'no-such-template' not found/)
})

test('commands: foreground, cwd, envs, user', async () => {
  await withSandbox({}, async (sb) => {
    const r = await sb.commands.run('echo out; echo err >&2; pwd')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\n/home/user\n')
    assert.equal(r.stderr, 'err\n')
    assert.equal((await sb.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    assert.equal((await sb.commands.run('echo $A-$B', { envs: { A: '1', B: 'two' } })).stdout, '1-two\n')
    // Whatever user the caller names, nothing runs as root.
    assert.equal((await sb.commands.run('id -u', { user: 'root' })).stdout, '1000\n')
    assert.equal((await sb.commands.run('id -u', { user: 'user' })).stdout, '1000\n')
    const e = await rejects(sb.commands.run('pwd', { cwd: '/no/such/dir' }), 'a command in a missing cwd')
    assert.match(e.message, /not a directory/)
  })
})

test('home: /home/user is /workspace, the home and working directory', async () => {
  await withSandbox({}, async (sb) => {
    const r = await sb.commands.run('echo "$HOME $USER $PWD"; pwd; id -u; stat -c %u /home/user')
    assert.equal(r.stdout, '/home/user user /home/user\n/home/user\n1000\n1000\n')
    // Written under one name, read under the other: the same files.
    await sb.files.write('/home/user/data/x', 'written at /home/user')
    assert.equal(await sb.files.read('/workspace/data/x'), 'written at /home/user')
    assert.equal((await sb.commands.run('cat /workspace/data/x')).stdout, 'written at /home/user')
    await sb.commands.run('mkdir -p /workspace/data && printf from-workspace > /workspace/data/y')
    assert.equal(await sb.files.read('data/y'), 'from-workspace')
    assert.equal(await sb.files.read('/home/user/data/y'), 'from-workspace')
    assert.equal((await sb.commands.run('cat data/y')).stdout, 'from-workspace')
    // One tmpfs, one quota: the same size and use under both names.
    const df = await sb.commands.run('stat -f -c "%b %f" /home/user; stat -f -c "%b %f" /workspace')
    const [a, b] = df.stdout.trim().split('\n')
    assert.equal(a, b)
  })
})

test('commands: non-zero exit', async () => {
  await withSandbox({}, async (sb) => {
    const e = await rejects(sb.commands.run('echo partial; echo bad >&2; exit 3'), 'exit 3')
    assert.ok(e instanceof CommandExitError, `want CommandExitError, got ${e.name}`)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stdout, 'partial\n')
    assert.equal(e.stderr, 'bad\n')
    assert.match(e.error, /exit status 3/)
  })
})

test('commands: a command the policy denies is a failed command', async () => {
  await withSandbox({}, async (sb) => {
    // The built-in check on credential paths denies it: the SDK sees a
    // command that failed (exit 126, the rule and reason on stderr), which
    // the model can read, not a SandboxError.
    const e = await rejects(sb.commands.run('cat /etc/shadow'), 'a denied command')
    assert.ok(e instanceof CommandExitError, `want CommandExitError, got ${e.name}: ${e.message}`)
    assert.equal(e.exitCode, 126)
    assert.match(e.stderr, /^airlock: denied by policy \(check:credential_read\): /)
    assert.equal((await sb.commands.run('echo still fine')).stdout, 'still fine\n')
  })
})

test('commands: streaming callbacks', async () => {
  await withSandbox({}, async (sb) => {
    const got = []
    const errs = []
    const r = await sb.commands.run('for i in 1 2 3; do echo $i; echo e$i >&2; sleep 0.3; done', {
      onStdout: (d) => got.push([Date.now(), d]),
      onStderr: (d) => errs.push(d),
    })
    assert.equal(r.stdout, '1\n2\n3\n')
    assert.equal(got.map(([, d]) => d).join(''), '1\n2\n3\n')
    assert.equal(errs.join(''), 'e1\ne2\ne3\n')
    // The output came as it was printed, not all at the end.
    assert.ok(got.length >= 2 && got[got.length - 1][0] - got[0][0] >= 300, `output arrived at once: ${JSON.stringify(got)}`)
  })
})

test('commands: background, list, kill, servers live on', async () => {
  await withSandbox({}, async (sb) => {
    const h = await sb.commands.run('sleep 60', { background: true })
    assert.ok(h.pid > 0)
    let procs = await sb.commands.list()
    const p = procs.find((x) => x.pid === h.pid)
    assert.ok(p, `commands.list does not show ${h.pid}: ${JSON.stringify(procs)}`)
    assert.equal(p.cmd, '/bin/bash')
    assert.deepEqual(p.args, ['-l', '-c', 'sleep 60'])
    assert.equal(await h.kill(), true)
    const e = await rejects(h.wait(), 'a killed command')
    assert.ok(e instanceof CommandExitError, `want CommandExitError, got ${e.name}: ${e.message}`)
    assert.equal(e.exitCode, -1)
    procs = await sb.commands.list()
    assert.ok(!procs.some((x) => x.pid === h.pid), 'a killed command is still listed')
    assert.equal(await sb.commands.kill(h.pid), false)
    // What a command starts in the background lives on after it.
    await sb.commands.run('python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &')
    const r = await sb.commands.run(`python3 -c 'import time, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8765/").status); break
    except OSError: time.sleep(0.05)'`)
    assert.equal(r.stdout, '200\n')
  })
})

test('commands: stdin', async () => {
  await withSandbox({}, async (sb) => {
    const h = await sb.commands.run('cat; echo done', { background: true, stdin: true })
    await h.sendStdin('line one\n')
    await sb.commands.sendStdin(h.pid, 'line two\n')
    await h.closeStdin()
    const r = await h.wait()
    assert.equal(r.stdout, 'line one\nline two\ndone\n')
  })
})

test('commands: timeout', async () => {
  await withSandbox({}, async (sb) => {
    const start = Date.now()
    const e = await rejects(sb.commands.run('sleep 30', { timeoutMs: 1000 }), 'a command past its timeout')
    assert.ok(e instanceof TimeoutError || e instanceof CommandExitError, `want a timeout, got ${e.name}: ${e.message}`)
    assert.ok(Date.now() - start < 10_000, 'the timeout did not end the command')
    await until('the timed-out command to be gone', async () => !(await sb.commands.list()).some((p) => p.args?.includes('sleep 30')))
  })
})

test('commands: a 30 s command without timeoutMs', async () => {
  // E2B's default command timeout is 60 s; the template sets none, so
  // airlock's 10 s exec default does not cut it. It waits in its own
  // sandbox, beside the other tests.
  await withSandbox({}, async (sb) => {
    const r = await sb.commands.run('sleep 30; echo done')
    assert.equal(r.stdout, 'done\n')
  })
}, 90_000, { beside: true })

test('commands: connect to a running command', async () => {
  await withSandbox({}, async (sb) => {
    const h = await sb.commands.run('sleep 0.5; for i in 1 2 3; do echo tick $i; sleep 0.2; done', { background: true })
    await h.disconnect()
    const seen = []
    const h2 = await sb.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
    const r = await h2.wait()
    assert.equal(r.exitCode, 0)
    assert.match(seen.join(''), /tick 3/)
  })
})

test('network: allowOut reaches that address and no other', async () => {
  const allowed = process.env.AIRLOCK_ALLOWED_ADDR
  const blocked = process.env.AIRLOCK_BLOCKED_ADDR
  assert.ok(allowed && blocked, 'the Go test gives the loopback servers')
  const get = (addr) => `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://${addr}/", timeout=10).read().decode())'`
  const sb = await Sandbox.create('egress', { network: { allowOut: [allowed], denyOut: ['0.0.0.0/0'] }, metadata: { run: RUN } })
  try {
    assert.equal((await sb.commands.run(get(allowed))).stdout, 'allowed\n')
    const e = await rejects(sb.commands.run(get(blocked)), 'a request to an address allowOut does not name')
    assert.ok(e instanceof CommandExitError, `want CommandExitError, got ${e.name}: ${e.message}`)
    assert.doesNotMatch(e.stdout, /blocked/)
  } finally {
    await sb.kill()
  }
  // An address the template does not allow is refused at create, named.
  const e = await rejects(Sandbox.create('egress', { network: { allowOut: [blocked] }, metadata: { run: RUN } }), 'allowOut beyond the template')
  assert.match(e.message, new RegExp(`allow address "${blocked.replace(/\./g, '\\.')}".*does not allow it`))
}, 90_000)

test('network: updateNetwork changes egress within the template', async () => {
  const allowed = process.env.AIRLOCK_ALLOWED_ADDR
  const blocked = process.env.AIRLOCK_BLOCKED_ADDR
  const get = (addr) => `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://${addr}/", timeout=10).read().decode())'`
  const sb = await Sandbox.create('egress', { metadata: { run: RUN } })
  try {
    assert.equal((await sb.commands.run(get(allowed))).stdout, 'allowed\n')
    await sb.updateNetwork({ allowInternetAccess: false })
    const e = await rejects(sb.commands.run(get(allowed)), 'a request after allowInternetAccess: false')
    assert.ok(e instanceof CommandExitError, `want CommandExitError, got ${e.name}: ${e.message}`)
    await sb.updateNetwork({ allowOut: [allowed], denyOut: ['0.0.0.0/0'] })
    assert.equal((await sb.commands.run(get(allowed))).stdout, 'allowed\n')
    // Beyond the template: refused, named, and the rules stay as they were.
    const wide = await rejects(sb.updateNetwork({ allowOut: [blocked] }), 'updateNetwork beyond the template')
    assert.match(wide.message, new RegExp(`allow address "${blocked.replace(/\./g, '\\.')}".*does not allow it`))
    assert.equal((await sb.commands.run(get(allowed))).stdout, 'allowed\n')
  } finally {
    await sb.kill()
  }
  // A sandbox made without network has no tunnel to gain it through.
  const none = await Sandbox.create('egress', { allowInternetAccess: false, metadata: { run: RUN } })
  try {
    const e = await rejects(none.updateNetwork({ allowOut: [allowed] }), 'updateNetwork of a sandbox without network')
    assert.match(e.message, /made without network/)
  } finally {
    await none.kill()
  }
}, 90_000)

test('files: text and binary', async () => {
  await withSandbox({}, async (sb) => {
    const info = await sb.files.write('notes/hello.txt', 'hello, files')
    assert.equal(info.path, '/home/user/notes/hello.txt')
    assert.equal(await sb.files.read('notes/hello.txt'), 'hello, files')
    assert.equal(await sb.files.read('/workspace/notes/hello.txt'), 'hello, files')
    const bytes = new Uint8Array(256 * 4)
    for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256
    await sb.files.write('bin.dat', bytes)
    assert.deepEqual(await sb.files.read('bin.dat', { format: 'bytes' }), bytes)
    // Empty files, several at once, gzip both ways.
    await sb.files.write('empty.txt', '')
    assert.equal(await sb.files.read('empty.txt'), '')
    const many = await sb.files.write([{ path: '/home/user/m/a.txt', data: 'A' }, { path: '/workspace/m/b.txt', data: 'B' }])
    assert.deepEqual(many.map((f) => f.path).sort(), ['/home/user/m/a.txt', '/workspace/m/b.txt'])
    await sb.files.write('gz.txt', 'x'.repeat(100_000), { gzip: true })
    assert.equal(await sb.files.read('gz.txt', { gzip: true }), 'x'.repeat(100_000))
    const st = await sb.files.getInfo('bin.dat')
    assert.equal(st.type, 'file')
    assert.equal(st.size, 1024)
    assert.equal(st.name, 'bin.dat')
    assert.ok(st.modifiedTime instanceof Date && Math.abs(st.modifiedTime - Date.now()) < 60_000)
    // What a command wrote, the file API reads, and back.
    await sb.commands.run('printf from-a-command > cmd.txt')
    assert.equal(await sb.files.read('cmd.txt'), 'from-a-command')
    assert.equal((await sb.commands.run('cat notes/hello.txt')).stdout, 'hello, files')
  })
})

test('files: list, exists, makeDir, rename, remove', async () => {
  await withSandbox({}, async (sb) => {
    assert.equal(await sb.files.makeDir('d/e'), true)
    assert.equal(await sb.files.makeDir('d/e'), false)
    await sb.files.write('d/e/f.txt', 'f')
    await sb.files.write('d/top.txt', 't')
    const one = await sb.files.list('d')
    assert.deepEqual(one.map((e) => `${e.name}:${e.type}`).sort(), ['e:dir', 'top.txt:file'])
    const two = await sb.files.list('d', { depth: 2 })
    assert.deepEqual(two.map((e) => e.path).sort(), ['/home/user/d/e', '/home/user/d/e/f.txt', '/home/user/d/top.txt'])
    assert.equal(await sb.files.exists('d/e/f.txt'), true)
    assert.equal(await sb.files.exists('d/nope'), false)
    const moved = await sb.files.rename('d/e/f.txt', 'd/g.txt')
    assert.equal(moved.path, '/home/user/d/g.txt')
    assert.equal(await sb.files.exists('d/e/f.txt'), false)
    assert.equal(await sb.files.read('d/g.txt'), 'f')
    await sb.files.remove('d')
    assert.equal(await sb.files.exists('d'), false)
    const e = await rejects(sb.files.read('d/g.txt'), 'reading a removed file')
    assert.ok(e instanceof NotFoundError, `want NotFoundError (FileNotFoundError), got ${e.name}: ${e.message}`)
    const out = await rejects(sb.files.read('../../etc/shadow'), 'reading outside the sandbox')
    assert.match(out.message, /not allowed|outside/)
  })
})

test('files: watch a directory', async () => {
  await withSandbox({}, async (sb) => {
    await sb.files.makeDir('w')
    const events = []
    const handle = await sb.files.watchDir('w', (ev) => events.push(`${ev.type} ${ev.name}`), { recursive: true })
    try {
      await sb.files.write('w/a.txt', 'a')
      await sb.files.makeDir('w/sub')
      await sb.commands.run('echo b > w/sub/b.txt')
      await until('create events', () => events.includes('create a.txt') && events.includes('create sub') && events.includes('create sub/b.txt'))
      await sb.files.write('w/a.txt', 'longer now')
      await until('a write event', () => events.includes('write a.txt'))
      await sb.files.remove('w/a.txt')
      await until('a remove event', () => events.includes('remove a.txt'))
    } finally {
      await handle.stop()
    }
  })
})

test('files: signed upload and download URLs', async () => {
  await withSandbox({}, async (sb) => {
    const up = await sb.uploadUrl('signed.txt')
    assert.match(up, /signature=v1_/)
    const form = new FormData()
    form.append('file', new Blob(['signed content']), 'signed.txt')
    const res = await fetch(up, { method: 'POST', body: form, headers: { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '49983' } })
    assert.equal(res.status, 200, await res.clone().text())
    const down = await sb.downloadUrl('signed.txt')
    const got = await fetch(down, { headers: { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '49983' } })
    assert.equal(await got.text(), 'signed content')
    // A signature is for its path and operation only.
    const other = down.replace('signed.txt', 'other.txt')
    const bad = await fetch(other, { headers: { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '49983' } })
    assert.equal(bad.status, 401)
  })
})

test('lifecycle: list by metadata, paging, connect, timeout, kill', async () => {
  const group = `g-${Date.now()}`
  const a = await Sandbox.create({ metadata: { run: RUN, group, name: 'a b&c=d' } })
  const b = await Sandbox.create({ metadata: { run: RUN, group } })
  try {
    const all = await Sandbox.list({ query: { metadata: { run: RUN, group } } }).nextItems()
    assert.deepEqual(all.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
    // Metadata values with characters URLs encode.
    const exact = await Sandbox.list({ query: { metadata: { group, name: 'a b&c=d' } } }).nextItems()
    assert.deepEqual(exact.map((s) => s.sandboxId), [a.sandboxId])
    assert.equal(exact[0].state, 'running')
    const pages = Sandbox.list({ query: { metadata: { run: RUN, group } }, limit: 1 })
    const p1 = await pages.nextItems()
    assert.equal(p1.length, 1)
    assert.equal(pages.hasNext, true)
    const p2 = await pages.nextItems()
    assert.equal(p2.length, 1)
    assert.notEqual(p1[0].sandboxId, p2[0].sandboxId)
    assert.equal(pages.hasNext, false)
    // A second client connects by id and works on the same sandbox.
    await a.files.write('shared.txt', 'from the first client')
    const again = await Sandbox.connect(a.sandboxId)
    assert.equal(await again.files.read('shared.txt'), 'from the first client')
    assert.equal((await again.commands.run('cat shared.txt')).stdout, 'from the first client')
    await again.setTimeout(200_000)
    const left = (await a.getInfo()).endAt.getTime() - Date.now()
    assert.ok(left > 150_000, `setTimeout did not extend the sandbox: ${left} ms left`)
    assert.equal(await again.kill(), true)
    assert.equal(await a.isRunning(), false)
    assert.equal(await Sandbox.kill(a.sandboxId), false)
    const e = await rejects(Sandbox.connect(a.sandboxId), 'connecting to a killed sandbox')
    assert.ok(e instanceof SandboxNotFoundError, `want SandboxNotFoundError, got ${e.name}: ${e.message}`)
    const after = await Sandbox.list({ query: { metadata: { run: RUN, group } } }).nextItems()
    assert.deepEqual(after.map((s) => s.sandboxId), [b.sandboxId])
  } finally {
    await a.kill()
    await b.kill()
  }
})

test('lifecycle: the timeout ends the sandbox', async () => {
  const sb = await Sandbox.create({ timeoutMs: 2000, metadata: { run: RUN } })
  assert.equal(await sb.isRunning(), true)
  await until('the sandbox to end at its timeout', async () => !(await sb.isRunning()), 15_000)
  assert.equal(await sb.kill(), false)
})

test('metrics', async () => {
  await withSandbox({}, async (sb) => {
    const m = await sb.getMetrics()
    assert.equal(m.length, 1)
    assert.ok(m[0].memTotal > 0 && m[0].cpuCount >= 1, JSON.stringify(m))
  })
})

test('pty: a shell on a terminal', async () => {
  await withSandbox({}, async (sb) => {
    let out = ''
    const dec = new TextDecoder()
    const term = await sb.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
    assert.ok(term.pid > 0)
    await sb.pty.sendInput(term.pid, new TextEncoder().encode('echo $((6*7)); tty\n'))
    await until('the shell to answer', () => /\b42\b/.test(out) && out.includes('/dev/pts/'))
    await sb.pty.resize(term.pid, { cols: 100, rows: 30 })
    await sb.pty.sendInput(term.pid, new TextEncoder().encode('stty size; id -u\n'))
    // The new size, and the shell's user: not root.
    await until('the new size and the uid', () => out.includes('30 100') && /\b1000\b/.test(out.slice(out.indexOf('30 100'))))
    assert.equal(await sb.pty.kill(term.pid), true)
    const e = await rejects(term.wait(), 'a killed terminal')
    assert.equal(e.exitCode, -1)
  })
})

test('bad input: keys, tokens, other keys, unknown sandboxes, oversized upload', async () => {
  const url = env('E2B_SANDBOX_URL')
  const e1 = await rejects(Sandbox.create({ apiKey: 'e2b_0000000000000000', metadata: { run: RUN } }), 'a wrong key')
  assert.ok(e1 instanceof AuthenticationError, `want AuthenticationError, got ${e1.name}: ${e1.message}`)
  const other = env('AIRLOCK_OTHER_KEY')
  await withSandbox({}, async (sb) => {
    // Another key's sandbox does not exist, to that key.
    const e2 = await rejects(Sandbox.connect(sb.sandboxId, { apiKey: other }), "another key's sandbox")
    assert.ok(e2 instanceof SandboxNotFoundError, `want SandboxNotFoundError, got ${e2.name}: ${e2.message}`)
    assert.equal(await Sandbox.kill(sb.sandboxId, { apiKey: other }), false)
    assert.equal(await sb.isRunning(), true)
    // envd without the sandbox's token, or with another's.
    for (const tok of [undefined, 'wrong', '']) {
      const headers = { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '49983' }
      if (tok !== undefined) headers['X-Access-Token'] = tok
      const res = await fetch(`${url}/process.Process/List`, { method: 'POST', headers, body: '{}' })
      assert.equal(res.status, 401)
      const body = await res.json()
      assert.equal(body.code, 401)
      assert.match(body.message, /access token/)
    }
    // An upload past the sandbox's disk.
    const big = new Uint8Array(Number(env('AIRLOCK_DISK_BYTES')) + (1 << 20))
    const e3 = await rejects(sb.files.write('big.bin', big), 'an upload larger than the disk')
    assert.ok(e3 instanceof NotEnoughSpaceError, `want NotEnoughSpaceError, got ${e3.name}: ${e3.message}`)
    assert.equal(await sb.files.exists('big.bin'), false)
    assert.equal((await sb.commands.run('echo still fine')).stdout, 'still fine\n')
  })
  // Without a token, a sandbox that does not exist answers as a live one
  // does: nothing tells ids apart (security review 2, N8).
  const res = await fetch(`${url}/health`, { headers: { 'E2b-Sandbox-Id': 'sb-000000000000', 'E2b-Sandbox-Port': '49983' } })
  assert.equal(res.status, 401)
  assert.equal((await res.json()).code, 401)
  const e4 = await rejects(Sandbox.connect('sb-000000000000'), 'an unknown sandbox')
  assert.ok(e4 instanceof SandboxNotFoundError, `want SandboxNotFoundError, got ${e4.name}`)
})
