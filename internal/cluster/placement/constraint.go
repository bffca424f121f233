package placement

import (
	"sort"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Constraint requires a node label to have a value: key=value.
type Constraint struct {
	Key, Value string
}

func (c Constraint) String() string { return c.Key + "=" + c.Value }

// Limits on label syntax (the Kubernetes label limits, which operators know).
const (
	maxKeyLen   = 253
	maxValueLen = 63
)

// ParseConstraint parses one "key=value". Keys are 1 to 253 characters of letters,
// digits, '.', '_', '-' and '/', starting and ending with a letter or digit; values
// are up to 63 characters of letters, digits, '.', '_' and '-' (empty matches a label
// set to the empty string). Spaces around key and value are ignored.
func ParseConstraint(s string) (Constraint, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return Constraint{}, errdefs.Invalid("label constraint %q: want key=value", s)
	}
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if err := checkKey(k); err != nil {
		return Constraint{}, errdefs.Invalid("label constraint %q: key %s", s, err)
	}
	if err := checkValue(v); err != nil {
		return Constraint{}, errdefs.Invalid("label constraint %q: value %s", s, err)
	}
	return Constraint{Key: k, Value: v}, nil
}

// ParseConstraints parses a comma-separated list ("zone=a,pool=gpu"); every
// constraint must match. An empty string is no constraint. The same key twice with
// different values is refused, since no node could match; the result is sorted by
// key with duplicates removed.
func ParseConstraints(s string) ([]Constraint, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Constraint
	for _, part := range strings.Split(s, ",") {
		c, err := ParseConstraint(part)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return normalize(out)
}

// FormatConstraints is the inverse of ParseConstraints.
func FormatConstraints(cs []Constraint) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ",")
}

// normalize validates cs, sorts it by key and drops exact duplicates.
func normalize(cs []Constraint) ([]Constraint, error) {
	out := make([]Constraint, 0, len(cs))
	for _, c := range cs {
		if err := checkKey(c.Key); err != nil {
			return nil, errdefs.Invalid("label constraint %q: key %s", c.String(), err)
		}
		if err := checkValue(c.Value); err != nil {
			return nil, errdefs.Invalid("label constraint %q: value %s", c.String(), err)
		}
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	w := 0
	for i, c := range out {
		if i > 0 && c.Key == out[w-1].Key {
			if c.Value != out[w-1].Value {
				return nil, errdefs.Invalid("label constraints %s and %s: a label has one value, no node can match both", out[w-1], c)
			}
			continue
		}
		out[w] = c
		w++
	}
	return out[:w], nil
}

type syntaxError string

func (e syntaxError) Error() string { return string(e) }

func checkKey(k string) error {
	switch {
	case k == "":
		return syntaxError("is empty")
	case len(k) > maxKeyLen:
		return syntaxError("is longer than 253 characters")
	case !alnum(k[0]) || !alnum(k[len(k)-1]):
		return syntaxError("must start and end with a letter or digit")
	}
	for i := 0; i < len(k); i++ {
		if b := k[i]; !alnum(b) && b != '.' && b != '_' && b != '-' && b != '/' {
			return syntaxError("has a character other than letters, digits, '.', '_', '-', '/'")
		}
	}
	return nil
}

func checkValue(v string) error {
	if len(v) > maxValueLen {
		return syntaxError("is longer than 63 characters")
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; !alnum(b) && b != '.' && b != '_' && b != '-' {
			return syntaxError("has a character other than letters, digits, '.', '_', '-'")
		}
	}
	return nil
}

func alnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}
