package deptest

import (
	"debug/elf"
	"fmt"
	"io"
	"strings"
)

// StaticELF fails for an ELF executable that needs the dynamic loader: one
// with a PT_INTERP program header or a DT_NEEDED shared library.
func StaticELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			return fmt.Errorf("%s is dynamically linked (interpreter %s)", path, strings.TrimRight(string(b), "\x00"))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v", path, libs)
	}
	return nil
}
