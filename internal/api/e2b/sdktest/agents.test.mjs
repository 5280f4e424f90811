// OpenAI's Agents SDK (@openai/agents-extensions) E2B sandbox client, as it
// is: create a session, run a command, write and read a file. No model is
// called.
import { E2BSandboxClient } from '@openai/agents-extensions/sandbox/e2b'
import { Manifest, file } from '@openai/agents/sandbox'
import { assert, test, RUN } from './harness.mjs'

test('openai agents: E2BSandboxClient', async () => {
  const client = new E2BSandboxClient({ template: 'base', metadata: { run: RUN, purpose: 'agents' } })
  const session = await client.create(new Manifest({ entries: { 'notes/hello.txt': file({ content: 'written by the manifest\n' }) } }))
  try {
    const out = await session.execCommand({ cmd: 'cat notes/hello.txt; pwd; id -u' })
    assert.match(out, /Process exited with code 0/)
    assert.match(out, /written by the manifest\n\/workspace\n1000\n/)
    const bytes = await session.readFile({ path: 'notes/hello.txt' })
    assert.equal(new TextDecoder().decode(bytes), 'written by the manifest\n')
    const failed = await session.execCommand({ cmd: 'exit 4' })
    assert.match(failed, /exited with code 4/)
  } finally {
    await session.close()
  }
}, 120_000)
