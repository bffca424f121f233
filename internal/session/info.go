package session

import (
	"slices"

	"github.com/dsec-dev/dsec/pkg/api"
)

// WithServices returns info with the service groups names (api.Service*) added
// to info.Services, sorted and without repeats: each implementation and
// interceptor that serves a group says so in its Info.
func WithServices(info api.Info, names ...string) api.Info {
	s := slices.Concat(info.Services, names)
	slices.Sort(s)
	info.Services = slices.Compact(s)
	return info
}
