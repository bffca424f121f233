// The code interpreter through the unmodified @e2b/code-interpreter package:
// a code-interpreter-v1 sandbox (its default template) runs Python cells in a
// persistent Jupyter kernel on port 49999: streamed stdout/stderr, the last
// expression's result with its MIME bundle (text, HTML, PNG from matplotlib),
// errors with traceback, a client timeout that interrupts the cell, several
// contexts (create, list, restart, remove), private ports with the traffic
// token only. Needs the code-interpreter-v1 image (scripts/codeint-image.sh).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { runId } from './helpers.mjs'

const created = new Set()
async function create(opts = {}) {
  const sbx = await Sandbox.create({ ...opts, metadata: { suite: runId } })
  created.add(sbx)
  return sbx
}
after(async () => {
  await Promise.all([...created].map((s) => s.kill().catch(() => {})))
})

const PNG_MAGIC = 'iVBORw0KGgo' // base64 of "\x89PNG\r\n\x1a\n"

test('runCode: state, streams, results, errors', async () => {
  const sbx = await create()
  assert.equal(sbx.sandboxId.length > 0, true)

  const first = await sbx.runCode('x = 41\nx + 1')
  assert.equal(first.text, '42')
  assert.equal(first.executionCount, 1)
  const second = await sbx.runCode('x += 1; x')
  assert.equal(second.text, '42', 'variables persist between cells')
  assert.equal(second.executionCount, 2)

  const out = []
  const err = []
  const streamed = await sbx.runCode('import sys\nprint("hello")\nprint("oops", file=sys.stderr)', {
    onStdout: (m) => out.push(m.line),
    onStderr: (m) => err.push(m.line),
  })
  assert.deepEqual(out, ['hello\n'])
  assert.deepEqual(err, ['oops\n'])
  assert.deepEqual(streamed.logs.stdout, ['hello\n'])
  assert.deepEqual(streamed.logs.stderr, ['oops\n'])
  assert.equal(streamed.results.length, 0)

  const failed = await sbx.runCode('def f():\n    return 1 / 0\nf()')
  assert.equal(failed.error?.name, 'ZeroDivisionError')
  assert.equal(failed.error?.value, 'division by zero')
  // IPython's traceback, colored with ANSI escapes as Jupyter gives it.
  const plain = (failed.error?.traceback ?? '').replace(/\x1b\[[0-9;]*m/g, '')
  assert.match(plain, /return 1 \/ 0/)
  assert.match(plain, /ZeroDivisionError: division by zero/)

  const shell = await sbx.runCode('!pwd')
  assert.deepEqual(shell.logs.stdout.join('').trim(), '/home/user')
  const who = await sbx.runCode('import getpass; getpass.getuser()')
  assert.equal(who.text, 'root', 'kernels run as root, as on E2B')
})

test('runCode: MIME bundles (PNG from matplotlib, HTML from pandas)', async () => {
  const sbx = await create()
  const results = []
  const plot = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()\n"done"',
    { onResult: (r) => results.push(r) },
  )
  assert.equal(plot.error, undefined)
  assert.equal(results.length, 2, 'the figure and the cell result')
  const [fig, main] = plot.results
  assert.equal(fig.isMainResult, false)
  assert.ok(fig.png.startsWith(PNG_MAGIC), 'a PNG')
  assert.match(fig.text, /Figure/)
  assert.deepEqual(fig.extra, {})
  assert.equal(main.isMainResult, true)
  assert.equal(main.text, 'done')

  const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})')
  assert.match(df.results[0].html, /<table/)
  assert.match(df.text, /a\n0\s+1\n1\s+2/)
})

test('runCode: a client timeout interrupts the cell', async () => {
  const sbx = await create()
  await assert.rejects(sbx.runCode('import time; time.sleep(300)', { timeoutMs: 2_000 }), /timed out/i)
  const t0 = Date.now()
  const next = await sbx.runCode('1 + 1', { timeoutMs: 15_000 })
  assert.equal(next.text, '2')
  assert.ok(Date.now() - t0 < 10_000, 'the next cell did not wait behind the sleep')
  const interrupted = await sbx.runCode('"still here"')
  assert.equal(interrupted.text, 'still here')
})

test('contexts: create, list, run in, restart, remove', async () => {
  const sbx = await create()
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.some((c) => c.language === 'python' && c.cwd === '/home/user'), JSON.stringify(listed))

  await sbx.runCode('x = 1')
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  const rootCtx = await sbx.createCodeContext({ cwd: '/root' })
  assert.equal((await sbx.runCode('import os; os.getcwd()', { context: rootCtx })).text, '/root')
  await assert.rejects(sbx.createCodeContext({ cwd: '/nonexistent' }), /not a directory|400/)
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  const isolated = await sbx.runCode('x', { context: ctx })
  assert.equal(isolated.error?.name, 'NameError', 'a new context has its own kernel')
  const cwd = await sbx.runCode('import os; os.getcwd()', { context: ctx })
  assert.equal(cwd.text, '/tmp')
  assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))

  await sbx.runCode('y = 5', { context: ctx })
  await sbx.restartCodeContext(ctx)
  const restarted = await sbx.runCode('y', { context: ctx })
  assert.equal(restarted.error?.name, 'NameError')
  assert.equal(restarted.error?.value, "name 'y' is not defined")
  assert.equal((await sbx.runCode('x')).text, '1', 'the default context kept its state')

  await sbx.removeCodeContext(ctx.id)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  await assert.rejects(sbx.runCode('1', { context: ctx }), /not found/i)
})

test('envs per cell, and private ports with the traffic token only', async () => {
  const sbx = await create({ envs: { FROM_CREATE: 'c' }, secure: true, network: { allowPublicTraffic: false } })
  assert.ok(sbx.trafficAccessToken, 'a traffic token')
  const r = await sbx.runCode('import os; os.environ["FROM_CREATE"] + os.environ.get("PER_CELL", "-")', { envs: { PER_CELL: 'p' } })
  assert.equal(r.text, 'cp')
  const after = await sbx.runCode('import os; os.environ.get("PER_CELL", "-")')
  assert.equal(after.text, '-', 'a cell\'s envs end with it')
  const ctx = await sbx.createCodeContext()
  assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))

  // Without the traffic token the interpreter's port refuses.
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/contexts`, {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' },
  })
  assert.equal(res.status, 403)
})

test('JavaScript, TypeScript and R contexts, bash cells; other languages refused clearly', async () => {
  const sbx = await create({ envs: { FROM_CREATE: 'c' } })
  const langs = (await sbx.listCodeContexts()).map((c) => c.language)
  assert.ok(langs.includes('python') && langs.includes('javascript'), JSON.stringify(langs))

  const out = []
  const js = await sbx.runCode('import { readFileSync } from "fs"\nconsole.log(typeof readFileSync)\nconst n = 40\nprocess.cwd()', {
    language: 'js', onStdout: (m) => out.push(m.line),
  })
  assert.deepEqual(out, ['function\n'])
  assert.equal(js.text, '/home/user')
  assert.equal((await sbx.runCode('n + 2', { language: 'javascript' })).text, '42', 'JS state persists')
  assert.equal((await sbx.runCode('const m = await Promise.resolve(n); m + 1', { language: 'js' })).text, '41')
  assert.equal((await sbx.runCode('m * 2', { language: 'js' })).text, '80', 'top-level await cells keep their declarations')
  const jsErr = await sbx.runCode('null.x', { language: 'js' })
  assert.equal(jsErr.error?.name, 'TypeError')
  const env = await sbx.runCode('process.env.FROM_CREATE + (process.env.PER || "-")', { language: 'js', envs: { PER: 'p' } })
  assert.equal(env.text, 'cp')
  assert.equal((await sbx.runCode('process.env.PER || "-"', { language: 'js' })).text, '-')

  const ts = await sbx.runCode('const s: string = "typed"; console.log(s)', { language: 'ts' })
  assert.deepEqual(ts.logs.stdout, ['typed\n'])

  const sh = await sbx.runCode('echo $FOO; pwd', { language: 'bash', envs: { FOO: 'bar' } })
  assert.deepEqual(sh.logs.stdout.join(''), 'bar\n/home/user\n')

  // The SDK shows only the status of a 400; the interpreter's answer says why.
  const r = await sbx.runCode('x <- 20\nprint("hi")\nSys.getenv("FROM_CREATE")', { language: 'r', envs: { PER: 'p' } })
  assert.deepEqual(r.logs.stdout, ['[1] "hi"\n'])
  assert.equal(r.text, '[1] "c"')
  assert.equal((await sbx.runCode('c(x * 2, nchar(Sys.getenv("PER")))', { language: 'r' })).text, '[1] 40  0', 'R state persists, envs do not')
  assert.equal((await sbx.runCode('getwd()', { language: 'r' })).text, '[1] "/home/user"')
  const rErr = await sbx.runCode('stop("boom")', { language: 'r' })
  assert.equal(rErr.error?.value, 'boom')

  await assert.rejects(sbx.runCode('1', { language: 'cobol' }), /400/)
  await assert.rejects(sbx.createCodeContext({ language: 'cobol' }), /400/)
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/execute`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'Content-Type': 'application/json' },
    body: JSON.stringify({ code: '1', language: 'cobol' }),
  })
  assert.equal(res.status, 400)
  assert.equal(await res.text(), "language 'cobol' is not served by this sandbox (it serves python, javascript, typescript, bash, r, java)")
})

test('results: pandas data, PIL images shown and saved', async () => {
  const sbx = await create()
  const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2, 3]})')
  assert.deepEqual(df.results[0].data, { columns: ['a'], index: [0, 1, 2], data: [[1], [2], [3]] })
  const img = 'import numpy\nfrom PIL import Image\nim = Image.fromarray((numpy.random.rand(8, 8, 3) * 255).astype("uint8"))\n'
  const shown = await sbx.runCode(img + 'im.show()\nprint("done")')
  assert.equal(shown.results.length, 1)
  assert.ok(shown.results[0].png.startsWith(PNG_MAGIC))
  assert.deepEqual(shown.logs.stdout, ['done\n'])
  const saved = await sbx.runCode('im.save("/tmp/x.png")')
  assert.equal(saved.results.length, 1, 'a saved image is shown once')
  assert.ok(saved.results[0].png.startsWith(PNG_MAGIC))
})

test('supervisor: a killed interpreter comes back; a dead kernel is replaced', async () => {
  const sbx = await create()
  assert.equal((await sbx.runCode('x = 7; x')).text, '7')
  // The kernel dies (as on an out-of-memory kill): the next cell gets a fresh one.
  const died = await sbx.runCode('import os; os.kill(os.getpid(), 9)')
  assert.equal(died.error?.name, 'KernelDied')
  const fresh = await sbx.runCode('"x" in dir()')
  assert.equal(fresh.text, 'False')

  // The service itself is killed: its supervisor starts it again.
  const before = await sbx.commands.run("pgrep -f 'codeint/server.py$'", { user: 'root' })
  const pid = before.stdout.trim()
  assert.match(pid, /^\d+$/)
  await sbx.commands.run(`kill -9 ${pid}`, { user: 'root' })
  let ok = null
  for (let i = 0; i < 100 && !ok; i++) {
    ok = await sbx.runCode('1 + 1', { timeoutMs: 10_000 }).catch(() => null)
    if (!ok) await new Promise((r) => setTimeout(r, 200))
  }
  assert.equal(ok?.text, '2', 'the interpreter serves again')
  const after = await sbx.commands.run("pgrep -f 'codeint/server.py$'", { user: 'root' })
  assert.notEqual(after.stdout.trim(), pid, 'a new service process')
  const kernels = await sbx.commands.run("pgrep -fc '[i]pykernel_launcher|[j]skernel[.]js' || true", { user: 'root' })
  assert.equal(kernels.stdout.trim(), '2', 'the old kernels were ended: python and javascript of the new service')
})

test('charts: a matplotlib figure carries its chart', async () => {
  const sbx = await create()
  const bar = await sbx.runCode([
    'import matplotlib.pyplot as plt',
    'plt.bar(["a", "b"], [3, 5], label="n")',
    'plt.xlabel("Letter")',
    'plt.ylabel("Count (items)")',
    'plt.title("Letters")',
    'plt.show()',
  ].join('\n'))
  const chart = bar.results[0].chart
  assert.equal(chart.type, 'bar')
  assert.equal(chart.title, 'Letters')
  assert.equal(chart.x_label, 'Letter')
  assert.equal(chart.y_unit, 'items')
  assert.deepEqual(chart.elements, [{ label: 'a', group: 'n', value: 3 }, { label: 'b', group: 'n', value: 5 }])
  assert.deepEqual(bar.results[0].extra, {})
  assert.ok(bar.results[0].png.startsWith(PNG_MAGIC))

  const pie = await sbx.runCode('import matplotlib.pyplot as plt\nplt.pie([3, 1], labels=["x", "y"])\nplt.show()')
  assert.deepEqual(pie.results[0].chart.elements.map((e) => [e.label, e.angle, e.radius]), [['x', 270, 1], ['y', 90, 1]])

  const lines = await sbx.runCode([
    'import matplotlib.pyplot as plt',
    'fig, axs = plt.subplots(1, 2)',
    'fig.suptitle("Two")',
    'axs[0].plot([1, 2, 3], [1, 4, 9], label="sq")',
    'axs[1].scatter([1, 2], [2, 1])',
    'plt.show()',
  ].join('\n'))
  const sup = lines.results[0].chart
  assert.equal(sup.type, 'superchart')
  assert.equal(sup.title, 'Two')
  assert.deepEqual(sup.elements.map((c) => c.type), ['line', 'scatter'])
  assert.deepEqual(sup.elements[0].elements[0], { label: 'sq', points: [[1, 1], [2, 4], [3, 9]] })
})
