package bench

import "fmt"

// MemHoldScript is a Python program that holds MB MiB of touched anonymous
// memory (each 4 KiB page: 512 random bytes, the rest zero, so it compresses
// about 6x in zram), writes the SHA-256 of it to /tmp/sum1 and, on SIGUSR1,
// recomputes it into /tmp/sum2 (its pid is in /tmp/holder.pid). It then sleeps. The reclaim test and
// benchmark run it in a sandbox.
func MemHoldScript(mb int) string {
	return fmt.Sprintf(`import hashlib, os, signal, time
n = %d << 20
b = bytearray(n)
for off in range(0, n, 4096):
    b[off:off+512] = os.urandom(512)
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
`, mb)
}
