package session

// Interceptor wraps a Service in a cross-cutting concern (the trajectory log,
// metrics and tracing, project quotas): it returns a Service that embeds next,
// so every method it does not change is forwarded as it is, and overrides the
// methods it observes or changes.
type Interceptor func(next Service) Service

// Chain returns base wrapped in interceptors, the first outermost: a call goes
// through interceptors[0], then interceptors[1], ..., then base. Every role
// (dsec server, a cluster node, the API tier) composes its service with it, so
// each sees the same concerns in the same order.
func Chain(base Service, interceptors ...Interceptor) Service {
	svc := base
	for i := len(interceptors) - 1; i >= 0; i-- {
		if interceptors[i] != nil {
			svc = interceptors[i](svc)
		}
	}
	return svc
}
