import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, TimeoutError } from 'e2b'
import { create, killAll, sleep, waitFor } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

test('foreground: stdout, stderr, exit code, envs, cwd, user', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  const failed = await sbx.commands.run('echo bad >&2; exit 3').catch((e) => e)
  assert.ok(failed instanceof CommandExitError)
  assert.equal(failed.exitCode, 3)
  assert.equal(failed.stderr, 'bad\n')
  assert.equal((await sbx.commands.run('echo $A-$B', { envs: { A: '1', B: 'two' } })).stdout, '1-two\n')
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  const missing = await sbx.commands.run('no-such-command-xyz').catch((e) => e)
  assert.ok(missing instanceof CommandExitError)
  assert.equal(missing.exitCode, 127)
})

test('streaming stdout and stderr arrive in order while the command runs', async () => {
  const seen = []
  const t0 = Date.now()
  let firstAt
  await sbx.commands.run('for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.2; done', {
    onStdout: (d) => { firstAt ??= Date.now(); seen.push(['out', d]) },
    onStderr: (d) => seen.push(['err', d]),
  })
  assert.deepEqual(seen.filter(([k]) => k === 'out').map(([, d]) => d).join(''), 'o1\no2\no3\n')
  assert.deepEqual(seen.filter(([k]) => k === 'err').map(([, d]) => d).join(''), 'e1\ne2\ne3\n')
  assert.ok(firstAt - t0 < 400, `first output after ${firstAt - t0} ms: not streamed`)
})

test('background, list, connect, kill', async () => {
  const h = await sbx.commands.run('echo started; sleep 60', { background: true })
  assert.ok(h.pid > 0)
  await waitFor(() => h.stdout.includes('started'))
  const procs = await sbx.commands.list()
  const p = procs.find((x) => x.pid === h.pid)
  assert.ok(p, 'listed')
  assert.equal(p.cmd, '/bin/bash')
  assert.deepEqual(p.args.slice(0, 2), ['-l', '-c'])
  // A second handle on the same process.
  const ticker = await sbx.commands.run('for i in $(seq 1 20); do echo t$i; sleep 0.1; done', { background: true })
  const chunks = []
  const c = await sbx.commands.connect(ticker.pid, { onStdout: (d) => chunks.push(d) })
  const res = await c.wait()
  assert.equal(res.exitCode, 0)
  assert.match(chunks.join(''), /t20\n$/)
  assert.equal(await sbx.commands.kill(h.pid), true)
  const killed = await h.wait().catch((e) => e)
  assert.ok(killed instanceof CommandExitError, 'wait on a killed command throws')
  assert.notEqual(killed.exitCode, 0)
  assert.equal(await sbx.commands.kill(h.pid), false)
  assert.ok(!(await sbx.commands.list()).some((x) => x.pid === h.pid))
})

test('stdin: send and close', async () => {
  const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
  await h.sendStdin('line one\n')
  await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('line two\n'))
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.stdout, 'line one\nline two\ndone\n')
})

test('command timeout ends the command', async () => {
  const t0 = Date.now()
  const err = await sbx.commands.run('sleep 30', { timeoutMs: 1000 }).catch((e) => e)
  assert.ok(err instanceof TimeoutError || err instanceof CommandExitError, String(err))
  assert.ok(Date.now() - t0 < 10_000)
  await sleep(200)
  assert.ok(!(await sbx.commands.list()).some((p) => p.args.join(' ').includes('sleep 30')))
})

test('large output streams whole', async () => {
  const r = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" a')
  assert.equal(r.stdout.length, 3_000_000)
})
