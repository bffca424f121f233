// Template builds from a private registry through the unmodified e2b SDK:
// fromImage(ref, {username, password}) and fromGCPRegistry(ref,
// {serviceAccountJSON}) pull the base with those credentials for that build
// only; wrong credentials fail the build with permission_denied in its
// status; fromAWSRegistry is refused as not implemented. The password shows
// in no template answer and no server log line. The registries are
// registrytest's token-auth registry (internal/image/registry/registrytest/serve)
// on the ports run.sh allows plain HTTP to.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Template, BuildError } from 'e2b'
import { create, killAll } from './helpers.mjs'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const port = Number(process.env.DSEC_E2B_REGISTRY_PORT)
const alias = `tplcreds-${process.pid}-${Date.now() % 100000}`
const password = `pw-${process.pid}-${Date.now()}`
const gcpKey = { type: 'service_account', client_email: 'ci@p.iam.gserviceaccount.com', private_key: `key-${password}` }
const tmp = mkdtempSync(path.join(tmpdir(), 'tplcreds-'))
const registries = []
let basicRef, gcpRef

// serve starts a token-auth test registry on port and returns the
// reference of the image it pushed.
function serve(p, user, pass) {
  const child = spawn(path.join(tmp, 'serve'), ['-listen', `127.0.0.1:${p}`, '-user', user, '-pass', pass],
    { stdio: ['pipe', 'pipe', 'inherit'] })
  registries.push(child)
  return new Promise((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (b) => {
      out += b
      const m = out.match(/^ready (\S+)\n/)
      if (m) resolve(m[1])
    })
    child.on('exit', (code) => reject(new Error(`test registry exited ${code}: ${out}`)))
  })
}

before(async () => {
  assert.ok(port > 0, 'DSEC_E2B_REGISTRY_PORT (run.sh) names the registry ports')
  execFileSync('go', ['build', '-o', path.join(tmp, 'serve'), './internal/image/registry/registrytest/serve'], { cwd: root, stdio: 'inherit' })
  ;[basicRef, gcpRef] = await Promise.all([serve(port, 'builder', password), serve(port + 1, '_json_key', JSON.stringify(gcpKey))])
}, { timeout: 300_000 })

after(async () => {
  await killAll()
  for (const c of registries) c.stdin.end()
  rmSync(tmp, { recursive: true, force: true })
})

const key = process.env.E2B_API_KEY
const api = (p) => fetch(`${process.env.E2B_API_URL}${p}`,
  { headers: { 'X-API-Key': key, Authorization: `Bearer ${key.replace(/^e2b_/, '')}` } })

test('fromImage with a username and password builds from the private registry, and nothing keeps the password', async () => {
  const tpl = Template().fromImage(basicRef, { username: 'builder', password }).runCmd('cat /etc/private-marker > /from-base')
  const logs = []
  const info = await Template.build(tpl, alias, { onBuildLogs: (l) => logs.push(String(l.message)) })
  const sbx = await create({ template: alias })
  const r = await sbx.commands.run('cat /from-base; echo $FROM_PRIVATE')
  assert.equal(r.stdout, 'private base\n1\n')

  const answers = [logs.join('\n')]
  for (const p of [`/templates/aliases/${alias}`, `/templates/${alias}/tags`, `/v1/images/${alias}`,
    `/templates/${info?.templateId ?? alias}/builds/${info?.buildId}/status`]) {
    const res = await api(p)
    assert.ok(res.status < 500, `${p}: ${res.status}`)
    answers.push(`${p} ${res.status} ${await res.text()}`)
  }
  for (const a of answers) assert.ok(!a.includes(password), `the password shows in: ${a.slice(0, 2000)}`)
  assert.ok(!readFileSync(process.env.DSEC_E2B_SERVER_LOG, 'utf8').includes(password), 'the server log shows the password')
})

test('fromGCPRegistry sends the service account key as _json_key', async () => {
  const tpl = Template().fromGCPRegistry(gcpRef, { serviceAccountJSON: gcpKey }).runCmd('test -f /etc/private-marker')
  await Template.build(tpl, `${alias}-gcp`)
  const sbx = await create({ template: `${alias}-gcp` })
  assert.equal((await sbx.commands.run('cat /etc/private-marker')).stdout, 'private base\n')
})

test('wrong or missing credentials fail the build with permission_denied', async () => {
  for (const [what, tpl] of [
    ['wrong password', Template().fromImage(basicRef, { username: 'builder', password: 'not-it' })],
    ['no credentials', Template().fromImage(basicRef)],
  ]) {
    await assert.rejects(Template.build(tpl.runCmd('true'), `${alias}-denied`), (err) => {
      assert.ok(err instanceof BuildError, `${what}: ${err}`)
      assert.match(err.message, /permission_denied/, what)
      assert.ok(!err.message.includes('not-it'), `${what}: the message shows the password: ${err.message}`)
      return true
    })
  }
  assert.equal(await Template.exists(`${alias}-denied`), false)
})

test('fromAWSRegistry is refused as not implemented, naming the ECR token exchange', async () => {
  const tpl = Template().fromAWSRegistry('123456789012.dkr.ecr.us-east-1.amazonaws.com/app:1',
    { accessKeyId: 'AKIAEXAMPLE', secretAccessKey: 'aws-secret-example', region: 'us-east-1' })
  await assert.rejects(Template.build(tpl, `${alias}-aws`), (err) => {
    assert.match(err.message, /AWS ECR/)
    assert.ok(!err.message.includes('aws-secret-example'), err.message)
    return true
  })
})
