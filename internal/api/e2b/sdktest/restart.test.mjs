// An E2B sandbox outlives a restart of airlock serve: TestSDKsRestart runs
// this file twice, before the daemon is killed (AIRLOCK_E2B_PHASE=before)
// and against the next daemon on the same state directory (after); what
// the first run made is in the JSON file AIRLOCK_E2B_STATE.
import { readFileSync, writeFileSync } from 'node:fs'
import { Sandbox } from '@e2b/code-interpreter'
import { Sandbox as BaseSandbox } from 'e2b'
import { assert, test, until, env, RUN } from './harness.mjs'

const phase = env('AIRLOCK_E2B_PHASE')
const stateFile = env('AIRLOCK_E2B_STATE')

if (phase === 'before') {
  test('restart: before: a sandbox with a file, a background command, kernel state in two contexts', async () => {
    const sb = await Sandbox.create({ metadata: { run: RUN, purpose: 'restart' } })
    await sb.files.write('kept.txt', 'written before the restart')
    // A command that prints a line a second, with stdin open.
    const h = await sb.commands.run('i=0; while read -r line; do i=$((i+1)); echo "got $i: $line"; done; echo "stdin closed after $i"', { background: true, stdin: true })
    await h.sendStdin('one\n')
    await until('the first line', () => h.stdout.includes('got 1: one'))
    assert.equal((await sb.runCode('x = 41\nx')).text, '41')
    const ctx = await sb.createCodeContext({ cwd: '/tmp' })
    assert.equal((await sb.runCode('y = "in the other context"', { context: ctx })).error, undefined)
    writeFileSync(stateFile, JSON.stringify({ id: sb.sandboxId, pid: h.pid, ctx }))
    await h.disconnect()
  }, 180_000)
}

if (phase === 'after') {
  const before = () => JSON.parse(readFileSync(stateFile, 'utf8'))

  test('restart: after: the sandbox is listed and connects', async () => {
    const { id } = before()
    const paginator = BaseSandbox.list({ query: { metadata: { run: RUN, purpose: 'restart' } } })
    const listed = await paginator.nextItems()
    assert.deepEqual(listed.map((s) => s.sandboxId), [id])
    assert.equal(listed[0].state, 'running')
    const sb = await Sandbox.connect(id)
    assert.equal(await sb.isRunning(), true)
  })

  test('restart: after: files and new commands', async () => {
    const sb = await Sandbox.connect(before().id)
    assert.equal(await sb.files.read('kept.txt'), 'written before the restart')
    const r = await sb.commands.run('cat kept.txt; id -u')
    assert.equal(r.stdout, 'written before the restart1000\n')
  })

  test('restart: after: the background command runs on, its stdin open', async () => {
    const { id, pid } = before()
    const sb = await Sandbox.connect(id)
    const procs = await sb.commands.list()
    assert.ok(procs.some((p) => p.pid === pid), `commands.list does not show ${pid} after the restart: ${JSON.stringify(procs)}`)
    const h = await sb.commands.connect(pid)
    await sb.commands.sendStdin(pid, 'two\n')
    await until('the line sent after the restart', () => h.stdout.includes('got 2: two'))
    await sb.commands.closeStdin(pid)
    const res = await h.wait()
    assert.equal(res.exitCode, 0)
    assert.match(res.stdout, /stdin closed after 2\n$/)
  })

  test('restart: after: the kernels keep their state', async () => {
    const { id, ctx } = before()
    const sb = await Sandbox.connect(id)
    assert.equal((await sb.runCode('x + 1')).text, '42')
    const listed = await sb.listCodeContexts()
    assert.ok(listed.some((c) => c.id === ctx.id), `listCodeContexts after the restart: ${JSON.stringify(listed)}`)
    assert.equal((await sb.runCode('y', { context: ctx })).text, 'in the other context')
    assert.equal((await sb.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
  }, 120_000)

  test('restart: after: kill', async () => {
    const sb = await Sandbox.connect(before().id)
    assert.equal(await sb.kill(), true)
    assert.equal(await sb.isRunning(), false)
  })
}
