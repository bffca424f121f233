package cliflag

import (
	"strings"

	"github.com/dsec-dev/dsec/pkg/api"
)

// SplitList flattens repeatable flags that may also hold comma-separated lists.
func SplitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// NetworkPolicy builds a policy from --allow and --rule; nil when neither is set.
func NetworkPolicy(allow, rules []string) *api.NetworkPolicy {
	if len(allow) == 0 && len(rules) == 0 {
		return nil
	}
	return &api.NetworkPolicy{Allow: SplitList(allow), Rules: SplitList(rules)}
}
