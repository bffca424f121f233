// Prints a per-file table and the failures of the vitest JSON reports in DIR
// (offline.json, live.json).   node summarize.cjs DIR
const fs = require('node:fs')
const dir = process.argv[2]
for (const kind of ['offline', 'live']) {
  const file = `${dir}/${kind}.json`
  if (!fs.existsSync(file)) continue
  const r = JSON.parse(fs.readFileSync(file, 'utf8'))
  console.log(`## ${kind}: ${r.numTotalTests} tests, ${r.numPassedTests} passed, ${r.numFailedTests} failed, ` +
    `${r.numPendingTests + r.numTodoTests} skipped`)
  console.log('| file | passed | failed | skipped |\n|---|---|---|---|')
  const fails = []
  for (const f of r.testResults.sort((a, b) => a.name.localeCompare(b.name))) {
    const c = { passed: 0, failed: 0, skipped: 0 }
    for (const a of f.assertionResults) {
      const s = a.status === 'passed' ? 'passed' : a.status === 'failed' ? 'failed' : 'skipped'
      c[s]++
      if (s === 'failed') fails.push([f.name.replace(/.*\/tests\//, ''), a.title, (a.failureMessages[0] || '').split('\n')[0].slice(0, 200)])
    }
    if (f.assertionResults.length === 0 && f.status === 'failed') c.failed = `file failed: ${(f.message || '').split('\n')[0].slice(0, 120)}`
    console.log(`| ${f.name.replace(/.*\/tests\//, '')} | ${c.passed} | ${c.failed} | ${c.skipped} |`)
  }
  if (fails.length) console.log('\nfailures:\n' + fails.map((x) => '- ' + x.join(' | ')).join('\n'))
  console.log()
}
