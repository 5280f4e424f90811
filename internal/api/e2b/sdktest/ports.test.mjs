// Exposed ports through the official e2b SDK: sandbox.getHost(port) names
// PORT-ID.DOMAIN, DOMAIN being what the daemon's create answered
// (sandbox.localhost and its port). The test resolves every name to the
// loopback, as curl and browsers do for *.localhost and as a wildcard DNS
// record would for a real domain.
import http from 'node:http'
import { Sandbox } from 'e2b'
import WebSocket from 'ws'
import { assert, test, until, RUN } from './harness.mjs'

// loopback is a lookup that answers 127.0.0.1 for every name.
function loopback(_host, opts, cb) {
  if (opts?.all) cb(null, [{ address: '127.0.0.1', family: 4 }])
  else cb(null, '127.0.0.1', 4)
}

// get fetches url and returns its status and body.
function get(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, lookup: loopback, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
  })
}

// serve writes a page and starts python3 -m http.server on 8000.
async function serve(sb) {
  await sb.files.write('/tmp/site/hello.txt', 'hello through getHost\n')
  await sb.commands.run('python3 -m http.server 8000 --directory /tmp/site', { background: true })
}

// A WebSocket echo server on 8765 (Python's standard library only).
const wsEcho = `
import base64, hashlib, socket, threading
def ws(c):
    d = b""
    while b"\\r\\n\\r\\n" not in d:
        d += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in d.split(b"\\r\\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: " + acc + b"\\r\\n\\r\\n")
    f = c.makefile("rb")
    while True:
        h = f.read(2)
        if len(h) < 2:
            break
        n = h[1] & 127
        m = f.read(4) if h[1] & 128 else b"\\0\\0\\0\\0"
        p = bytes(x ^ m[i % 4] for i, x in enumerate(f.read(n)))
        if h[0] & 15 == 8:
            c.sendall(b"\\x88\\x00")
            break
        r = b"echo: " + p
        c.sendall(bytes([0x81, len(r)]) + r)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8765))
s.listen()
while True:
    c, _ = s.accept()
    threading.Thread(target=ws, args=(c,), daemon=True).start()
`

test('ports: getHost serves a python http.server, a WebSocket, and a closed port 502', async () => {
  const sb = await Sandbox.create({ metadata: { run: RUN } })
  try {
    await serve(sb)
    const host = sb.getHost(8000)
    assert.match(host, new RegExp(`^8000-${sb.sandboxId}\\.sandbox\\.localhost:\\d+$`))
    const r = await until('the server in the sandbox', async () => {
      const r = await get(`http://${host}/hello.txt`)
      return r.status === 200 ? r : null
    }, 20_000)
    assert.equal(r.body, 'hello through getHost\n')

    await sb.files.write('/tmp/ws.py', wsEcho)
    await sb.commands.run('python3 /tmp/ws.py', { background: true })
    const msg = await until('the WebSocket echo', async () => {
      try {
        return await new Promise((resolve, reject) => {
          const ws = new WebSocket(`ws://${sb.getHost(8765)}/`, { lookup: loopback })
          ws.on('open', () => ws.send('hi from node'))
          ws.on('message', (d) => { resolve(d.toString()); ws.close() })
          ws.on('error', reject)
          ws.on('unexpected-response', (_req, res) => reject(new Error(`status ${res.statusCode}`)))
        })
      } catch {
        return null
      }
    }, 20_000)
    assert.equal(msg, 'echo: hi from node')

    const closed = await get(`http://${sb.getHost(9)}/`)
    assert.equal(closed.status, 502)
    assert.match(closed.body, /no process listens on port 9 in sandbox/)
  } finally {
    await sb.kill()
  }
})

test('ports: allowPublicTraffic false takes the traffic token', async () => {
  const sb = await Sandbox.create({ metadata: { run: RUN }, network: { allowPublicTraffic: false } })
  try {
    assert.ok(sb.trafficAccessToken, 'the create answered no trafficAccessToken')
    await serve(sb)
    const url = `http://${sb.getHost(8000)}/hello.txt`
    const ok = await until('the server in the sandbox', async () => {
      const r = await get(url, { 'e2b-traffic-access-token': sb.trafficAccessToken })
      return r.status === 200 ? r : null
    }, 20_000)
    assert.equal(ok.body, 'hello through getHost\n')
    const denied = await get(url)
    assert.equal(denied.status, 403)
    assert.match(denied.body, /traffic access token/)
  } finally {
    await sb.kill()
  }
})
