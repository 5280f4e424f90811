package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LoadOrCreateKey reads the checkpoint signing key at path (hex of the
// 64-byte ed25519 private key), or makes one with mode 0600 when there is
// none, and writes its public key to path+".pub". It refuses a key file
// others can read.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		priv, made, merr := makeKey(path)
		if merr != nil {
			return nil, merr
		}
		if made {
			return priv, nil
		}
		// Another process made it first: use theirs.
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read audit key: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read audit key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("audit key %s has mode %v: others can read it; chmod 600 it", path, st.Mode().Perm())
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("audit key %s is not a hex ed25519 private key", path)
	}
	priv := ed25519.PrivateKey(k)
	if _, err := os.Stat(path + ".pub"); errors.Is(err, fs.ErrNotExist) {
		if err := writePublicKey(path, priv.Public().(ed25519.PublicKey)); err != nil {
			return nil, err
		}
	}
	return priv, nil
}

// ReadPublicKey reads a public key file (hex of 32 bytes) or derives the
// public key from a private key file.
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read audit public key: %w", err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	switch {
	case err != nil:
	case len(k) == ed25519.PublicKeySize:
		return ed25519.PublicKey(k), nil
	case len(k) == ed25519.PrivateKeySize:
		return ed25519.PrivateKey(k).Public().(ed25519.PublicKey), nil
	}
	return nil, fmt.Errorf("%s is not a hex ed25519 key", path)
}

// makeKey writes a new key to path, whole or not at all: it is written to a
// temporary file and linked into place, so that a process reading path
// never sees half a key. made is false when another process linked its
// own first.
func makeKey(path string) (priv ed25519.PrivateKey, made bool, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("make audit key: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".audit-key-*")
	if err != nil {
		return nil, false, fmt.Errorf("make audit key: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(hex.EncodeToString(priv) + "\n")
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("make audit key: %w", err)
	}
	if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("make audit key: %w", err)
	}
	if err := writePublicKey(path, pub); err != nil {
		return nil, false, err
	}
	return priv, true, nil
}

// writePublicKey writes pub to path+".pub".
func writePublicKey(path string, pub ed25519.PublicKey) error {
	if err := os.WriteFile(path+".pub", []byte(hex.EncodeToString(pub)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write audit public key: %w", err)
	}
	return nil
}
