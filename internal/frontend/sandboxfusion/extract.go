package sandboxfusion

import (
	"regexp"
	"strings"
)

// Extraction priorities, highest wins (SandboxFusion's order).
const (
	prioFenced     = 30
	prioIncomplete = 20
	prioHeuristic  = 10
)

type codeBlock struct {
	priority int
	language string
	code     string
}

var (
	fencedRe     = regexp.MustCompile("(?s)```([^\n]*)\n(.*?)\n\\s*```")
	incompleteRe = regexp.MustCompile("(?s)```([^\n]*)\n(.*)")
	pyDefRe      = regexp.MustCompile(`(?m)(?:^(?:import|from|#)[^\n]+\n)*^(?:def|class) [^\n]+\n(?:\s+[^\n]+\n)+`)
	sqlRe        = regexp.MustCompile(`(?mi)^\s*(?:select|with\s[^\n]+as)[^;]*`) // SandboxFusion's extract_sql
)

// aliases maps a fence's info string to a SandboxFusion language name (a read-only table).
var aliases = map[string]string{
	"python": "python", "Python": "python", "py": "python", "Python3": "python", "python3": "python", "PY": "python",
	"cpp": "cpp", "c++": "cpp", "C++": "cpp", "Cpp": "cpp", "CPP": "cpp",
	"go": "go", "Go": "go",
	"bash": "bash", "Bash": "bash", "BASH": "bash", "sh": "bash", "shell": "bash",
	"javascript": "nodejs", "Javascript": "nodejs", "JavaScript": "nodejs", "JS": "nodejs", "js": "nodejs",
	"java": "java", "Java": "java",
	"rust": "rust", "Rust": "rust", "rs": "rust",
	"c": "c", "C": "c",
	"sql": "sql", "SQL": "sql", "Sql": "sql",
}

// extractCode picks the program out of a model's completion as SandboxFusion's
// default extractor does: every fenced block, then an unterminated fence, then a
// heuristic (Python definitions, a bash script); of the highest priority found,
// the first block in the target language, else the first block. It returns the
// code and how it was found ("fenced", "incomplete_fenced", "heuristic", "empty").
func extractCode(completion, language string) (string, string) {
	var blocks []codeBlock
	for _, m := range fencedRe.FindAllStringSubmatch(completion, -1) {
		blocks = append(blocks, codeBlock{prioFenced, aliases[strings.TrimSpace(m[1])], m[2]})
	}
	for _, m := range heuristic(completion, language) {
		blocks = append(blocks, codeBlock{prioHeuristic, language, m})
	}
	for _, m := range incompleteRe.FindAllStringSubmatch(completion, -1) {
		blocks = append(blocks, codeBlock{prioIncomplete, aliases[strings.TrimSpace(m[1])], m[2]})
	}
	if len(blocks) == 0 {
		return "", "empty"
	}
	best := 0
	for _, b := range blocks {
		best = max(best, b.priority)
	}
	var first *codeBlock
	for i := range blocks {
		b := &blocks[i]
		if b.priority != best {
			continue
		}
		if first == nil {
			first = b
		}
		if b.language == language {
			return b.code, kindOf(best)
		}
	}
	return first.code, kindOf(best)
}

func kindOf(priority int) string {
	switch priority {
	case prioFenced:
		return "fenced"
	case prioIncomplete:
		return "incomplete_fenced"
	default:
		return "heuristic"
	}
}

// heuristic finds unfenced code: Python function and class definitions (with the
// imports above them), SQL queries (from SELECT or WITH ... AS to the first
// ";"), or the whole text as a bash script.
func heuristic(text, language string) []string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	code := strings.Join(lines, "\n") + "\n"
	switch language {
	case "python":
		return pyDefRe.FindAllString(code, -1)
	case "sql":
		return sqlRe.FindAllString(code, -1)
	case "bash":
		return []string{code}
	}
	return nil
}
