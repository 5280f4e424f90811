import requests
r = requests.get("https://api.example.com/items", timeout=5)
requests.post("http://localhost:8000/hook", json={"ok": True})
print(r.status_code)
