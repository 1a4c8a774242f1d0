// A webhook receiver that verifies X-Service-Signature (Node.js, no dependencies).
const crypto = require("crypto");
const http = require("http");
const secret = process.env.WEBHOOK_SECRET; // whsec_… as returned at create/rotate

function verify(header, body) {
  const parts = header.split(",").map((p) => p.split("="));
  const t = (parts.find(([k]) => k === "t") || [])[1];
  if (!t || Math.abs(Date.now() / 1000 - Number(t)) > 300) return false; // refuse replays
  const expected = crypto.createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex");
  // Two v1 values during a secret rotation: either may match.
  return parts.some(([k, v]) => k === "v1" && v.length === expected.length &&
    crypto.timingSafeEqual(Buffer.from(v), Buffer.from(expected)));
}

http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const ok = verify(req.headers["x-service-signature"] || "", Buffer.concat(chunks)); // raw bytes
    console.log(ok ? "verified" : "REJECTED", req.headers["x-service-webhook-id"]);
    res.writeHead(ok ? 200 : 400).end();
  });
}).listen(Number(process.env.PORT || 8001), "127.0.0.1");
