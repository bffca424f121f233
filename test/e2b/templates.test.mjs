// Template builds through the unmodified e2b SDK (Template().fromTemplate(...)
// ... Template.build): the steps become a dsec Dockerfile build, the template is
// a dsec environment named by its alias, and Sandbox.create(alias) runs its
// start command.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Template, BuildError, waitForFile } from 'e2b'
import { create, killAll, runId } from './helpers.mjs'

const ctxDir = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-tpl-'))
fs.writeFileSync(path.join(ctxDir, 'hello.txt'), 'hello from the template\n')
fs.mkdirSync(path.join(ctxDir, 'app'))
fs.writeFileSync(path.join(ctxDir, 'app', 'run.sh'), '#!/bin/sh\necho "started in $(pwd)" > /tmp/started\nexec sleep 600\n')
const alias = `tpl-${process.pid}-${Date.now() % 100000}`

// The templates stay in the server's data directory, which run.sh removes.
after(async () => {
  await killAll()
  fs.rmSync(ctxDir, { recursive: true, force: true })
})

test('build a template from a local base: runCmd, copy, setEnvs, setWorkdir, start and ready commands', async () => {
  const tpl = Template({ fileContextPath: ctxDir })
    .fromTemplate('debian')
    .runCmd('mkdir -p /opt/tpl && echo built-by-run > /opt/tpl/run.txt')
    .copy('hello.txt', '/opt/tpl/hello.txt')
    .copy('app', '/opt/app', { mode: 0o755 })
    .setEnvs({ TPL_GREETING: 'hi "there" $HOME', TPL_RUN: runId })
    .setWorkdir('/opt/tpl')
    .setStartCmd('/opt/app/run.sh', waitForFile('/tmp/started'))
  const logs = []
  const info = await Template.build(tpl, alias, { onBuildLogs: (l) => logs.push(String(l)) })
  assert.equal(info.templateId, alias)
  assert.ok(logs.some((l) => l.includes('runCmd')), logs.join('\n'))
  assert.equal(await Template.exists(alias), true)

  const sbx = await create({ template: alias })
  const run = async (c) => (await sbx.commands.run(c, { user: 'root' })).stdout
  assert.equal(await run('cat /opt/tpl/run.txt'), 'built-by-run\n')
  assert.equal(await sbx.files.read('/opt/tpl/hello.txt'), 'hello from the template\n')
  assert.equal(await run('stat -c %a /opt/app/run.sh'), '755\n')
  assert.equal(await run('printf %s "$TPL_GREETING"'), 'hi "there" $HOME')
  assert.equal(await run('printf %s "$TPL_RUN"'), runId)
  // The start command ran before create answered (its ready check passed),
  // in the template's working directory.
  assert.equal(await sbx.files.read('/tmp/started'), 'started in /opt/tpl\n')
  // and it still runs (the image has no ps).
  assert.match(await run("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"), /sleep 600/)
})

test('setUser, runCmd with a user, copy with an owner; an unknown user fails the build', async () => {
  const tpl = Template({ fileContextPath: ctxDir })
    .fromTemplate('debian')
    .setUser('user')
    .runCmd('id -un > /home/user/as-default.txt')
    .runCmd('id -un > /as-root.txt', { user: 'root' })
    .runCmd('id -un > /home/user/after.txt')
    .copy('hello.txt', '/home/user/owned.txt', { user: 'user' })
    .setStartCmd('id -un > /tmp/start-user.txt; exec sleep 600', waitForFile('/tmp/start-user.txt'))
  const users = `${alias}-users`
  await Template.build(tpl, users)
  const sbx = await create({ template: users })
  const run = async (c) => (await sbx.commands.run(c, { user: 'root' })).stdout
  assert.equal(await run('cat /home/user/as-default.txt /as-root.txt /home/user/after.txt'), 'user\nroot\nuser\n')
  assert.equal(await run('stat -c %U /home/user/owned.txt'), 'user\n')
  // The start command runs as the template's user.
  assert.equal(await run('cat /tmp/start-user.txt'), 'user\n')

  const bad = Template().fromTemplate('debian').runCmd('whoami', { user: 'root123' })
  await assert.rejects(Template.build(bad, `${alias}-nouser`), (err) => {
    assert.ok(err instanceof BuildError, String(err))
    assert.match(err.message, /root123/)
    return true
  })
})

test('a failing runCmd fails the build with its output', async () => {
  const tpl = Template().fromTemplate('debian').runCmd('echo the-step-output; exit 7')
  const bad = `${alias}-bad`
  await assert.rejects(Template.build(tpl, bad), (err) => {
    assert.ok(err instanceof BuildError, String(err))
    assert.match(err.message, /exit(ed)? (with )?code 7/)
    assert.match(err.message, /the-step-output/)
    return true
  })
  assert.equal(await Template.exists(bad), false)
})

test('an unknown base image fails the build', async () => {
  const tpl = Template().fromTemplate('no-such-base-image').runCmd('true')
  await assert.rejects(Template.build(tpl, `${alias}-nobase`), (err) => {
    assert.ok(err instanceof BuildError, String(err))
    assert.match(err.message, /no-such-base-image/)
    return true
  })
})

test('a name dsec cannot store is refused', async () => {
  const tpl = Template().fromTemplate('debian')
  await assert.rejects(Template.build(tpl, 'Bad Name'), (err) => {
    assert.ok(err instanceof BuildError, String(err))
    assert.match(err.message, /template name/)
    return true
  })
})
