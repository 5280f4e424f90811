package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	"lukechampine.com/blake3"
)

// A pause image's digests guard it against a change while the sandbox is
// paused: a resume runs none of an image that does not match them. They
// are BLAKE3-256, written "blake3:HEX" (decision 74: about 2.5 times
// faster than SHA-256 here, which has SHA-NI, on both the pause and the
// resume). Images paused before that have bare SHA-256 hex on record,
// and are checked so; a digest of any other kind is refused.

// digestPrefix marks the digests pauses write.
const digestPrefix = "blake3:"

// digestBuf is how much of an image is read at a time.
const digestBuf = 1 << 20

// digestDir returns the digest of every regular file of dir, by name,
// and their total size. Anything else in it is an error.
func digestDir(dir string) (map[string]string, int64, error) {
	return walkImage(dir, func(string) (hash.Hash, string, error) { return blake3.New(32, nil), digestPrefix, nil })
}

// sizeDir is the total size of dir's regular files (an image that is
// not kept needs no digests).
func sizeDir(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return 0, err
		}
		if fi.Mode().IsRegular() {
			total += fi.Size()
		}
	}
	return total, nil
}

// checkDigests checks that dir holds exactly the files of want, each with
// its digest (of the kind on record: BLAKE3, or an older pause's SHA-256).
func checkDigests(dir string, want map[string]string) error {
	got, _, err := walkImage(dir, func(name string) (hash.Hash, string, error) {
		return digestOf(name, want[name])
	})
	if err != nil {
		return err
	}
	for name, sum := range want {
		switch g, ok := got[name]; {
		case !ok:
			return fmt.Errorf("%s is missing", name)
		case g != sum:
			return fmt.Errorf("%s has digest %.19s…, not %.19s… as paused", name, g, sum)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			return fmt.Errorf("%s was not part of it", name)
		}
	}
	return nil
}

// digestOf is the hash that recorded digest sum of file name was made
// with, and its prefix.
func digestOf(name, sum string) (hash.Hash, string, error) {
	switch {
	case sum == "":
		return nil, "", fmt.Errorf("%s was not part of it", name)
	case strings.HasPrefix(sum, digestPrefix):
		return blake3.New(32, nil), digestPrefix, nil
	case len(sum) == 2*sha256.Size && !strings.Contains(sum, ":"):
		return sha256.New(), "", nil // paused by an airlock before decision 74
	}
	return nil, "", fmt.Errorf("%s has a digest of a kind this airlock does not know (%.12s…): it cannot be checked", name, sum)
}

// walkImage digests every regular file of dir with the hash pick gives
// for its name, and adds up their sizes.
func walkImage(dir string, pick func(name string) (hash.Hash, string, error)) (map[string]string, int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	sums := map[string]string{}
	var total int64
	buf := make([]byte, digestBuf)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return nil, 0, fmt.Errorf("%s is not a regular file", e.Name())
		}
		h, prefix, err := pick(e.Name())
		if err != nil {
			return nil, 0, err
		}
		n, err := digestFile(filepath.Join(dir, e.Name()), h, buf)
		if err != nil {
			return nil, 0, err
		}
		sums[e.Name()], total = prefix+hex.EncodeToString(h.Sum(nil)), total+n
	}
	return sums, total, nil
}

func digestFile(path string, h hash.Hash, buf []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// Neither side's ReadFrom or WriteTo: the buffer's size is the point.
	return io.CopyBuffer(struct{ io.Writer }{h}, struct{ io.Reader }{f}, buf)
}
