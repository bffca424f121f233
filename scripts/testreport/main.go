// Command testreport reads `go test -json` on stdin and makes CI strict about what
// it ran: it prints each package's result as it ends, the full output of every
// failing test, and every skipped test with its reason; it fails (exit 1) when a
// test or a package failed, when nothing ran, or when a test skipped that is not
// on the allowlist (a file of "PACKAGE TEST  # reason" lines; TEST may end in *,
// PACKAGE is the import path's suffix after the module path). The last line is
// "N passed, N failed, N skipped".
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type rule struct{ pkg, test string }

func (r rule) match(pkg, test string) bool {
	if r.pkg != pkg && !strings.HasSuffix(pkg, "/"+r.pkg) {
		return false
	}
	if p, ok := strings.CutSuffix(r.test, "*"); ok {
		return strings.HasPrefix(test, p)
	}
	return r.test == test
}

func loadRules(path string) ([]rule, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rules []rule
	for i, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		switch len(f) {
		case 0:
		case 2:
			rules = append(rules, rule{f[0], f[1]})
		default:
			return nil, fmt.Errorf("%s:%d: want \"PACKAGE TEST  # reason\"", path, i+1)
		}
	}
	return rules, nil
}

type key struct{ pkg, test string }

type report struct {
	rules          []rule
	out            map[key]*strings.Builder
	passed, failed int
	skipped        []key
	badSkips       []key
	failedPkgs     []string
	failedTests    []key
	w              io.Writer
}

func (r *report) add(e event) {
	k := key{e.Package, e.Test}
	if e.Action == "output" {
		b := r.out[k]
		if b == nil {
			b = &strings.Builder{}
			r.out[k] = b
		}
		if b.Len() < 1<<20 {
			b.WriteString(e.Output)
		}
		return
	}
	if e.Test == "" {
		switch e.Action {
		case "pass", "skip":
			fmt.Fprintf(r.w, "ok   %s (%.1fs)\n", e.Package, e.Elapsed)
		case "fail":
			fmt.Fprintf(r.w, "FAIL %s (%.1fs)\n", e.Package, e.Elapsed)
			r.failedPkgs = append(r.failedPkgs, e.Package)
			if b := r.out[k]; b != nil {
				fmt.Fprint(r.w, indent(b.String()))
			}
		}
		return
	}
	switch e.Action {
	case "pass":
		r.passed++
	case "fail":
		r.failed++
		r.failedTests = append(r.failedTests, k)
		fmt.Fprintf(r.w, "--- FAIL %s %s\n%s", e.Package, e.Test, indent(r.text(k)))
	case "skip":
		r.skipped = append(r.skipped, k)
		allowed := false
		for _, ru := range r.rules {
			if ru.match(e.Package, e.Test) {
				allowed = true
				break
			}
		}
		if !allowed {
			r.badSkips = append(r.badSkips, k)
		}
	}
	if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
		delete(r.out, k)
	}
}

func (r *report) text(k key) string {
	if b := r.out[k]; b != nil {
		return b.String()
	}
	return ""
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func main() {
	allow := flag.String("allow", "", "allowlist of tests that may skip")
	flag.Parse()
	rules, err := loadRules(*allow)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r := &report{rules: rules, out: map[key]*strings.Builder{}, w: os.Stdout}
	reasons := map[key]string{}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // build errors and other plain output
			continue
		}
		if e.Action == "skip" && e.Test != "" {
			reasons[key{e.Package, e.Test}] = skipReason(r.text(key{e.Package, e.Test}))
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: reading input:", err)
		os.Exit(2)
	}
	sort.Slice(r.skipped, func(i, j int) bool { return r.skipped[i].pkg+r.skipped[i].test < r.skipped[j].pkg+r.skipped[j].test })
	if len(r.skipped) > 0 {
		fmt.Println("\nskipped tests:")
		for _, k := range r.skipped {
			fmt.Printf("  %s %s: %s\n", k.pkg, k.test, reasons[k])
		}
	}
	ok := true
	if len(r.badSkips) > 0 {
		ok = false
		fmt.Println("\nFAIL: tests skipped that are not on the allowlist", *allow+":")
		for _, k := range r.badSkips {
			fmt.Printf("  %s %s: %s\n", k.pkg, k.test, reasons[k])
		}
	}
	if len(r.failedPkgs) > 0 || r.failed > 0 {
		ok = false
		fmt.Printf("\nFAIL: %d tests in %d packages failed\n", r.failed, len(r.failedPkgs))
		for _, k := range r.failedTests {
			fmt.Printf("  %s %s\n", k.pkg, k.test)
		}
	}
	if r.passed == 0 {
		ok = false
		fmt.Println("\nFAIL: no test ran")
	}
	fmt.Printf("\n%d passed, %d failed, %d skipped\n", r.passed, r.failed, len(r.skipped))
	if !ok {
		os.Exit(1)
	}
}

// skipReason is the last line a skipped test printed before "--- SKIP".
func skipReason(out string) string {
	var last string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		last = l
	}
	return last
}
