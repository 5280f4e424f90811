// What the test clients share: the transport their arguments name, and
// how they report. Usage of a client:
//
//	node CLIENT.mjs stdio <command> [args...]   # spawns the server
//	node CLIENT.mjs http <url>                  # AIRLOCK_API_KEY is sent as a bearer key
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

const [mode, target, ...rest] = process.argv.slice(2)

// out is what the client prints: one JSON object.
export const out = { mode }

// fail prints out with the error and exits 1.
export const fail = (msg) => { out.error = msg; console.log(JSON.stringify(out)); process.exit(1) }

// transport is the one the command line names.
export function transport() {
  if (mode === 'stdio') {
    return new StdioClientTransport({ command: target, args: rest, env: process.env, stderr: 'inherit' })
  }
  if (mode === 'http') {
    const headers = { Authorization: 'Bearer ' + (process.env.AIRLOCK_API_KEY || '') }
    return new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } })
  }
  fail('mode must be stdio or http')
}
