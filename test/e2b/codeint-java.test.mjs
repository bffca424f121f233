// Java cells in the code interpreter through the unmodified
// @e2b/code-interpreter package (language 'java'): a context's JShell keeps
// variables, methods, classes and imports between cells; System.out and
// System.err stream; the last expression's value is the result's text; a
// failing cell gives an error with a message; a cell's envs are system
// properties while it runs (as E2B's Java kernel gives them); a client timeout
// stops the cell and keeps the context's state; the image's precompiled kernel
// is the one that runs. Needs the code-interpreter-v1 image
// (scripts/codeint-image.sh).
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

const java = { language: 'java' }

test('Java: state, streams, results, errors', async () => {
  const sbx = await create({ envs: { FROM_CREATE: 'c' } })

  const first = await sbx.runCode('int x = 41;\nx + 1', java)
  assert.equal(first.text, '42')
  assert.equal(first.error, undefined)
  assert.equal((await sbx.runCode('x += 1;\nx', java)).text, '42', 'variables persist between cells')

  const out = []
  const err = []
  const streamed = await sbx.runCode('System.out.println("hello");\nSystem.err.println("oops");', {
    ...java,
    onStdout: (m) => out.push(m.line),
    onStderr: (m) => err.push(m.line),
  })
  assert.deepEqual(out, ['hello\n'])
  assert.deepEqual(err, ['oops\n'])
  assert.equal(streamed.results.length, 0, 'a statement has no result')

  // Methods, classes and imports of one cell are there in the next.
  await sbx.runCode('import java.util.*;\nclass Point { int x, y; Point(int x, int y) { this.x = x; this.y = y; } }\nint norm1(Point p) { return Math.abs(p.x) + Math.abs(p.y); }', java)
  assert.equal((await sbx.runCode('norm1(new Point(3, -4))', java)).text, '7')
  assert.equal((await sbx.runCode('List<Integer> l = new ArrayList<>(List.of(3, 1, 2));\nCollections.sort(l);\nl', java)).text, '[1, 2, 3]')
  assert.equal((await sbx.runCode('"a\\tb"', java)).text, 'a\tb', 'a String result is its text')

  const thrown = await sbx.runCode('int[] a = new int[2];\na[5] = 1;', java)
  assert.equal(thrown.error?.name, 'java.lang.ArrayIndexOutOfBoundsException')
  assert.match(thrown.error?.value ?? '', /Index 5 out of bounds for length 2/)
  await sbx.runCode('int boom(int d) {\n  return 10 / d;\n}', java)
  const deep = await sbx.runCode('boom(0)', java)
  assert.equal(deep.error?.name, 'java.lang.ArithmeticException')
  assert.equal(deep.error?.value, '/ by zero')
  assert.match(deep.error?.traceback ?? '', /at boom \(#\d+:2\)/, 'the traceback has the method and its line')
  const npe = await sbx.runCode('String s = null;\ns.length()', java)
  assert.match(npe.error?.value ?? '', /because "s" is null/, 'no JShell wrapper class names')
  const uncompiled = await sbx.runCode('int y = "text";', java)
  assert.equal(uncompiled.error?.name, 'CompilationException')
  assert.match(uncompiled.error?.value ?? '', /incompatible types/)
  assert.equal((await sbx.runCode('x', java)).text, '42', 'a failed cell keeps the state')

  assert.equal((await sbx.runCode('System.getProperty("user.dir")', java)).text, '/home/user')
  assert.equal((await sbx.runCode('System.getProperty("FROM_CREATE") + System.getProperty("PER", "-")', { ...java, envs: { PER: 'p' } })).text, 'cp')
  assert.equal((await sbx.runCode('System.getProperty("PER", "-")', java)).text, '-', 'a cell\'s envs end with it')

  // The image's precompiled kernel runs (no compile at the first Java cell).
  const ps = await sbx.commands.run("ps -eo args | grep '[J]avaKernel'", { user: 'root' })
  assert.match(ps.stdout, /-cp \/opt\/dsec\/codeint\/java-[0-9a-f]{16} JavaKernel/)
})

test('Java: a timeout stops the cell, the context keeps its state; contexts of their own', async () => {
  const sbx = await create()
  await sbx.runCode('int kept = 7;', java)
  await assert.rejects(sbx.runCode('while (true) { }', { ...java, timeoutMs: 3_000 }), /timed out/i)
  const t0 = Date.now()
  const next = await sbx.runCode('kept * 6', { ...java, timeoutMs: 30_000 })
  assert.equal(next.text, '42')
  assert.ok(Date.now() - t0 < 20_000, 'the next cell did not wait behind the loop')

  const ctx = await sbx.createCodeContext({ language: 'java', cwd: '/tmp' })
  assert.equal(ctx.language, 'java')
  const isolated = await sbx.runCode('kept', { context: ctx })
  assert.equal(isolated.error?.name, 'CompilationException', 'a new context has its own JShell')
  assert.equal((await sbx.runCode('System.getProperty("user.dir")', { context: ctx })).text, '/tmp')
  await sbx.runCode('int z = 5;', { context: ctx })
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('z', { context: ctx })).error?.name, 'CompilationException', 'a restart forgets')
  await sbx.removeCodeContext(ctx.id)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
})
