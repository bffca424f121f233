package fncall

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// langProgram is one language's programs for the verdicts every language must
// give: echo stdin (accepted, then wrong answer), a syntax or compile error, a
// runtime error, an endless loop, a memory hog.
type langProgram struct {
	lang, main                     string
	echo, broken, crash, loop, hog string
	brokenVerdict                  string // compile_error (compiled) or runtime_error (interpreted)
}

var langPrograms = []langProgram{
	{lang: api.LangNodeJS, main: "main.js",
		echo:   "const s = require('fs').readFileSync(0, 'utf8'); process.stdout.write(s.trim().split('').reverse().join('') + '\\n');",
		broken: "function (", crash: "null.x;", loop: "for (;;) {}",
		hog: "const a = []; for (;;) a.push(new Array(1 << 20).fill(7));", brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangPHP, main: "main.php",
		echo:   "<?php echo strrev(trim(stream_get_contents(STDIN))), \"\\n\";",
		broken: "<?php function (", crash: "<?php throw new Exception('boom');", loop: "<?php while (true) {}",
		hog: "<?php ini_set('memory_limit', '-1'); $a = []; while (true) { $a[] = str_repeat('x', 1 << 20); }", brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangRuby, main: "main.rb",
		echo: "puts STDIN.read.strip.reverse", broken: "def (", crash: "raise 'boom'", loop: "loop { }",
		hog: "a = []; loop { a << ('x' * (1 << 20)) }", brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangLua, main: "main.lua",
		echo: "print((io.read('a'):gsub('%s+$', '')):reverse())", broken: "function (", crash: "error('boom')", loop: "while true do end",
		hog: "local t = {} while true do t[#t + 1] = string.rep('x', 1 << 20) .. #t end", brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangPerl, main: "main.pl",
		echo: "local $/; my $s = <STDIN>; $s =~ s/\\s+$//; print scalar reverse($s), \"\\n\";", broken: "sub (", crash: "die 'boom';",
		loop: "1 while 1;", hog: "my @a; push @a, 'x' x (1 << 20) while 1;", brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangRust, main: "main.rs",
		echo:   "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); println!(\"{}\", s.trim().chars().rev().collect::<String>()); }",
		broken: "fn main( {", crash: "fn main() { let v: Vec<i32> = Vec::new(); let i = std::env::args().count() + 5; println!(\"{}\", v[i]); }",
		loop: "fn main() { let mut x: u64 = 0; loop { x = x.wrapping_add(1); if x == 0 { println!(\"{}\", x); } } }",
		hog:  "fn main() { let mut v: Vec<Vec<u8>> = Vec::new(); loop { v.push(vec![7u8; 1 << 20]); } }", brokenVerdict: api.VerdictCompileError},
}

func TestLanguages(t *testing.T) {
	e := testEngine(t)
	for _, p := range langPrograms {
		t.Run(p.lang, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			call := func(src string, lim api.FnCallLimits, tests ...api.FnCallTest) api.FnCallResult {
				t.Helper()
				if len(tests) == 0 {
					tests = []api.FnCallTest{{}}
				}
				res, err := e.Call(ctx, api.FnCallRequest{Language: p.lang, Files: map[string]string{p.main: src}, Tests: tests, Limits: lim})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			right, wrong := "olleh\n", "hello\n"
			res := call(p.echo, api.FnCallLimits{CPUTimeMs: 10000},
				api.FnCallTest{Stdin: "hello\n", ExpectedOutput: &right}, api.FnCallTest{Stdin: "hello\n", ExpectedOutput: &wrong})
			if len(res.Tests) != 2 || res.Tests[0].Verdict != api.VerdictAccepted || res.Tests[1].Verdict != api.VerdictWrongAnswer {
				t.Fatalf("echo (is %s in the judge image? scripts/judge-language-packages.txt; make setup rebuilds it): verdict %s, compile %+v, tests %+v",
					p.lang, res.Verdict, res.Compile, res.Tests)
			}
			if res = call(p.broken, api.FnCallLimits{}); res.Verdict != p.brokenVerdict {
				t.Errorf("broken program: verdict %s (want %s), compile %+v, tests %+v", res.Verdict, p.brokenVerdict, res.Compile, res.Tests)
			}
			if res = call(p.crash, api.FnCallLimits{}); res.Verdict != api.VerdictRuntimeError {
				t.Errorf("crash: verdict %s, tests %+v", res.Verdict, res.Tests)
			}
			if res = call(p.loop, api.FnCallLimits{CPUTimeMs: 1000}); res.Verdict != api.VerdictTimeLimit {
				t.Errorf("endless loop: verdict %s, tests %+v", res.Verdict, res.Tests)
			}
			if res = call(p.hog, api.FnCallLimits{CPUTimeMs: 20000, MemoryBytes: 128 << 20}); res.Verdict != api.VerdictMemoryLimit {
				t.Errorf("memory hog: verdict %s, tests %+v", res.Verdict, strings.TrimSpace(res.Tests[0].Stderr))
			}
		})
	}
}
