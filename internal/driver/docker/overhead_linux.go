package docker

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// Overhead is what a sandbox of spec costs beyond its limits
// (sandbox.Overheader): admission counts it.
func (d *Driver) Overhead(spec sandbox.Spec) sandbox.Overhead {
	runtime := spec.Runtime
	if runtime == "" {
		runtime = d.opts.Runtime
	}
	return overhead(spec.Limits.WithDefaults(), runtime)
}
