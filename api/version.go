package api

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// BuildInfo is what the running binary was built from, read from the
// build information the Go toolchain embeds (runtime/debug).
type BuildInfo struct {
	// Version is the main module's version: a tag like v1.2.0, or
	// "(devel)" for a build from a work tree.
	Version string `json:"version"`
	// Revision is the VCS commit, "" when the build carried no VCS
	// information (go build -buildvcs=false).
	Revision string `json:"revision,omitempty"`
	// Time is the commit's time (RFC 3339), "" without VCS information.
	Time string `json:"time,omitempty"`
	// Modified says the work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go-version"`
}

// Build returns the running binary's build information.
func Build() BuildInfo {
	b := BuildInfo{Version: "(unknown)", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one-line form: version, revision (12 digits, "+dirty"
// when modified) and toolchain.
func (b BuildInfo) String() string {
	var sb strings.Builder
	sb.WriteString(b.Version)
	sb.WriteString(", revision ")
	switch {
	case b.Revision == "":
		sb.WriteString("unknown (built without VCS information)")
	case len(b.Revision) > 12:
		sb.WriteString(b.Revision[:12])
	default:
		sb.WriteString(b.Revision)
	}
	if b.Modified {
		sb.WriteString("+dirty")
	}
	sb.WriteString(", ")
	sb.WriteString(b.GoVersion)
	return sb.String()
}
