// Command dsec-escape-probe runs the escape probes of internal/escapeprobe
// inside a sandbox and prints their results as JSON. Tests copy it in (it is
// built static, CGO_ENABLED=0).
//
//	dsec-escape-probe -disk 254:0 -caps a00425fb -masked /proc/kpagecgroup,/proc/kcore [-probes a,b]
//	dsec-escape-probe -syscalls   (escapeprobe.SyscallErrnos as JSON)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/escapeprobe"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == escapeprobe.NoopArg {
		return
	}
	disk := flag.String("disk", "", "host root block device MAJOR:MINOR")
	caps := flag.String("caps", "", "expected capability set, hex")
	masked := flag.String("masked", "", "comma-separated masked paths that exist on the host")
	probes := flag.String("probes", "", "comma-separated probe names (default all)")
	syscalls := flag.Bool("syscalls", false, "print the errno of each of escapeprobe.SyscallErrnos' calls instead")
	flag.Parse()
	if *syscalls {
		if err := json.NewEncoder(os.Stdout).Encode(escapeprobe.SyscallErrnos()); err != nil {
			os.Exit(1)
		}
		return
	}
	var env escapeprobe.Env
	if *disk != "" {
		a, b, _ := strings.Cut(*disk, ":")
		ma, err1 := strconv.ParseUint(a, 10, 32)
		mi, err2 := strconv.ParseUint(b, 10, 32)
		if err1 != nil || err2 != nil {
			fmt.Fprintln(os.Stderr, "bad -disk")
			os.Exit(2)
		}
		env.HostDisk = [2]uint32{uint32(ma), uint32(mi)}
	}
	if *caps != "" {
		c, err := strconv.ParseUint(*caps, 16, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -caps")
			os.Exit(2)
		}
		env.WantCaps = c
	}
	if *masked != "" {
		env.MaskedPaths = strings.Split(*masked, ",")
	}
	var names []string
	if *probes != "" {
		names = strings.Split(*probes, ",")
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(escapeprobe.Run(env, names)); err != nil {
		os.Exit(1)
	}
}
