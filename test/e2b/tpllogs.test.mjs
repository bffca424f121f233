// Template builds through the unmodified e2b SDK: build logs arrive while the
// build runs (Template.build polls the status with logsOffset and hands each
// new entry to onBuildLogs).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Template } from 'e2b'
import { killAll, runId } from './helpers.mjs'

const alias = `tpllogs-${process.pid}-${Date.now() % 100000}`

after(killAll)

test("a runCmd's output reaches onBuildLogs as the command writes it", async () => {
  // runId makes the step new to the build cache.
  const tpl = Template()
    .fromTemplate('debian')
    .runCmd(`echo first-line-${runId}; sleep 4; echo second-line-${runId}`)
  const seen = []
  await Template.build(tpl, alias, { onBuildLogs: (l) => seen.push({ at: Date.now(), msg: String(l.message) }) })
  const done = Date.now()
  const at = (word) => seen.find((e) => e.msg.includes(`${word}-${runId}`))?.at
  const first = at('first-line')
  const second = at('second-line')
  const all = seen.map((e) => e.msg).join('\n')
  assert.ok(first && second, `both lines logged:\n${all}`)
  // The sleep separates them: the first was seen while the command slept.
  assert.ok(second - first >= 2_000, `first line seen ${second - first} ms before the second:\n${all}`)
  assert.ok(done - first >= 2_000, `first line seen ${done - first} ms before the build finished:\n${all}`)
})
