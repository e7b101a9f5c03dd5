package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinDirEnv names the variable that overrides where the test binaries are
// looked for (default: bin/kube under the repository root).
const BinDirEnv = "ACTORLB_KUBE_BIN_DIR"

// The binaries' names, as `make kube-tools` builds them.
const (
	EtcdBinary      = "etcd"
	APIServerBinary = "kube-apiserver"
)

const mainModule = "github.com/actorlb/actorlb"

// Binaries are the paths of the two programs a Cluster runs.
type Binaries struct {
	Etcd, APIServer string
}

// FindBinaries returns the test binaries in $ACTORLB_KUBE_BIN_DIR, or else
// in bin/kube of the repository that holds the working directory. The
// error wraps ErrNoBinaries when one of them is missing.
func FindBinaries() (Binaries, error) {
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return Binaries{}, fmt.Errorf("find binaries: %w: %w", ErrNoBinaries, err)
		}
		dir = filepath.Join(root, "bin", "kube")
	}
	b := Binaries{Etcd: filepath.Join(dir, EtcdBinary), APIServer: filepath.Join(dir, APIServerBinary)}
	for _, p := range []string{b.Etcd, b.APIServer} {
		st, err := os.Stat(p)
		if err != nil {
			return Binaries{}, fmt.Errorf("find binaries: %w: %w", ErrNoBinaries, err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return Binaries{}, fmt.Errorf("find binaries: %w: %s is not an executable file", ErrNoBinaries, p)
		}
	}
	return b, nil
}

// repoRoot walks up from the working directory to the directory whose
// go.mod declares actorlb's module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isMainModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of " + mainModule + " above the working directory (set " + BinDirEnv + ")")
		}
		dir = parent
	}
}

func isMainModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == mainModule
		}
	}
	return false
}
