package image

// Roles a layer plays in an image, base first.
const (
	RoleBase      = "base"
	RoleToolkit   = "toolkit"
	RoleWorkspace = "workspace"
)

// Layer is one read-only layer of an image: the one layer type of dsec. A
// directory layer names a tree on this node (Dir); an EROFS layer names a blob
// (Digest, in the blob store Store) and gets a Dir once it is mounted. The layer
// index, environment manifests, image.json, layerd's acquire requests and the
// results of `dsec image build` all use it.
type Layer struct {
	Role string `json:"role,omitempty"` // RoleBase, RoleToolkit or RoleWorkspace
	// Name is the layer's name in the layer index (`dsec image build --name`).
	Name   string `json:"name,omitempty"`
	Digest string `json:"digest,omitempty"` // sha256 of the EROFS blob; "" for a directory layer
	// Dir is a directory layer's tree (relative to the image's directory in
	// image.json, absolute once resolved), or where an EROFS layer is mounted.
	Dir string `json:"dir,omitempty"`
	// Store is the blob store spec holding the blob (blob.ParseSpec); in a
	// manifest it defaults to the manifest's blob_store.
	Store string `json:"store,omitempty"`
	Size  int64  `json:"size,omitempty"` // bytes of the blob, if known
	// Index is the digest of the layer's chunk index (blob.ChunkIndex), if any:
	// nodes verify each chunk they fetch against it.
	Index string `json:"index,omitempty"`
	// PrefetchList is the digest of the layer's recorded access list, if any
	// (`dsec image record`): a node mounting the layer prefetches those chunks.
	PrefetchList string `json:"prefetch_list,omitempty"`
	// Config is the image config the layer was built from (an OCI image's
	// config), if any. An image's config merges its layers' configs, base first
	// (see Merge).
	Config *Config `json:"config,omitempty"`
}

// Kind is "erofs" for a blob layer, "dir" for a directory layer.
func (l Layer) Kind() string {
	if l.Digest != "" {
		return "erofs"
	}
	return "dir"
}

// Roles sets the role of each of layers (base first): the first is the base,
// the last the workspace if workspace is set, the rest toolkits.
func Roles(layers []Layer, workspace bool) {
	for i := range layers {
		switch {
		case i == 0:
			layers[i].Role = RoleBase
		case workspace && i == len(layers)-1:
			layers[i].Role = RoleWorkspace
		default:
			layers[i].Role = RoleToolkit
		}
	}
}
