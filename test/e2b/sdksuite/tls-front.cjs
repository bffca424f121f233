// Test harness only: terminates TLS for the sandbox domain (as E2B's edge
// does) and passes the bytes to dsec's plain-HTTP listener.
//   node tls-front.cjs LISTEN_PORT DSEC_PORT KEY CERT
const tls = require('node:tls'), net = require('node:net'), fs = require('node:fs');
const [listen, upstream] = process.argv.slice(2, 4).map(Number);
const [key, cert] = process.argv.slice(4, 6);
tls.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (s) => {
  const u = net.connect(upstream, '127.0.0.1');
  s.pipe(u).pipe(s);
  s.on('error', () => u.destroy()); u.on('error', () => s.destroy());
}).listen(listen, '127.0.0.1');
