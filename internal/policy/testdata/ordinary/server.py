import http.server, socketserver, socket, subprocess, sys

s = socket.socket()
s.connect(("localhost", 8080))
s.close()
subprocess.run([sys.executable, "-c", "print(1)"], check=True)
with socketserver.TCPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler) as srv:
    print(srv.server_address)
