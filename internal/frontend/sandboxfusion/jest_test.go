package sandboxfusion

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// jest runs in its own image with SandboxFusion's npm project: the request
// FnCall gets names it and runs jest on the code as a TypeScript test file.
func TestRunCodeJestRequest(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{Image: "other"})
	if code, out := post(t, h, "/run_code", `{"code":"test('x', () => {});","language":"jest","files":{"data.json":"e30="}}`); code != 200 {
		t.Fatalf("jest: %d %v", code, out)
	}
	req := f.last(t)
	if req.Language != "" || req.Image != DefaultJestImage || len(req.Cmd) != 3 || req.Cmd[0] != "/bin/sh" ||
		!strings.Contains(req.Cmd[2], "node_modules/jest/bin/jest.js") || req.Env["FORCE_COLOR"] != "0" ||
		req.Files["main.test.ts"] != "test('x', () => {});" || req.Files["data.json"] != "{}" {
		t.Errorf("jest request %+v", req)
	}
	f = &fakeFnCall{res: accepted}
	h = New(f, Options{JestImage: "mine"})
	post(t, h, "/run_code", `{"code":"","language":"jest"}`)
	if req := f.last(t); req.Image != "mine" {
		t.Errorf("image %q, want Options.JestImage", req.Image)
	}
}

// SandboxFusion's jest cases (tests/runners/test_jest.py: a passing and a
// failing suite importing @jest/globals, in TypeScript), the project's
// libraries, a syntax error, a runtime error, a timeout and a memory limit,
// on the sandboxfusion-jest image (scripts/jest-image.sh).
func TestRealJest(t *testing.T) {
	h := realHandler(t)
	dir := os.Getenv("DSEC_IMAGES_DIR")
	if dir == "" {
		dir = "/var/lib/dsec/images"
	}
	if _, err := os.Stat(filepath.Join(dir, DefaultJestImage, "rootfs", jestProject, "node_modules/jest")); err != nil {
		t.Fatalf("no %s image with jest (%v): setup.sh builds it (scripts/jest-image.sh)", DefaultJestImage, err)
	}
	const suite = "import { describe, expect, test } from '@jest/globals';\n\n" +
		"function minSubArrayLen(target: number, nums: number[]): number {\n" +
		"  let best = Infinity, sum = 0, start = 0;\n" +
		"  for (let end = 0; end < nums.length; end++) {\n" +
		"    sum += nums[end];\n" +
		"    while (sum >= target) { best = Math.min(best, end - start + 1); sum -= nums[start++]; }\n" +
		"  }\n" +
		"  return BODY;\n}\n\n" +
		"describe('minSubArrayLen', () => {\n" +
		"  test('shortest window', () => {\n    expect(minSubArrayLen(7, [2, 3, 1, 2, 4, 3])).toBe(2);\n    expect(minSubArrayLen(15, [1, 2, 3, 4, 5])).toBe(5);\n  });\n" +
		"  test('none', () => {\n    expect(minSubArrayLen(100, [1, 2, 3])).toBe(0);\n  });\n});\n"
	mem := `,"run_timeout":60,"memory_limit_MB":1024`
	runModeCases(t, h, "jest", []modeCase{
		{name: "pass", code: strings.Replace(suite, "BODY", "best === Infinity ? 0 : best", 1), extra: mem,
			status: StatusSuccess, runStatus: CmdFinished, stdout: "> FORCE_COLOR=0 jest", stderr: "Tests:       2 passed, 2 total"},
		// The project's libraries: jsdom, testing-library with jest-dom's
		// matchers, lodash, js-md5.
		{name: "libraries", code: "import { JSDOM } from 'jsdom';\nimport { getByText } from '@testing-library/dom';\nimport '@testing-library/jest-dom';\n" +
			"import _ from 'lodash';\nimport md5 from 'js-md5';\n\ntest('dom', () => {\n" +
			"  const dom = new JSDOM('<div><button>Go</button></div>');\n  const b = getByText(dom.window.document.body as any, 'Go');\n" +
			"  expect(b.tagName).toBe('BUTTON');\n  expect(b).toHaveTextContent('Go');\n  expect(_.sum([1, 2])).toBe(3);\n" +
			"  expect(md5('')).toBe('d41d8cd98f00b204e9800998ecf8427e');\n});\n", extra: mem,
			status: StatusSuccess, runStatus: CmdFinished, stderr: "Tests:       1 passed, 1 total"},
		{name: "failing assertion", code: strings.Replace(suite, "BODY", "0", 1), extra: mem,
			status: StatusFailed, runStatus: CmdFinished, stderr: "Tests:       1 failed, 1 passed, 2 total", exitNonZero: true},
		{name: "syntax error", code: "test('x', () => {\n  const a: number = ;\n});\n", extra: mem,
			status: StatusFailed, runStatus: CmdFinished, stderr: "Test suite failed to run", exitNonZero: true},
		{name: "runtime error", code: "test('x', () => {\n  const o: any = undefined;\n  expect(o.field).toBe(1);\n});\n", extra: mem,
			status: StatusFailed, runStatus: CmdFinished, stderr: "TypeError: Cannot read properties of undefined", exitNonZero: true},
		{name: "timeout", code: "test('spins', () => {\n  for (;;) {}\n});\n", extra: `,"run_timeout":3`,
			status: StatusFailed, runStatus: CmdTimeLimit},
		// 600 MB of buffers: passes without the limit, killed at 256 MB.
		{name: "memory", code: "test('grows', () => {\n  const keep: Buffer[] = [];\n  for (let i = 0; i < 12; i++) keep.push(Buffer.alloc(50 << 20, 1));\n  expect(keep.length).toBe(12);\n});\n",
			extra: `,"run_timeout":60,"memory_limit_MB":256`, status: StatusFailed, runStatus: CmdFinished, exitNonZero: true},
	})
}
