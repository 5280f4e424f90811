// An MCP client (the official TypeScript SDK) that declares elicitation and
// answers airlock's approval forms as a person would, for the Go tests:
// a command with "approve-me" in it is approved, one with "deny-me" denied
// with a reason, one with "decline-me" declined. Usage as transport.mjs
// says. It prints one JSON object with what it saw and exits 1 on any failure.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { out, fail, transport } from './transport.mjs'

out.asked = []
const client = new Client({ name: 'airlock-test-elicit', version: '0' }, { capabilities: { elicitation: { form: {} } } })
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  const msg = req.params.message
  out.asked.push({ message: msg, properties: Object.keys(req.params.requestedSchema?.properties ?? {}) })
  if (msg.includes('approve-me')) return { action: 'accept', content: { approve: true, reason: 'looks fine' } }
  if (msg.includes('deny-me')) return { action: 'accept', content: { approve: false, reason: 'not this one' } }
  return { action: 'decline' }
})

const call = async (command) => {
  const r = await client.callTool({ name: 'run_command', arguments: { command } })
  return { isError: !!r.isError, stdout: r.structuredContent?.stdout, text: r.content?.map((c) => c.text).join('\n') }
}
try {
  await client.connect(transport())
  out.approved = await call('echo approve-me')
  out.denied = await call('echo deny-me')
  out.declined = await call('echo decline-me')
  out.plain = await call('echo no-question')
  await client.close()
} catch (e) {
  fail(String(e?.stack ?? e))
}
console.log(JSON.stringify(out))
