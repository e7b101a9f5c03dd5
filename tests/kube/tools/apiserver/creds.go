package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names inside --dir. The credentials are made once and reused by a
// restart on the same directory, so that clients keep trusting the server
// and keep their tokens across an apiserver outage.
const (
	caCertFile      = "ca.crt"
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	saKeyFile       = "service-account.key"
	tokensFile      = "tokens.csv"
	adminTokenFile  = "admin.token"
	agentTokenFile  = "agent.token"
)

// The users of the token file. The admin is in system:masters (every
// right, whatever the RBAC rules); the agent has no binding until a test
// gives it one (to try the RBAC that deploy/ ships).
const (
	adminUser = "actorlb-admin"
	agentUser = "actorlb-agent"
)

// creds are the paths and tokens the apiserver and its clients use.
type creds struct {
	dir        string
	adminToken string
	agentToken string
}

func (c creds) path(name string) string { return filepath.Join(c.dir, name) }

// loadOrCreateCreds makes the CA, the serving certificate, the service
// account key and the token file in dir unless they are already there.
func loadOrCreateCreds(dir string) (creds, error) {
	c := creds{dir: dir}
	if _, err := os.Stat(c.path(tokensFile)); err == nil {
		admin, err1 := os.ReadFile(c.path(adminTokenFile))
		agent, err2 := os.ReadFile(c.path(agentTokenFile))
		if err := errors.Join(err1, err2); err != nil {
			return creds{}, fmt.Errorf("load credentials: %w", err)
		}
		c.adminToken = strings.TrimSpace(string(admin))
		c.agentToken = strings.TrimSpace(string(agent))
		return c, nil
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return creds{}, fmt.Errorf("create credentials: ca key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "actorlb-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return creds{}, fmt.Errorf("create credentials: ca certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return creds{}, fmt.Errorf("create credentials: ca certificate: %w", err)
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return creds{}, fmt.Errorf("create credentials: serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return creds{}, fmt.Errorf("create credentials: serving certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return creds{}, fmt.Errorf("create credentials: service account key: %w", err)
	}

	if c.adminToken, err = randomToken(); err != nil {
		return creds{}, err
	}
	if c.agentToken, err = randomToken(); err != nil {
		return creds{}, err
	}
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s\n",
		c.adminToken, adminUser, adminUser, c.agentToken, agentUser, agentUser)

	srvKeyPEM, err := ecKeyPEM(srvKey)
	if err != nil {
		return creds{}, err
	}
	saKeyPEM, err := ecKeyPEM(saKey)
	if err != nil {
		return creds{}, err
	}
	files := []struct {
		name string
		data []byte
	}{
		{caCertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})},
		{servingCertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})},
		{servingKeyFile, srvKeyPEM},
		{saKeyFile, saKeyPEM},
		{adminTokenFile, []byte(c.adminToken + "\n")},
		{agentTokenFile, []byte(c.agentToken + "\n")},
		{tokensFile, []byte(tokens)}, // last: its presence means the set is complete
	}
	for _, f := range files {
		if err := writeFileAtomic(c.path(f.name), f.data, 0o600); err != nil {
			return creds{}, fmt.Errorf("create credentials: %w", err)
		}
	}
	return c, nil
}

func ecKeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("create credentials: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("create credentials: token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, so that a reader never sees half a file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
