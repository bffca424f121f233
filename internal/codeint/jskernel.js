// dsec's JavaScript/TypeScript kernel for the code interpreter service
// (server.py): one Node process per context, one JSON object a line on stdin
// ({id, code, typescript, env}) and on stdout ({id, type, ...}, ending with
// {id, type: "done"}). Cells run in this process's global scope, so variables,
// functions and imports persist between cells; console output and writes to
// process.stdout/stderr are sent as stdout/stderr lines; the value of the last
// expression (awaited when it is a promise) is the cell's result. Static
// imports become require calls and top-level await runs the cell in an async
// function whose declarations are made global. TypeScript is transpiled with
// the typescript package of Debian's node-typescript.
'use strict'
const vm = require('vm')
const util = require('util')
const readline = require('readline')
const Module = require('module')
const path = require('path')

function optional(name) {
  for (const p of [name, '/usr/share/nodejs/' + name, '/usr/lib/nodejs/' + name]) {
    try {
      return require(p)
    } catch {}
  }
  return null
}
const acorn = optional('acorn')
let ts // loaded on the first TypeScript cell

const out = process.stdout.write.bind(process.stdout)
let current = null // the id of the running cell
function send(obj) {
  out(JSON.stringify({ id: current, ...obj }) + '\n')
}
function capture(stream, type) {
  stream.write = (chunk, enc, cb) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString(typeof enc === 'string' ? enc : 'utf8')
    if (text) send({ type, text })
    const done = typeof enc === 'function' ? enc : cb
    if (typeof done === 'function') process.nextTick(done)
    return true
  }
}
capture(process.stdout, 'stdout')
capture(process.stderr, 'stderr')

globalThis.require = Module.createRequire(path.join(process.cwd(), 'index.js'))
globalThis.module = { exports: {} }
globalThis.exports = globalThis.module.exports
globalThis.__dsec_default = (m) => (m && m.__esModule && 'default' in m ? m.default : m)

// rewrite turns one cell into a script: imports into require, exports into
// plain declarations; with top-level await, into an async function whose
// top-level declarations are assigned to globals. It answers {code, async}.
function rewrite(code) {
  if (!acorn) return { code, async: /\bawait\b/.test(code) }
  let ast
  try {
    ast = acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'module', allowAwaitOutsideFunction: true,
      allowReturnOutsideFunction: true, allowHashBang: true })
  } catch {
    return { code, async: false } // let V8 report the syntax error
  }
  let async = false
  const walk = (node) => {
    if (async || !node || typeof node.type !== 'string') return
    if (node.type === 'AwaitExpression' || (node.type === 'ForOfStatement' && node.await)) { async = true; return }
    if (/Function/.test(node.type) || node.type === 'ClassDeclaration') return
    for (const k of Object.keys(node)) {
      const v = node[k]
      if (Array.isArray(v)) v.forEach(walk)
      else if (v && typeof v === 'object' && typeof v.type === 'string') walk(v)
    }
  }
  ast.body.forEach(walk)
  const src = (n) => code.slice(n.start, n.end)
  const parts = []
  let last = -1
  ast.body.forEach((n, i) => { if (n.type === 'ExpressionStatement') last = i; else if (n.type !== 'EmptyStatement') last = -1 })
  const globals = []
  ast.body.forEach((n, i) => {
    if (n.type === 'ImportDeclaration') {
      const req = `require(${JSON.stringify(n.source.value)})`
      for (const s of n.specifiers) {
        if (s.type === 'ImportDefaultSpecifier') parts.push(`var ${s.local.name} = __dsec_default(${req});`)
        else if (s.type === 'ImportNamespaceSpecifier') parts.push(`var ${s.local.name} = ${req};`)
        else parts.push(`var ${s.local.name} = ${req}[${JSON.stringify(s.imported.name || s.imported.value)}];`)
      }
      if (n.specifiers.length === 0) parts.push(`${req};`)
      return
    }
    if ((n.type === 'ExportNamedDeclaration' || n.type === 'ExportDefaultDeclaration') && n.declaration) n = n.declaration
    else if (n.type === 'ExportNamedDeclaration' || n.type === 'ExportAllDeclaration') return
    if (async && n.type === 'VariableDeclaration') {
      parts.push('(' + n.declarations.map((d) => `${src(d.id)} = ${d.init ? src(d.init) : 'undefined'}`).join(', ') + ');')
      return
    }
    if (async && (n.type === 'FunctionDeclaration' || n.type === 'ClassDeclaration') && n.id) {
      parts.push(src(n), `globalThis.${n.id.name} = ${n.id.name};`)
      return
    }
    if (async && i === last) {
      parts.push(`return (${src(n.expression)});`)
      return
    }
    parts.push(src(n))
  })
  let body = parts.join('\n')
  if (async) body = `(async () => {\n${body}\n})()`
  return { code: body, async, globals }
}

function transpile(code) {
  if (!ts) ts = optional('typescript')
  if (!ts) throw new Error('TypeScript is not available in this sandbox (the typescript package is missing)')
  return ts.transpileModule(code, {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, isolatedModules: true },
    reportDiagnostics: false,
  }).outputText
}

function textOf(v) {
  return typeof v === 'string' ? v : util.inspect(v, { depth: 4 })
}

async function run(msg) {
  const env = msg.env || {}
  const before = {}
  for (const k of Object.keys(env)) before[k] = process.env[k]
  Object.assign(process.env, env)
  try {
    let code = msg.code
    if (msg.typescript) code = transpile(code)
    const r = rewrite(code)
    let value = vm.runInThisContext(r.code, { filename: `cell-${msg.count}` })
    if (value && typeof value.then === 'function') value = await value
    if (value !== undefined) send({ type: 'result', text: textOf(value) })
  } catch (e) {
    const err = e instanceof Error ? e : new Error(textOf(e))
    send({ type: 'error', name: err.name || 'Error', value: err.message || '', traceback: err.stack || String(err) })
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
}

const queue = []
let busy = false
async function pump() {
  if (busy) return
  busy = true
  while (queue.length) {
    const msg = queue.shift()
    current = msg.id
    await run(msg)
    send({ type: 'done' })
    current = null
  }
  busy = false
}
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (!line.trim()) return
  queue.push(JSON.parse(line))
  pump()
}).on('close', () => process.exit(0))
process.on('uncaughtException', (e) => send({ type: 'stderr', text: `Uncaught ${e && e.stack ? e.stack : e}\n` }))
process.on('unhandledRejection', (e) => send({ type: 'stderr', text: `Unhandled rejection: ${e && e.stack ? e.stack : e}\n` }))
send({ type: 'ready' })
