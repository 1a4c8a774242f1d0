# A webhook receiver that verifies X-Service-Signature (Python 3, standard library).
import hashlib, hmac, os, time
from http.server import BaseHTTPRequestHandler, HTTPServer

SECRET = os.environ["WEBHOOK_SECRET"].encode()  # whsec_… as returned at create/rotate
TOLERANCE = 300  # seconds: refuse replays of old calls

def verify(header: str, body: bytes) -> bool:
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    t = next((v for k, v in parts if k == "t"), None)
    if t is None or abs(time.time() - int(t)) > TOLERANCE:
        return False
    expected = hmac.new(SECRET, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    # Two v1 values during a secret rotation: either may match.
    return any(k == "v1" and hmac.compare_digest(v, expected) for k, v in parts)

class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))  # the raw bytes, unparsed
        ok = verify(self.headers.get("X-Service-Signature", ""), body)
        print("verified" if ok else "REJECTED", self.headers.get("X-Service-Webhook-Id"), flush=True)
        self.send_response(200 if ok else 400)
        self.end_headers()

HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Hook).serve_forever()
