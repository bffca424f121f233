package pull

// SetHook makes p call f at each named point of a pull or removal
// ("pull:start", "remove:refs", "remove:image", "remove:blobs").
func SetHook(p *Puller, f func(point string)) { p.hook = f }
