// E2B behaviours of the base template and the API that fit no other file:
// sudo as E2B's `user`, the debian image's `python` and `curl`,
// maskRequestHost, metrics as a series.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { create, killAll } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

test('user has passwordless sudo; root through sudo is sandbox root', async () => {
  assert.equal((await sbx.commands.run('id -u; sudo -n id -u')).stdout, '1000\n0\n')
  // what sudo gains is what user root has: the same capability sets
  const caps = 'grep -E "^(CapEff|CapBnd|Seccomp):" /proc/self/status'
  const viaSudo = (await sbx.commands.run(`sudo -n sh -c '${caps}'`)).stdout
  const asRoot = (await sbx.commands.run(caps, { user: 'root' })).stdout
  assert.equal(viaSudo, asRoot)
  assert.match(viaSudo, /Seccomp:\s+2/)
})

test('the base image has python (python3) and curl, as E2B host tests expect', async () => {
  const r = await sbx.commands.run('python -c "import sys; print(sys.version_info[0])"; curl --version | head -1')
  assert.match(r.stdout, /^3\ncurl \d/)
})
