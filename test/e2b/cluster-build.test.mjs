// A template build through the unmodified e2b SDK wherever the build runs:
// against `dsec server` on this node, or against a cluster's API server
// (internal/cluster/clustere2e TestBuildThroughAPIServer), which places the
// build on a node and relays its logs; there each SDK call reaches either of
// two API servers, so the upload, the start and every status poll may land
// on another one than the request. The runCmd's output reaches onBuildLogs
// while the command runs, a copied file reaches the template, a failing
// runCmd fails the build with its output, and the template then serves a
// sandbox.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Template, BuildError } from 'e2b'
import { create, killAll, runId } from './helpers.mjs'

const ctxDir = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-clbuild-'))
fs.writeFileSync(path.join(ctxDir, 'copied.txt'), `copied-${runId}\n`)
after(() => fs.rmSync(ctxDir, { recursive: true, force: true }))

const alias = `clbuild-${process.pid}-${Date.now() % 100000}`

after(killAll)

test('a template built through the API server streams its logs and serves a sandbox', async () => {
  // runId makes the step new to the build cache.
  const tpl = Template({ fileContextPath: ctxDir })
    .fromTemplate('debian')
    .copy('copied.txt', '/opt/copied.txt')
    .runCmd(`echo first-line-${runId}; sleep 4; echo second-line-${runId}; echo ${runId} > /opt/built.txt`)
  const seen = []
  await Template.build(tpl, alias, { onBuildLogs: (l) => seen.push({ at: Date.now(), msg: String(l.message) }) })
  const done = Date.now()
  const at = (word) => seen.find((e) => e.msg.includes(`${word}-${runId}`))?.at
  const first = at('first-line')
  const second = at('second-line')
  const all = seen.map((e) => e.msg).join('\n')
  assert.ok(first && second, `both lines logged:\n${all}`)
  // The RUN sleeps between them: the first was seen while it slept.
  assert.ok(second - first >= 2_000, `first line seen ${second - first} ms before the second:\n${all}`)
  assert.ok(done - first >= 2_000, `first line seen ${done - first} ms before the build finished:\n${all}`)

  const sbx = await create({ template: alias })
  const r = await sbx.commands.run('cat /opt/built.txt', { user: 'root' })
  assert.equal(r.stdout, `${runId}\n`)
  const c = await sbx.commands.run('cat /opt/copied.txt', { user: 'root' })
  assert.equal(c.stdout, `copied-${runId}\n`)
})

test('a failing runCmd fails the build with its output', async () => {
  const tpl = Template().fromTemplate('debian').runCmd(`echo failing-${runId}; exit 5`)
  await assert.rejects(Template.build(tpl, `${alias}-fail`), (err) => {
    assert.ok(err instanceof BuildError, `${err}`)
    assert.match(String(err.message), new RegExp(`failing-${runId}`))
    return true
  })
})
