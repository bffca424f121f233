// Template tags, the working directory of commands and template deletion
// through the unmodified e2b SDK: Template.build(tpl, 'name:tag'),
// assignTags / getTags / removeTags, Sandbox.create('name:tag'), commands.run
// in setWorkdir's directory, DELETE /templates/{id}.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Template } from 'e2b'
import { create, killAll } from './helpers.mjs'

const name = `tags-${process.pid}-${Date.now() % 100000}`

after(killAll)

const build = (marker) =>
  Template()
    .fromTemplate('debian')
    .runCmd(`mkdir -p /opt/w && echo ${marker} > /marker`, { user: 'root' })
    .setWorkdir('/opt/w')

const markerOf = async (template) => {
  const sbx = await create({ template })
  const out = (await sbx.commands.run('cat /marker; pwd')).stdout
  await sbx.kill()
  return out
}

test('name:tag builds keep their tag; assignTags, getTags, removeTags; delete', async () => {
  await Template.build(build('one'), `${name}:v1`)
  await Template.build(build('two'), name)

  // commands.run with no cwd starts in setWorkdir's directory.
  assert.equal(await markerOf(`${name}:v1`), 'one\n/opt/w\n')
  assert.equal(await markerOf(name), 'two\n/opt/w\n')

  await Template.assignTags(`${name}:v1`, ['prod'])
  assert.equal(await markerOf(`${name}:prod`), 'one\n/opt/w\n')
  const tags = (await Template.getTags(name)).map((t) => t.tag).sort()
  assert.deepEqual(tags, ['default', 'prod', 'v1'])

  await Template.removeTags(name, 'prod')
  assert.deepEqual((await Template.getTags(name)).map((t) => t.tag).sort(), ['default', 'v1'])

  const del = await fetch(`${process.env.E2B_API_URL}/templates/${name}`, {
    method: 'DELETE',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY },
  })
  assert.equal(del.status, 204)
  assert.equal(await Template.exists(name), false)
  await assert.rejects(Template.getTags(name))
})
