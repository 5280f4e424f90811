package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA is the daemon's interception authority: it signs the certificates
// the proxy shows a sandbox for the hosts it intercepts. Its key is made
// in the daemon's state directory (mode 0600) and never leaves it: a
// sandbox gets the certificate only. To rotate it, stop the daemon,
// remove the two files and start it again (sandboxes made before keep the
// old certificate and fail closed for intercepted hosts).
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// CA file names inside the directory LoadCA is given.
const (
	caCertFile = "egress-ca.crt"
	caKeyFile  = "egress-ca.key"
)

// caLife is how long a new CA is valid; leafLife how long a host's
// certificate is, which is made again when less than a quarter is left.
const (
	caLife   = 5 * 365 * 24 * time.Hour
	leafLife = 24 * time.Hour
)

// LoadCA reads the CA from dir, making one (a P-256 key, mode 0600) the
// first time.
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	if errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist) {
		return createCA(certPath, keyPath)
	}
	if cerr != nil || kerr != nil {
		return nil, fmt.Errorf("read the egress CA in %s: %w", dir, errors.Join(cerr, kerr))
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the egress CA key %s must be mode 0600 (it is %v)", keyPath, fi.Mode().Perm())
	}
	tc, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load the egress CA in %s: %w", dir, err)
	}
	key, ok := tc.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the egress CA key in %s is not ECDSA", dir)
	}
	cert, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse the egress CA certificate: %w", err)
	}
	if !cert.IsCA || time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("the egress CA certificate %s is not a valid CA (expired %v): remove both files to make a new one", certPath, cert.NotAfter)
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, leaves: map[string]*tls.Certificate{}}, nil
}

func createCA(certPath, keyPath string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock egress CA", Organization: []string{"airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// The key first, exclusively: two daemons never make two CAs.
	kf, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("make the egress CA: %w", err)
	}
	if err := pem.Encode(kf, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}); err != nil {
		kf.Close()
		return nil, err
	}
	if err := kf.Sync(); err != nil {
		kf.Close()
		return nil, err
	}
	if err := kf.Close(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("make the egress CA: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, leaves: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// placeholderKey is the key placeholders are derived with: the CA key's,
// hashed apart from any use of the key itself.
func (ca *CA) placeholderKey() []byte {
	h := sha256.New()
	h.Write([]byte("airlock egress placeholder key\x00"))
	b, _ := ca.key.Bytes()
	h.Write(b)
	return h.Sum(nil)
}

// CertPEM is the CA's certificate, what sandboxes trust.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// maxLeaves bounds the cache of host certificates.
const maxLeaves = 4096

// leaf returns a certificate for host (a name or an IP literal), made on
// demand and cached while more than a quarter of its life is left.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && now.Before(c.Leaf.NotAfter.Add(-leafLife/4)) {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}
