package actorlb

import (
	"go/build"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// layers is the import rule of docs/architecture.md: a package of the
// module imports only packages of lower layers (its non-test imports).
var layers = [][]string{
	{"loadbalancer", "internal/packedmap", "internal/bpffs", "internal/netns", "internal/hugepages", "internal/actorsys"},
	{"maps", "internal/pagedindex", "internal/testutil", "internal/benchset", "internal/maglev", "internal/conntrack", "k8s", "k8s/translate", "tests/kube/cluster"},
	{"messages", "internal/table", "internal/addrkey", "internal/idalloc", "internal/enginetest", "bpf", "bpf/packetlb"},
	{"internal/engine", "internal/verify"},
	{"actors"},
	{""}, // the façade
	{"api", "k8s/source"},
	{"cmd/actorlb", "tests/bench", "tests/chaos", "tests", "tests/agent", "tests/datapath"},
}

const module = "github.com/actorlb/actorlb"

// The packages of the module import as the architecture document says:
// every import points to a lower layer, the engine's core imports no
// actor library, and the API server only the façade, loadbalancer and
// maps.
func TestImportsFollowTheLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...").Output()
	require.NoError(t, err, "go list")
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer[p] = i
		}
	}
	for _, path := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		l, ok := layer[rel]
		require.True(t, ok, "package %q is in no layer of docs/architecture.md (add it to both)", path)
		pkg, err := build.Import(path, ".", 0)
		require.NoError(t, err, path)
		for _, imp := range pkg.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
				require.Less(t, layer[dep], l, "%s imports %s, which is not in a lower layer", rel, dep)
			}
			if rel == "internal/engine" {
				require.False(t, strings.Contains(imp, "protoactor"), "the engine's core imports %s", imp)
			}
		}
		if rel == "api" {
			for _, imp := range pkg.Imports {
				if strings.HasPrefix(imp, module) {
					require.True(t, slices.Contains([]string{module, module + "/loadbalancer", module + "/maps"}, imp),
						"api imports %s (only the façade, loadbalancer and maps)", imp)
				}
			}
		}
	}
}
