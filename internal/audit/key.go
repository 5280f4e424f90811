package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// LoadOrCreateKey reads the checkpoint signing key at path (hex of the
// 64-byte ed25519 private key), or makes one with mode 0600 when there is
// none, and writes its public key to path+".pub". It refuses a key file
// others can read.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("make audit key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("make audit key: %w", err)
		}
		_, err = f.WriteString(hex.EncodeToString(priv) + "\n")
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("make audit key: %w", err)
		}
		if err := os.WriteFile(path+".pub", []byte(hex.EncodeToString(pub)+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("write audit public key: %w", err)
		}
		return priv, nil
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
	return ed25519.PrivateKey(k), nil
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
