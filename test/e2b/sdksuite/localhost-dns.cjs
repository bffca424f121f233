// Test harness only: resolve NAME.localhost (and localhost:PORT-style sandbox
// hosts) to 127.0.0.1, as wildcard DNS for the sandbox domain would.
const dns = require('node:dns');
const orig = dns.lookup;
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') { cb = opts; opts = {}; }
  if (typeof host === 'string' && host.endsWith('.localhost')) {
    if (opts && opts.all) return process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }]);
    return process.nextTick(cb, null, '127.0.0.1', 4);
  }
  return orig.call(this, host, opts, cb);
};
