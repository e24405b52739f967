// One gRPC call over Node's own http2 client (nghttp2): an HTTP/2 stack independent of
// grpcio's and of the picker's h2 server, for tests/router/test_router_h2grpc.py.
// Usage: node node_grpc_client.js URL PATH HEX_MESSAGES [first]
//   HEX_MESSAGES: comma-separated request messages (hex); "first": cancel after one reply.
// Prints one JSON line: HTTP status, grpc-status, grpc-message and the reply messages
// (hex when under 1 KiB, else their length and a byte sum).
'use strict';
const http2 = require('http2');

const [, , url, path, hexMessages, mode] = process.argv;
const session = http2.connect(url);
session.on('error', (err) => {
  console.log(JSON.stringify({ error: err.message }));
  process.exit(2);
});
const call = session.request({
  ':method': 'POST',
  ':path': path,
  'content-type': 'application/grpc',
  te: 'trailers',
  'user-agent': 'kvspread-test-node',
});
const chunks = [];
let headers = {};
let trailers = {};
let body = Buffer.alloc(0);

function messages(buf) {
  const out = [];
  let pos = 0;
  while (pos + 5 <= buf.length) {
    const n = buf.readUInt32BE(pos + 1);
    if (pos + 5 + n > buf.length) break;
    const msg = buf.subarray(pos + 5, pos + 5 + n);
    if (n < 1024) {
      out.push({ hex: msg.toString('hex') });
    } else {
      let sum = 0;
      for (const b of msg) sum += b;
      out.push({ len: n, sum });
    }
    pos += 5 + n;
  }
  return out;
}

function report() {
  body = Buffer.concat(chunks);
  console.log(JSON.stringify({
    status: headers[':status'],
    grpc_status: trailers['grpc-status'] ?? headers['grpc-status'],
    grpc_message: trailers['grpc-message'] ?? headers['grpc-message'],
    messages: messages(body),
  }));
  session.close();
}

call.on('response', (h) => { headers = h; });
call.on('trailers', (t) => { trailers = t; });
call.on('data', (chunk) => {
  chunks.push(chunk);
  if (mode === 'first' && messages(Buffer.concat(chunks)).length > 0) {
    call.close(http2.constants.NGHTTP2_CANCEL);
    report();
    process.exit(0);
  }
});
call.on('end', report);
for (const hex of hexMessages.split(',').filter(Boolean)) {
  const msg = Buffer.from(hex, 'hex');
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(msg.length, 1);
  call.write(Buffer.concat([prefix, msg]));
}
call.end();
