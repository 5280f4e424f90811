package wasm

import (
	"io/fs"
	"testing/fstest"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// rootFS is what a module sees at /: /workspace and /tmp (each a mount of
// its own, which the module reaches through its own preopen) and nothing
// else, read-only, in memory.
func rootFS() experimentalsys.FS {
	return &sysfs.ReadFS{FS: &sysfs.AdaptFS{FS: fstest.MapFS{
		"workspace": {Mode: fs.ModeDir | 0o755},
		"tmp":       {Mode: fs.ModeDir | 0o1777},
	}}}
}

// pythonSiteDir is the site-packages directory of python.wasm, which its
// build does not have: the driver puts its sitecustomize there.
const pythonSiteDir = "/usr/local/lib/python3.12/site-packages"

// sitecustomize starts a python3 in the exec's working directory: WASI has
// none, and wasi-libc starts every program in /.
const sitecustomize = `import os
_d = os.environ.get("PWD")
if _d:
    try:
        os.chdir(_d)
    except OSError:
        pass
del _d, os
`

// pythonSite is python.wasm's site-packages: sitecustomize.py only.
func pythonSite() experimentalsys.FS {
	return &sysfs.ReadFS{FS: &sysfs.AdaptFS{FS: fstest.MapFS{
		"sitecustomize.py": {Data: []byte(sitecustomize), Mode: 0o444},
	}}}
}
