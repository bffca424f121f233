package driver

import (
	"fmt"
	"slices"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Registry holds one driver per backend name. It is built once at start-up
// and read-only afterwards.
type Registry struct {
	drivers map[string]Driver
	names   []string // registration order; the first is the default backend
}

// NewRegistry registers drivers under their Name; the first is the default. Two
// drivers with one name are an error.
func NewRegistry(drivers ...Driver) (*Registry, error) {
	r := &Registry{drivers: map[string]Driver{}}
	for _, d := range drivers {
		name := d.Name()
		if name == "" {
			return nil, fmt.Errorf("driver: a driver without a name")
		}
		if _, dup := r.drivers[name]; dup {
			return nil, fmt.Errorf("driver: backend %q registered twice", name)
		}
		r.drivers[name] = d
		r.names = append(r.names, name)
	}
	if len(r.names) == 0 {
		return nil, fmt.Errorf("driver: no drivers")
	}
	return r, nil
}

// Get returns the driver of backend; "" is the default backend. An unknown
// backend is invalid_argument, naming the ones this node has.
func (r *Registry) Get(backend string) (Driver, error) {
	if backend == "" {
		backend = r.names[0]
	}
	d, ok := r.drivers[backend]
	if !ok {
		return nil, errdefs.New(api.CodeInvalidArgument, "backend %q is not available on this node (have %v)", backend, r.names)
	}
	return d, nil
}

// Default is the name of the default backend.
func (r *Registry) Default() string { return r.names[0] }

// Names lists the backends in registration order.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

// All returns the drivers in registration order.
func (r *Registry) All() []Driver {
	out := make([]Driver, 0, len(r.names))
	for _, n := range r.names {
		out = append(out, r.drivers[n])
	}
	return out
}
