// @e2b/code-interpreter's runCode and contexts against airlock, backed by
// a real Jupyter kernel in the sandbox.
import { Sandbox, NotFoundError, TimeoutError } from '@e2b/code-interpreter'
import { assert, test, rejects, RUN } from './harness.mjs'

let sb

test('runCode: create a code-interpreter sandbox', async () => {
  sb = await Sandbox.create({ metadata: { run: RUN, purpose: 'interpreter' } })
}, 120_000)

test('runCode: values and state across calls', async () => {
  const a = await sb.runCode('x = 41\nx + 1')
  assert.equal(a.text, '42')
  assert.equal(a.error, undefined)
  assert.equal(a.results.length, 1)
  assert.equal(a.results[0].isMainResult, true)
  assert.ok(Number.isInteger(a.executionCount) && a.executionCount >= 1)
  const b = await sb.runCode('x * 2')
  assert.equal(b.text, '82')
  assert.equal(b.executionCount, a.executionCount + 1)
  assert.equal((await sb.runCode('"a string"')).text, 'a string')
  assert.equal((await sb.runCode('None')).results.length, 0)
}, 120_000)

test('runCode: stdout, stderr and callbacks', async () => {
  const out = []
  const ex = await sb.runCode('import sys\nprint("to stdout")\nprint("to stderr", file=sys.stderr)', { onStdout: (m) => out.push(m.line) })
  assert.deepEqual(ex.logs.stdout, ['to stdout\n'])
  assert.deepEqual(ex.logs.stderr, ['to stderr\n'])
  assert.deepEqual(out, ['to stdout\n'])
})

test('runCode: errors', async () => {
  const ex = await sb.runCode('def f():\n    return 1/0\nf()')
  assert.equal(ex.error.name, 'ZeroDivisionError')
  assert.equal(ex.error.value, 'division by zero')
  assert.match(ex.error.traceback, /ZeroDivisionError/)
  // The kernel lives on, its state too.
  assert.equal((await sb.runCode('x')).text, '41')
  const syn = await sb.runCode('def (')
  assert.equal(syn.error.name, 'SyntaxError')
})

test('runCode: a cell the policy denies is an execution error', async () => {
  const ex = await sb.runCode("open('/etc/shadow').read()")
  assert.equal(ex.error.name, 'PolicyDenied')
  assert.match(ex.error.value, /^airlock: denied by policy \(check:credential_read\): /)
  assert.equal(ex.error.traceback, '')
  assert.equal((await sb.runCode('x')).text, '41')
})

test('runCode: a matplotlib figure comes back as PNG', async () => {
  const ex = await sb.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()')
  assert.equal(ex.error, undefined, JSON.stringify(ex.error))
  const png = ex.results.find((r) => r.png)
  assert.ok(png, `no PNG among ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
  const bytes = Buffer.from(png.png, 'base64')
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  assert.ok(bytes.length > 1000)
}, 120_000)

test('runCode: rich results (html, markdown, json, svg)', async () => {
  const ex = await sb.runCode([
    'from IPython.display import display, HTML, Markdown, JSON, SVG',
    'display(HTML("<b>bold</b>"))',
    'display(Markdown("# title"))',
    'display(JSON({"a": 1}))',
    'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>\'))',
    '42',
  ].join('\n'))
  assert.equal(ex.error, undefined, JSON.stringify(ex.error))
  const [html, md, json, svg, main] = ex.results
  assert.equal(html.html, '<b>bold</b>')
  assert.equal(html.isMainResult, false)
  assert.equal(md.markdown, '# title')
  assert.deepEqual(json.json, { a: 1 })
  assert.match(svg.svg, /<svg/)
  assert.equal(main.isMainResult, true)
  assert.equal(main.text, '42')
})

test('runCode: per-run environment variables', async () => {
  const ex = await sb.runCode('import os; os.environ["ONLY_NOW"]', { envs: { ONLY_NOW: 'yes' } })
  assert.equal(ex.text, 'yes')
  const after = await sb.runCode('import os; os.environ.get("ONLY_NOW", "gone")')
  assert.equal(after.text, 'gone')
})

test('runCode: a timeout interrupts the kernel, not the sandbox', async () => {
  await sb.runCode('kept = "still here"')
  const start = Date.now()
  const e = await rejects(sb.runCode('import time\ntime.sleep(30)', { timeoutMs: 1500 }), 'a run past its timeout')
  assert.ok(e instanceof TimeoutError, `want TimeoutError, got ${e.name}: ${e.message}`)
  // The next run starts at once and finds the state.
  const ex = await sb.runCode('kept')
  assert.equal(ex.text, 'still here')
  assert.ok(Date.now() - start < 10_000, `the interrupted run held the kernel for ${Date.now() - start} ms`)
}, 60_000)

test('runCode: a 12 s run without timeoutMs', async () => {
  // Longer than airlock's 10 s exec default: the template sets no
  // timeout, so the run's only limit is the SDK's.
  const ex = await sb.runCode('import time\ntime.sleep(12)\n"slept"')
  assert.equal(ex.error, undefined)
  assert.equal(ex.text, 'slept')
}, 60_000)

test('runCode: contexts', async () => {
  const ctx = await sb.createCodeContext({ cwd: '/tmp' })
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  assert.equal((await sb.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
  await sb.runCode('only_here = 1', { context: ctx })
  assert.equal((await sb.runCode('only_here', { context: ctx })).text, '1')
  assert.equal((await sb.runCode('only_here')).error.name, 'NameError')
  const listed = await sb.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id), JSON.stringify(listed))
  await sb.restartCodeContext(ctx)
  assert.equal((await sb.runCode('only_here', { context: ctx })).error.name, 'NameError')
  await sb.removeCodeContext(ctx)
  assert.ok(!(await sb.listCodeContexts()).some((c) => c.id === ctx.id))
  const e = await rejects(sb.runCode('1', { context: ctx }), 'a removed context')
  assert.ok(e instanceof NotFoundError, `want NotFoundError, got ${e.name}: ${e.message}`)
  const lang = await rejects(sb.runCode('1', { language: 'r' }), 'a language airlock does not run')
  assert.match(lang.message, /400/)
}, 120_000)

test('runCode: commands and files see the same sandbox', async () => {
  await sb.runCode('open("/workspace/from_kernel.txt", "w").write("kernel wrote this")')
  assert.equal(await sb.files.read('from_kernel.txt'), 'kernel wrote this')
  assert.equal((await sb.runCode('import os; os.getuid()')).text, '1000')
  // The kernel's processes are not the caller's commands.
  assert.ok(!(await sb.commands.list()).some((p) => p.args?.join(' ').includes('airlock-interpreter')))
})

test('runCode: kill the sandbox', async () => {
  assert.equal(await sb.kill(), true)
})
