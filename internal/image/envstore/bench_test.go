package envstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dsec-dev/dsec/internal/image/envstore"
)

// BenchmarkCompose: one compose (two named layers resolved, checked in the
// blob store, the manifest written conditionally) on each state.
func BenchmarkCompose(b *testing.B) {
	for _, k := range states {
		b.Run(k, func(b *testing.B) {
			s, bs := setupState(b, k)
			buildLayer(b, bs, s, "base", "v1")
			buildLayer(b, bs, s, "tools", "t")
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Compose(ctx, fmt.Sprint("env-", i%100), "base", []string{"tools"}, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkResolveEnv: what a node does per create from an environment.
func BenchmarkResolveEnv(b *testing.B) {
	for _, k := range states {
		b.Run(k, func(b *testing.B) {
			s, bs := setupState(b, k)
			buildLayer(b, bs, s, "base", "v1")
			if _, err := s.Compose(context.Background(), "env", "base", nil, ""); err != nil {
				b.Fatal(err)
			}
			r := envstore.Images{Store: s, DefaultSpec: "dir:/srv/blobs"}
			b.ResetTimer()
			for range b.N {
				if _, err := r.ResolveEnv("env"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
