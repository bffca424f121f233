package fncall

import (
	"context"
	"strconv"
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
	brokenSays                     string // in the compiler's output or the program's stderr
	cpuMs                          int64  // CPU limit of the echo, broken and crash runs (0: the default; JVM start-up is slow)
	memBytes                       int64  // their memory limit (0: the default)
	hogVerdict                     string // "" : memory_limit
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
	{lang: api.LangJava, main: "Main.java", cpuMs: 10000,
		echo:   "import org.javatuples.Pair;\nimport java.util.Scanner;\npublic class Main { public static void main(String[] a) { Pair<String, Integer> p = Pair.with(new Scanner(System.in).nextLine().trim(), 1);\n System.out.println(new StringBuilder(p.getValue0()).reverse()); } }",
		broken: "public class Main { public static void main(String[] a) { System.uto.println(1); } }", brokenSays: "cannot find symbol",
		crash:         "public class Main { public static void main(String[] a) { int[] x = new int[1]; System.out.println(x[a.length + 5]); } }",
		loop:          "public class Main { public static void main(String[] a) { long x = 0; while (true) { x++; if (x == -1) System.out.println(x); } } }",
		hog:           "import java.util.*;\npublic class Main { public static void main(String[] a) { List<long[]> l = new ArrayList<>(); while (true) { long[] b = new long[1 << 17]; Arrays.fill(b, 7); l.add(b); } } }",
		brokenVerdict: api.VerdictCompileError},
	{lang: api.LangTypeScript, main: "main.ts",
		echo:   "const s: string = require('fs').readFileSync(0, 'utf8');\nconst n: number = 'types are not checked, as with tsx';\nconsole.log(s.trim().split('').reverse().join(''));",
		broken: "function (", brokenSays: "error TS", crash: "const x: any = null; x.y;", loop: "for (;;) {}",
		hog: "const a: number[][] = []; for (;;) a.push(new Array(1 << 20).fill(7));", brokenVerdict: api.VerdictCompileError},
	{lang: api.LangKotlinScript, main: "main.kts", cpuMs: 30000, memBytes: 1 << 30, // kotlinc is a JVM; verl gives 1 GiB
		echo: "println(readLine()!!.trim().reversed())", broken: "fun (", brokenSays: "error", crash: "throw RuntimeException(\"boom\")",
		loop: "var x = 0L\nwhile (true) { x++ }", hog: "val l = ArrayList<LongArray>()\nwhile (true) { val b = LongArray(1 shl 17); b.fill(7); l.add(b) }",
		brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangScala, main: "Main.scala", cpuMs: 10000,
		echo:   "object Main { def main(args: Array[String]): Unit = println(scala.io.StdIn.readLine().trim.reverse) }",
		broken: "object Main { def main(args: Array[String]): Unit = println(nosuch) }", brokenSays: "not found",
		crash:         "object Main { def main(args: Array[String]): Unit = { val a = Array(1); println(a(args.length + 5)) } }",
		loop:          "object Main { def main(args: Array[String]): Unit = { var x = 0L; while (true) { x += 1 } } }",
		hog:           "object Main { def main(args: Array[String]): Unit = { val l = scala.collection.mutable.ArrayBuffer[Array[Long]](); while (true) { val b = new Array[Long](1 << 17); java.util.Arrays.fill(b, 7L); l += b } } }",
		brokenVerdict: api.VerdictCompileError},
	{lang: api.LangR, main: "main.R",
		echo:   "s <- readLines(file(\"stdin\"), n = 1)\ncat(paste(rev(strsplit(trimws(s), \"\")[[1]]), collapse = \"\"), \"\\n\", sep = \"\")",
		broken: "f <- function( {", brokenSays: "unexpected", crash: "stop(\"boom\")", loop: "while (TRUE) {}",
		hog: "l <- list(); i <- 0\nrepeat { i <- i + 1; l[[i]] <- numeric(1e6) + i }", brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangCSharp, main: "main.cs",
		echo:   "using System; using System.Linq;\nclass P { static void Main() { var s = Console.In.ReadToEnd().Trim(); Console.WriteLine(new string(s.Reverse().ToArray())); } }",
		broken: "class P { static void Main() { int x = \"s\"; } }", brokenSays: "error CS",
		crash:         "using System;\nclass P { static void Main(string[] a) { int[] x = new int[1]; Console.WriteLine(x[a.Length + 5]); } }",
		loop:          "class P { static void Main() { long x = 0; while (true) { x++; if (x == -1) System.Console.WriteLine(x); } } }",
		hog:           "using System.Collections.Generic;\nclass P { static void Main() { var l = new List<long[]>(); while (true) { var b = new long[1 << 17]; for (int i = 0; i < b.Length; i++) b[i] = 7; l.Add(b); } } }",
		brokenVerdict: api.VerdictCompileError},
	{lang: api.LangRacket, main: "main.rkt",
		echo:   "#lang racket\n(displayln (list->string (reverse (string->list (string-trim (port->string (current-input-port)))))))",
		broken: "#lang racket\n(define (f x)", brokenSays: "read", crash: "#lang racket\n(error \"boom\")", loop: "#lang racket\n(let loop () (loop))",
		hog: "#lang racket\n(let loop ([l '()]) (loop (cons (make-bytes 1048576 7) l)))", brokenVerdict: api.VerdictRuntimeError},
	{lang: api.LangD, main: "main.d",
		echo:   "import std.stdio, std.string, std.range, std.conv;\nvoid main() { writeln(readln().strip.retro.to!string); }",
		broken: "void main() { int x = \"s\"; }", brokenSays: "error",
		crash: "import std.range, std.conv;\nunittest { assert(\"ab\".retro.to!string == \"ab\"); }\nvoid main() {}", // a failing unit test
		loop:  "import std.stdio;\nvoid main() { ulong x; while (true) { x++; if (x == 0) writeln(x); } }",
		hog:   "void main() { ubyte[][] l; while (true) { auto a = new ubyte[1 << 20]; a[] = 7; l ~= a; } }", brokenVerdict: api.VerdictCompileError},
	// A test bench reads no stdin: it prints the expected line.
	{lang: api.LangVerilog, main: "main.sv",
		echo:   "module tb;\ninitial begin $display(\"olleh\"); $finish; end\nendmodule",
		broken: "module tb;\ninitial begin $display(\"x\") end\nendmodule", brokenSays: "syntax error",
		crash:         "module tb;\ninitial begin $fatal(1, \"boom\"); end\nendmodule",
		loop:          "module tb;\ninteger i;\ninitial begin i = 0; forever #1 i = i + 1; end\nendmodule",
		hog:           "module tb;\nreg [63:0] m [0:(1<<26)-1];\ninteger i;\ninitial begin for (i = 0; i < (1<<26); i = i + 1) m[i] = i; $finish; end\nendmodule",
		brokenVerdict: api.VerdictCompileError},
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
			res := call(p.echo, api.FnCallLimits{CPUTimeMs: max(10000, p.cpuMs), MemoryBytes: p.memBytes},
				api.FnCallTest{Stdin: "hello\n", ExpectedOutput: &right}, api.FnCallTest{Stdin: "hello\n", ExpectedOutput: &wrong})
			if len(res.Tests) != 2 || res.Tests[0].Verdict != api.VerdictAccepted || res.Tests[1].Verdict != api.VerdictWrongAnswer {
				t.Fatalf("echo (is %s in the judge image? scripts/judge-language-packages.txt; make setup rebuilds it): verdict %s, compile %+v, tests %+v",
					p.lang, res.Verdict, res.Compile, res.Tests)
			}
			res = call(p.broken, api.FnCallLimits{CPUTimeMs: p.cpuMs, MemoryBytes: p.memBytes})
			if res.Verdict != p.brokenVerdict {
				t.Errorf("broken program: verdict %s (want %s), compile %+v, tests %+v", res.Verdict, p.brokenVerdict, res.Compile, res.Tests)
			} else if said := brokenOutput(res); p.brokenSays != "" && !strings.Contains(said, p.brokenSays) {
				t.Errorf("broken program: the diagnostics %q do not say %q", said, p.brokenSays)
			}
			if res = call(p.crash, api.FnCallLimits{CPUTimeMs: p.cpuMs, MemoryBytes: p.memBytes}); res.Verdict != api.VerdictRuntimeError {
				t.Errorf("crash: verdict %s, tests %+v", res.Verdict, res.Tests)
			}
			if res = call(p.loop, api.FnCallLimits{CPUTimeMs: max(1000, p.cpuMs/2), MemoryBytes: p.memBytes}); res.Verdict != api.VerdictTimeLimit {
				t.Errorf("endless loop: verdict %s, tests %+v", res.Verdict, res.Tests)
			}
			hogVerdict := p.hogVerdict
			if hogVerdict == "" {
				hogVerdict = api.VerdictMemoryLimit
			}
			if res = call(p.hog, api.FnCallLimits{CPUTimeMs: max(20000, p.cpuMs), MemoryBytes: 128 << 20}); res.Verdict != hogVerdict {
				t.Errorf("memory hog: verdict %s (want %s), tests %+v", res.Verdict, hogVerdict, strings.TrimSpace(res.Tests[0].Stderr))
			}
		})
	}
}

// brokenOutput is what a broken program's diagnostics say: the compiler's
// output, else the program's stderr.
func brokenOutput(res api.FnCallResult) string {
	if res.Compile != nil && res.Compile.Verdict != api.VerdictAccepted {
		return res.Compile.Output
	}
	if len(res.Tests) > 0 {
		return res.Tests[0].Stderr
	}
	return ""
}

// junit compiles every .java file and runs their JUnit 5 tests: all passing is
// accepted, a failing assertion a runtime error (the launcher exits 1) whose
// report names the test, a compile error the compiler's.
func TestJUnit(t *testing.T) {
	e := testEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const calc = "public class Calc { public static int add(int a, int b) { return a + b; } }\n"
	test := func(want int) string {
		return "import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.*;\n" +
			"class CalcTest { @Test void adds() { assertEquals(" + strconv.Itoa(want) + ", Calc.add(40, 2)); } }\n"
	}
	for _, c := range []struct {
		name, test, verdict, says string
	}{
		{"pass", test(42), api.VerdictAccepted, "1 tests successful"},
		{"fail", test(41), api.VerdictRuntimeError, "expected: <41> but was: <42>"},
		{"compile error", "class CalcTest { void f() { Calc.sub(1, 2); } }", api.VerdictCompileError, "cannot find symbol"},
	} {
		res, err := e.Call(ctx, api.FnCallRequest{Language: api.LangJUnit, Files: map[string]string{"Calc.java": calc, "CalcTest.java": c.test},
			Tests: []api.FnCallTest{{}}, Limits: api.FnCallLimits{CPUTimeMs: 10000}})
		if err != nil {
			t.Fatal(err)
		}
		said := brokenOutput(res)
		if c.verdict != api.VerdictCompileError && len(res.Tests) > 0 {
			said = res.Tests[0].Stdout // the launcher's report
		}
		if res.Verdict != c.verdict || !strings.Contains(said, c.says) {
			t.Errorf("%s: verdict %s (want %s), %q does not say %q; compile %+v", c.name, res.Verdict, c.verdict, said, c.says, res.Compile)
		}
	}
}

// pytest runs a file's tests: all passing is accepted, a failing assertion a
// runtime error (pytest exits 1) whose report shows the assertion.
func TestPytest(t *testing.T) {
	e := testEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, c := range []struct{ src, verdict, says string }{
		{"import numpy\ndef test_sum():\n    assert int(numpy.arange(4).sum()) == 6\n", api.VerdictAccepted, "1 passed"},
		{"def add(a, b):\n    return a - b\n\ndef test_add():\n    assert add(40, 2) == 42\n", api.VerdictRuntimeError, "assert 38 == 42"},
	} {
		res, err := e.Call(ctx, api.FnCallRequest{Language: api.LangPytest, Files: map[string]string{"main.py": c.src},
			Tests: []api.FnCallTest{{}}, Limits: api.FnCallLimits{CPUTimeMs: 10000}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict != c.verdict || len(res.Tests) != 1 || !strings.Contains(res.Tests[0].Stdout, c.says) {
			t.Errorf("%q: verdict %s (want %s), tests %+v", c.src, res.Verdict, c.verdict, res.Tests)
		}
	}
}
