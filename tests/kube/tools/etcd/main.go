// Command etcd runs a real single-member etcd server (go.etcd.io/etcd, the
// version in this module's go.mod) through its embed package, as the store
// of the apiserver in actorlb's Kubernetes-mode tests. It is test tooling,
// not part of actorlb.
//
// The client URL is http://--bind:--port (--port 0 takes a free port); the
// peer listener, never dialled by a single member, takes a free port too.
// Data lives in --dir/data, so a restart on the same --dir keeps it. When
// the server is ready it writes the client URL to --dir/client-url and
// prints one line on stdout:
//
//	ready http://127.0.0.1:PORT
//
// SIGTERM or SIGINT stop it; it exits 0 after a clean stop.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

type config struct {
	dir          string
	bind         string
	port         int
	noFsync      bool
	quotaBytes   int64
	logLevel     string
	readyTimeout time.Duration
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	fs.StringVar(&cfg.dir, "dir", "", "state directory: data and client-url (required)")
	fs.StringVar(&cfg.bind, "bind", "127.0.0.1", "address to listen on")
	fs.IntVar(&cfg.port, "port", 0, "client port; 0 takes a free one")
	fs.BoolVar(&cfg.noFsync, "unsafe-no-fsync", false, "never fsync (a test store: faster, loses data on a machine crash)")
	fs.Int64Var(&cfg.quotaBytes, "quota-backend-bytes", 4<<30, "backend size quota")
	fs.StringVar(&cfg.logLevel, "log-level", "warn", "debug, info, warn or error")
	fs.DurationVar(&cfg.readyTimeout, "ready-timeout", time.Minute, "how long to wait for the server to be ready")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() != 0:
		return config{}, fmt.Errorf("flags: unexpected arguments %q", fs.Args())
	case cfg.dir == "":
		return config{}, errors.New("flags: --dir is required")
	case cfg.port < 0 || cfg.port > 65535:
		return config{}, fmt.Errorf("flags: --port %d is not a port", cfg.port)
	case net.ParseIP(cfg.bind) == nil:
		return config{}, fmt.Errorf("flags: --bind %q is not an IP address", cfg.bind)
	case cfg.quotaBytes <= 0:
		return config{}, fmt.Errorf("flags: --quota-backend-bytes %d must be positive", cfg.quotaBytes)
	}
	return cfg, nil
}

func run(cfg config) error {
	if err := os.MkdirAll(cfg.dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	client := url.URL{Scheme: "http", Host: net.JoinHostPort(cfg.bind, strconv.Itoa(cfg.port))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort(cfg.bind, "0")}

	ec := embed.NewConfig()
	ec.Name = "actorlb-test"
	ec.Dir = filepath.Join(cfg.dir, "data")
	ec.ListenClientUrls = []url.URL{client}
	ec.AdvertiseClientUrls = []url.URL{client}
	ec.ListenPeerUrls = []url.URL{peer}
	ec.AdvertisePeerUrls = []url.URL{peer}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.UnsafeNoFsync = cfg.noFsync
	ec.QuotaBackendBytes = cfg.quotaBytes
	ec.LogLevel = cfg.logLevel
	ec.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()

	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("start: %w", err)
	case <-time.After(cfg.readyTimeout):
		return fmt.Errorf("start: not ready after %s", cfg.readyTimeout)
	}
	if len(e.Clients) == 0 {
		return errors.New("start: no client listener")
	}
	got := url.URL{Scheme: "http", Host: e.Clients[0].Addr().String()}
	if err := writeFileAtomic(filepath.Join(cfg.dir, "client-url"), []byte(got.String()+"\n")); err != nil {
		return err
	}
	fmt.Printf("ready %s\n", got.String())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		return nil // the deferred Close stops the server
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	}
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, so that a reader never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
