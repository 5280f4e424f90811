// A real MCP client (the official TypeScript SDK) that drives airlock's MCP
// server, for the Go tests. Usage:
//
//	node client.mjs stdio <command> [args...]   # spawns the server
//	node client.mjs http <url>                  # AIRLOCK_API_KEY is sent as a bearer key
//
// It prints one JSON object with what it saw and exits 1 on any failure.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { out, fail, transport } from './transport.mjs'

const client = new Client({ name: 'airlock-test-ts', version: '0' })
try {
  await client.connect(transport())
  out.server = client.getServerVersion()
  const { tools } = await client.listTools()
  out.tools = tools.map((t) => t.name).sort()
  const runCode = tools.find((t) => t.name === 'run_code')
  out.run_code_annotations = runCode?.annotations
  out.read_file_annotations = tools.find((t) => t.name === 'read_file')?.annotations

  const r1 = await client.callTool({ name: 'run_code', arguments: { code: 'print(6*7)', language: 'python' } })
  out.run_code = { isError: !!r1.isError, structured: r1.structuredContent, text: r1.content?.[0]?.text }

  const w = await client.callTool({ name: 'write_file', arguments: { path: 'notes/hello.txt', content: 'one\ntwo\n' } })
  if (w.isError) fail('write_file: ' + JSON.stringify(w.content))
  const e = await client.callTool({ name: 'edit_file', arguments: { path: 'notes/hello.txt', old_string: 'two', new_string: 'three' } })
  if (e.isError) fail('edit_file: ' + JSON.stringify(e.content))
  const rf = await client.callTool({ name: 'read_file', arguments: { path: 'notes/hello.txt' } })
  out.read_file = rf.structuredContent

  const bad = await client.callTool({ name: 'run_command', arguments: { command: 'echo oops >&2; exit 3' } })
  out.run_command_fail = { isError: !!bad.isError, structured: bad.structuredContent }

  const missing = await client.callTool({ name: 'edit_file', arguments: { path: 'notes/hello.txt', old_string: 'absent', new_string: 'x' } })
  out.edit_missing = { isError: !!missing.isError, text: missing.content?.[0]?.text }
} catch (err) {
  fail(String(err?.stack || err))
} finally {
  await client.close().catch(() => {})
}
console.log(JSON.stringify(out))
