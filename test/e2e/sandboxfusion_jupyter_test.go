package e2e

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSandboxFusionJupyter drives SandboxFusion's POST /run_jupyter through
// the server: the cases of SandboxFusion's Jupyter mode documentation (one
// kernel for all the cells, a cell's value and figures on display, an
// exception that does not stop the cells after it), files in and out, the
// total_timeout, and bad input as the front end's other 400s.
func TestSandboxFusionJupyter(t *testing.T) {
	if _, err := os.Stat(filepath.Join(imagesDir, "code-interpreter-v1", "image.json")); err != nil {
		t.Skip("no code-interpreter-v1 image (run `make setup`)")
	}
	sfAddr := freePort(t)
	n := startNode(t, "--sandboxfusion-listen", sfAddr)
	open := "http://" + sfAddr

	cells := func(out map[string]any) []map[string]any {
		t.Helper()
		raw, _ := out["cells"].([]any)
		var cs []map[string]any
		for _, c := range raw {
			cs = append(cs, c.(map[string]any))
		}
		return cs
	}

	t.Run("cells", func(t *testing.T) {
		code, out := sfPost(t, open+"/run_jupyter", "", map[string]any{"kernel": "python3", "cells": []string{
			`a = "hello"`,
			`a`,
			`print(a)`,
			"import sys\nsys.stderr.write(\"This is an error message\\n\")",
			`assert False`,
			`print(a * 2)`,
			"import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()",
		}})
		if code != 200 || out["status"] != "Success" {
			t.Fatalf("%d %v", code, out)
		}
		if d := out["driver"].(map[string]any); d["status"] != "Finished" || d["return_code"] != 0.0 {
			t.Fatalf("driver %v", d)
		}
		cs := cells(out)
		if len(cs) != 7 {
			t.Fatalf("%d cells: %v", len(cs), cs)
		}
		if cs[0]["stdout"] != "" || len(cs[0]["display"].([]any)) != 0 || len(cs[0]["error"].([]any)) != 0 {
			t.Errorf("cell 0: %v", cs[0])
		}
		if d := cs[1]["display"].([]any); len(d) != 1 || d[0].(map[string]any)["text/plain"] != "'hello'" {
			t.Errorf("cell 1 display: %v", cs[1])
		}
		if cs[2]["stdout"] != "hello\n" {
			t.Errorf("cell 2: %v", cs[2])
		}
		if cs[3]["stderr"] != "This is an error message\n" {
			t.Errorf("cell 3: %v", cs[3])
		}
		if e := cs[4]["error"].([]any); len(e) != 1 || e[0].(map[string]any)["ename"] != "AssertionError" {
			t.Errorf("cell 4 error: %v", cs[4])
		}
		if cs[5]["stdout"] != "hellohello\n" {
			t.Errorf("cell 5 (after the exception): %v", cs[5])
		}
		png := false
		for _, d := range cs[6]["display"].([]any) {
			if s, _ := d.(map[string]any)["image/png"].(string); s != "" {
				b, err := base64.StdEncoding.DecodeString(s)
				png = err == nil && strings.HasPrefix(string(b), "\x89PNG")
			}
		}
		if !png {
			t.Errorf("cell 6: no image/png display: %v", cs[6])
		}
	})

	t.Run("files", func(t *testing.T) {
		code, out := sfPost(t, open+"/run_jupyter", "", map[string]any{
			"cells":       []string{"print(open('data/in.txt').read().upper())", "open('out.txt', 'w').write('written')"},
			"files":       map[string]any{"data/in.txt": base64.StdEncoding.EncodeToString([]byte("from files"))},
			"fetch_files": []string{"out.txt", "missing.txt"},
		})
		if code != 200 || out["status"] != "Success" {
			t.Fatalf("%d %v", code, out)
		}
		if cs := cells(out); cs[0]["stdout"] != "FROM FILES\n" {
			t.Errorf("cell 0: %v", cs[0])
		}
		files := out["files"].(map[string]any)
		if files["out.txt"] != base64.StdEncoding.EncodeToString([]byte("written")) || len(files) != 1 {
			t.Errorf("files %v", files)
		}
	})

	t.Run("total_timeout", func(t *testing.T) {
		code, out := sfPost(t, open+"/run_jupyter", "", map[string]any{
			"cells": []string{"print(1)", "import time\ntime.sleep(60)"}, "total_timeout": 1})
		if code != 200 || out["status"] != "Failed" || len(cells(out)) != 0 {
			t.Fatalf("%d %v", code, out)
		}
		if d := out["driver"].(map[string]any); d["status"] != "TimeLimitExceeded" || d["return_code"] != nil {
			t.Fatalf("driver %v", d)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, body := range []map[string]any{
			{"cells": []string{"1"}, "kernel": "julia"},
			{"kernel": "python3"},
			{"cells": []string{"1"}, "total_timeout": 0},
			{"cells": []string{"1"}, "files": map[string]any{"../x": ""}},
		} {
			code, out := sfPost(t, open+"/run_jupyter", "", body)
			if code != 400 || out["code"] != "invalid_argument" || out["detail"] == "" {
				t.Errorf("%v: %d %v", body, code, out)
			}
		}
	})

	t.Run("main listener wants the token", func(t *testing.T) {
		body := map[string]any{"cells": []string{"print(2 + 2)"}}
		if code, out := sfPost(t, "http://"+n.addr+"/run_jupyter", "", body); code != 401 {
			t.Fatalf("no token: %d %v", code, out)
		}
		code, out := sfPost(t, "http://"+n.addr+"/run_jupyter", n.token, body)
		if code != 200 || out["status"] != "Success" || cells(out)[0]["stdout"] != "4\n" {
			t.Fatalf("%d %v", code, out)
		}
	})
}
