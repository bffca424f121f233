import { Sandbox } from 'e2b'
const A = []
for (let i = 0; i < 20; i++) {
  let a = performance.now()
  const s = await Sandbox.create()
  A.push(performance.now() - a)
  await s.kill()
}
const p = x => { x.sort((a, b) => a - b); return `p50 ${x[10].toFixed(1)} min ${x[0].toFixed(1)}` }
console.log('sdk', p(A))
