package bench

import "fmt"

// MemHoldScript is a Python program that holds MB MiB of touched anonymous
// memory (each 4 KiB page: randPerPage random bytes, the rest zero; 512
// compresses about 6x in zram, 4096 not at all), writes the SHA-256 of it to /tmp/sum1 and, on SIGUSR1,
// recomputes it into /tmp/sum2 (its pid is in /tmp/holder.pid). It then sleeps. The reclaim test and
// benchmark run it in a sandbox.
func MemHoldScript(mb, randPerPage int) string {
	return fmt.Sprintf(`import hashlib, os, signal, time
n = %d << 20
b = bytearray(n)
for off in range(0, n, 4096):
    b[off:off+%d] = os.urandom(%d)
def dump(path):
    with open(path + ".tmp", "w") as f:
        f.write(hashlib.sha256(b).hexdigest())
    os.rename(path + ".tmp", path)
signal.signal(signal.SIGUSR1, lambda *a: dump("/tmp/sum2"))
with open("/tmp/holder.pid", "w") as f:
    f.write(str(os.getpid()))
dump("/tmp/sum1")
while True:
    time.sleep(3600)
`, mb, randPerPage, randPerPage)
}
