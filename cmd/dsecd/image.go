package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/agent"
	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/cliflag"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/progress"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// imageCmd is `dsec image`: layers and environments on this node's data dir,
// or with --etcd in a cluster's etcd (every node and API server sees them).
func imageCmd() *cobra.Command {
	var dataDir, blobSpec string
	var ec cluster.ClientConfig
	c := &cobra.Command{Use: "image", Short: "Build layers and compose environments (EROFS layers in a blob store)",
		Long: `Build layers and compose environments. Without --etcd they live in this
machine's data dir (DATA_DIR/envs, what dsec server uses). With --etcd ENDPOINTS
(or $DSEC_ETCD) they live in the cluster's etcd, so one compose serves every node
and API server; the layers' blobs then go to the cluster's shared blob store,
which --blob-store (or $DSEC_BLOB_STORE) must name: s3://... or dir:PATH on a
mount every node shares. rm is refused while a sandbox on any node uses the
environment.`}
	pf := c.PersistentFlags()
	pf.StringVar(&dataDir, "data-dir", "/var/lib/dsec", "node data directory")
	pf.StringVar(&blobSpec, "blob-store", os.Getenv("DSEC_BLOB_STORE"), "dir:PATH | posix:PATH | s3://BUCKET?endpoint=HOST:PORT&prefix=P&region=R&insecure=1 (keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY); default $DSEC_BLOB_STORE, else dir:DATA_DIR/blobs")
	etcdFlags(pf, &ec)
	ec.Endpoints = os.Getenv("DSEC_ETCD")
	pf.Lookup("etcd").DefValue = ""
	pf.Lookup("etcd").Usage = "keep environments and layers in this cluster's etcd (client URLs, comma-separated; default $DSEC_ETCD; empty: DATA_DIR/envs)"
	open := func(cmd *cobra.Command) (*envstore.Store, blob.Store, error) {
		dirs := paths.New(dataDir)
		if ec.Endpoints != "" {
			// Reading and removing names needs no blob store; writing layers
			// and resolving them does, and it must be the cluster's.
			var bs blob.Store
			switch needsBlobs := cmd.Name() != "ls" && cmd.Name() != "inspect" && cmd.Name() != "rm"; {
			case blobSpec != "":
				var err error
				if bs, err = OpenBlobStore(blobSpec, dataDir); err != nil {
					return nil, nil, err
				}
			case needsBlobs:
				return nil, nil, errdefs.Invalid("dsec image %s --etcd needs --blob-store (or $DSEC_BLOB_STORE): the blob store every node of the cluster reads layers from", cmd.Name())
			}
			cli, err := cluster.Connect(cmd.Context(), ec)
			if err != nil {
				return nil, nil, err
			}
			context.AfterFunc(cmd.Context(), func() { cli.Close() })
			es := envstore.New(envstore.NewEtcdState(cli, ""), bs)
			es.Spec = blobSpec
			return es, bs, nil
		}
		bs, err := OpenBlobStore(blobSpec, dataDir)
		if err != nil {
			return nil, nil, err
		}
		es, err := envstore.Open(dirs.EnvStore(), bs)
		if err != nil {
			return nil, nil, err
		}
		es.Spec = dirs.BlobSpec(blobSpec)
		es.InUse = func(name string) bool {
			used, err := agent.ImagesInUse(dataDir)
			return err != nil || used[name] > 0 // unreadable records: refuse to be safe
		}
		return es, bs, nil
	}

	var from, name string
	var df dockerfileFlags
	build := &cobra.Command{Use: "build (--from SOURCE --name NAME | -t NAME [-f Dockerfile] [--build-arg K=V]... CONTEXT)",
		Short: "Build a layer from dir:PATH|tar:PATH|oci:REF|oci-layout:PATH|docker-archive:PATH (an OCI image's config, env/working dir/user/entrypoint/cmd, is kept with it), or an environment from a Dockerfile on the server",
		Long: `With --from, build a layer on this machine from a source. With -t and a
context directory, send the context and the Dockerfile to the server
($DSEC_ADDR, $DSEC_TOKEN), which builds environment NAME: FROM an environment,
image or registry reference, RUN in a container sandbox, COPY/ADD of context
files, ENV/ARG/WORKDIR/USER/SHELL/CMD/ENTRYPOINT/EXPOSE/LABEL into the image
config; each RUN/COPY step is a layer cached for the next build.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if df.tag != "" || len(args) > 0 {
				return df.run(cmd.Context(), args)
			}
			if from == "" || name == "" {
				return errdefs.Invalid("dsec image build: --from SOURCE --name NAME, or -t NAME CONTEXT for a Dockerfile build")
			}
			es, bs, err := open(cmd)
			if err != nil {
				return err
			}
			src, err := layer.ParseSource(from)
			if err != nil {
				return err
			}
			opts := layer.Options{TempDir: os.Getenv("TMPDIR")}
			// Bytes read from the source (an OCI source's layers as they are fetched),
			// on a terminal only.
			bar := progress.NewBytes(os.Stderr, fmt.Sprint(src), 0)
			if bar != nil {
				opts.Progress = bar.Set
			}
			l, err := layer.Build(cmd.Context(), src, bs, opts)
			bar.Finish()
			if err != nil {
				return err
			}
			if err := es.PutLayer(cmd.Context(), envstore.Named(name, l.Source, l.Layer)); err != nil {
				return err
			}
			fmt.Printf("%s %s %d bytes (%d entries, %.1fs)\n", name, l.Digest, l.Size, l.Entries, l.BuildTime.Seconds())
			if c := l.Config; c != nil {
				fmt.Printf("image config kept: env %q, working_dir %q, user %q, entrypoint %q, cmd %q\n", c.Env, c.WorkingDir, c.User, c.Entrypoint, c.Cmd)
			}
			return nil
		}}
	build.Flags().StringVar(&from, "from", "", "source")
	build.Flags().StringVar(&name, "name", "", "layer name")
	df.flags(build)

	var base, workspace string
	var toolkits []string
	compose := &cobra.Command{Use: "compose --name ENV --base LAYER [--toolkit LAYER]... [--workspace LAYER]", Short: "Compose an environment from layers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			es, _, err := open(cmd)
			if err != nil {
				return err
			}
			e, err := es.Compose(cmd.Context(), name, base, toolkits, workspace)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %d layers\n", e.Name, len(e.Layers))
			return nil
		}}
	compose.Flags().StringVar(&name, "name", "", "environment name")
	compose.Flags().StringVar(&base, "base", "", "base layer (name or digest)")
	compose.Flags().StringArrayVar(&toolkits, "toolkit", nil, "toolkit layer, bottom to top (repeatable)")
	compose.Flags().StringVar(&workspace, "workspace", "", "workspace layer")
	compose.MarkFlagRequired("name")
	compose.MarkFlagRequired("base")

	ls := &cobra.Command{Use: "ls", Short: "List environments and layers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			es, _, err := open(cmd)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tNAME\tLAYERS/DIGEST\tSIZE\tLAST USED")
			envs, _ := es.List(cmd.Context())
			for _, n := range envs {
				e, err := es.Get(cmd.Context(), n)
				if err != nil {
					continue
				}
				var sz int64
				for _, l := range e.Layers {
					sz += l.Size
				}
				fmt.Fprintf(tw, "env\t%s\t%d layers\t%d\t-\n", n, len(e.Layers), sz)
			}
			// Images pulled by reference on this node (`dsec image pull`, create
			// --image REF): the node's image cache, with each image's last use.
			pulled, _ := (&pull.Puller{Dir: paths.New(dataDir).Pulls()}).PulledRefs()
			for _, img := range pulled {
				var sz int64
				for _, l := range img.Layers {
					sz += l.Size
				}
				used := "-"
				if !img.LastUsed.IsZero() {
					used = img.LastUsed.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "ref\t%s\t%s\t%d\t%s\n", img.Name, img.Digest, sz, used)
			}
			layers, _ := es.ListLayers(cmd.Context())
			for _, n := range layers {
				if l, err := es.Layer(cmd.Context(), n); err == nil {
					fmt.Fprintf(tw, "layer\t%s\t%s\t%d\t-\n", n, l.Digest[:19], l.Size)
				}
			}
			return tw.Flush()
		}}

	var asJSON bool
	var imagesDir string
	inspect := &cobra.Command{Use: "inspect NAME [--json]", Short: "Show an image's, an environment's or a layer's details (layers base first, image config)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			es, _, err := open(cmd)
			if err != nil {
				return err
			}
			if imagesDir == "" {
				imagesDir = cmp.Or(os.Getenv("DSEC_IMAGES_DIR"), daemon.DefaultImagesDir)
			}
			var v any
			if m, derr := image.ReadManifest(filepath.Join(imagesDir, args[0], image.ManifestFile)); derr == nil {
				// A directory image hides an environment of the same name, as on the server.
				img, err := (&image.Store{Dir: imagesDir}).Resolve(args[0])
				if err != nil {
					return err
				}
				v = struct {
					api.Image
					Manifest image.Manifest `json:"manifest"`
				}{img.View(nil, false), m}
			} else if e, err := es.Get(cmd.Context(), args[0]); err == nil {
				// As GET /v1/images/{name} shows it (layers base first, with this
				// node's accounting, and the image config), plus the manifest.
				img, err := envstore.Images{Store: es, DefaultSpec: es.Spec}.ResolveEnv(args[0])
				if err != nil {
					return err
				}
				usage, _ := lazy.Mounter{Client: lazy.NewClient(lazy.Config{Root: paths.New(dataDir).Layers()})}.LayerUsage(cmd.Context())
				v = struct {
					api.Image
					Manifest image.Manifest `json:"manifest"`
				}{img.View(usage, false), e}
			} else if l, lerr := es.Layer(cmd.Context(), args[0]); lerr == nil {
				v = l
			} else if errdefs.CodeOf(err) == api.CodeNotFound && errdefs.CodeOf(lerr) == api.CodeNotFound {
				return errdefs.NotFound("no image in %s, environment or layer named %q", imagesDir, args[0])
			} else {
				return err
			}
			b, _ := json.MarshalIndent(v, "", "  ") // the JSON is the readable form too
			fmt.Println(string(b))
			return nil
		}}
	inspect.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	inspect.Flags().StringVar(&imagesDir, "images-dir", "", "directory images (default $DSEC_IMAGES_DIR or "+daemon.DefaultImagesDir+")")

	rm := &cobra.Command{Use: "rm NAME|REF|DIGEST", Short: "Remove an environment or a layer name, or an image pulled by reference (or its digest) from the server's image cache (refused while a sandbox uses it)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if image.IsReference(args[0]) {
				// The image cache is the server's (its pulls, its sandboxes).
				cl, err := client.FromEnv()
				if err != nil {
					return err
				}
				if err := cl.DeleteImage(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Printf("removed %s\n", args[0])
				return nil
			}
			es, _, err := open(cmd)
			if err != nil {
				return err
			}
			return es.Remove(cmd.Context(), args[0])
		}}
	record := &cobra.Command{Use: "record ENV", Short: "Store the chunks this node's sandboxes read from ENV's layers as their prefetch lists (nodes that mount the layers later fetch those chunks ahead)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			es, _, err := open(cmd)
			if err != nil {
				return err
			}
			lc := lazy.NewClient(lazy.Config{Root: paths.New(dataDir).Layers()})
			recorded, err := es.RecordPrefetch(cmd.Context(), lc, args[0])
			for _, r := range recorded {
				fmt.Printf("%s %s: %d chunks (%.1f MB) → prefetch list %s\n", r.Role, r.Digest[:19], r.Chunks, float64(r.Bytes)/1e6, r.List[:19])
			}
			if err != nil {
				return err
			}
			return nil
		}}
	var rebaseFrom, rebaseTo string
	rebase := &cobra.Command{Use: "rebase --from LAYER --to LAYER", Short: "Point every environment that uses one layer at another (a new base or toolkit: one build, then small manifest rewrites; running sandboxes keep their layers)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			es, _, err := open(cmd)
			if err != nil {
				return err
			}
			from, err := es.ResolveLayer(cmd.Context(), rebaseFrom)
			if err != nil {
				return err
			}
			to, err := es.ResolveLayer(cmd.Context(), rebaseTo)
			if err != nil {
				return err
			}
			t0 := time.Now()
			st, err := es.Rebase(cmd.Context(), from.Digest, to)
			if err != nil {
				return err
			}
			fmt.Printf("%d of %d environments now use %s instead of %s (%d bytes of manifests, %.3f s)\n",
				st.Rewritten, st.Scanned, to.Digest[:19], from.Digest[:19], st.BytesWritten, time.Since(t0).Seconds())
			return nil
		}}
	rebase.Flags().StringVar(&rebaseFrom, "from", "", "the layer to replace (name or digest)")
	rebase.Flags().StringVar(&rebaseTo, "to", "", "the new layer (name or digest)")
	rebase.MarkFlagRequired("from")
	rebase.MarkFlagRequired("to")
	pullCmd := &cobra.Command{Use: "pull REF", Short: "Fetch an image by registry reference on the server (REGISTRY/REPO[:TAG] or @sha256:DIGEST; short names as Docker: python:3.12 is docker.io/library/python:3.12) and print its digest", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			stop := progress.WatchPull(cmd.Context(), os.Stderr, args[0], cl.WatchPull)
			img, err := cl.PullImage(cmd.Context(), args[0])
			stop()
			if err != nil {
				return err
			}
			fmt.Printf("%s %s (%d layers, %d bytes)\n", img.Ref, img.Digest, len(img.Layers), img.Size)
			return nil
		}}
	prune := &cobra.Command{Use: "prune", Short: "Remove every image pulled by reference and every cached build step that no sandbox or build uses from the server's caches", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			res, err := cl.PruneImages(cmd.Context())
			if err != nil {
				return err
			}
			for _, img := range res.Removed {
				fmt.Printf("removed %s %s (%d bytes)\n", img.Name, img.Digest, img.Size)
			}
			for _, img := range res.InUse {
				fmt.Printf("kept %s %s: a sandbox uses it\n", img.Name, img.Digest)
			}
			fmt.Printf("%d images removed, %d bytes\n", len(res.Removed), res.Bytes)
			if bc := res.BuildCache; bc != nil {
				fmt.Printf("build cache: %d steps removed, %d bytes; %d kept (in use)\n", bc.Entries, bc.Bytes, bc.Kept)
			}
			return nil
		}}
	c.AddCommand(build, compose, ls, inspect, rm, record, rebase, pullCmd, prune)
	return c
}

// OpenBlobStore opens a --blob-store spec ("" = dir:DATA_DIR/blobs; see
// blob.ParseSpec), creating a missing local directory.
func OpenBlobStore(spec, dataDir string) (blob.Store, error) {
	return blob.Open(paths.New(dataDir).BlobSpec(spec), true)
}

// imageCacheBytesUsage describes --image-cache-bytes (dsec server, dsec agent).
const imageCacheBytesUsage = "byte budget of the images pulled by registry reference (e.g. 50g; 0: no limit): a pull that puts the cache over it evicts the least recently used images no sandbox uses"

// blobStoreBytesUsage describes --blob-store-bytes (dsec agent).
const blobStoreBytesUsage = "byte budget of the shared --blob-store (e.g. 500g; 0: no limit; set the same on every node): the least recently used blobs no node holds and no environment names are evicted"

// buildCacheBytesUsage describes --build-cache-bytes (dsec server, dsec agent).
const buildCacheBytesUsage = "byte budget of the Dockerfile build cache's layers that no image holds (e.g. 20g; 0: no limit; default 10g): a build that puts the cache over it evicts the least recently used steps no build or sandbox uses"

// byteSize is a size flag ("50g", "1048576"; cliflag.ParseSize).
type byteSize struct{ p *int64 }

func imageCacheBytes(p *int64) byteSize { return byteSize{p} }

func (b byteSize) String() string {
	if b.p == nil || *b.p == 0 {
		return "0"
	}
	return strconv.FormatInt(*b.p, 10)
}

func (b byteSize) Set(s string) error {
	n, err := cliflag.ParseSize(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

func (byteSize) Type() string { return "size" }
