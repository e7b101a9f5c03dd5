package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/actorlb/actorlb/bpf"
	"github.com/actorlb/actorlb/bpf/packetlb"
	"github.com/actorlb/actorlb/internal/bpffs"
)

// errNotConfirmed occurs when --cleanup is not confirmed.
var errNotConfirmed = errors.New("not confirmed")

// cleanupNode removes actorlb from the node: it detaches the socket-LB
// programs, removes every pin under c.root (the maps with them: the
// services stop being load-balanced) and the socket. The agent must be
// stopped; root must be on bpffs. Without yes it asks on in.
func cleanupNode(c *agentConfig, yes bool, in io.Reader) error {
	root := c.root
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(c.stdout, "Nothing to clean up: %s does not exist\n", root)
		return removeSocket(c)
	case err != nil:
		return fmt.Errorf("agent --cleanup: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("agent --cleanup: %s is not a directory", root)
	}
	if ok, err := bpffs.IsBPFFS(root); err != nil || !ok {
		return fmt.Errorf("agent --cleanup: refusing to remove %s: not on a BPF filesystem (is --bpf-root right?)", root)
	}
	lock, err := lockFile(root, false, "--bpf-root", root)
	if err != nil {
		return fmt.Errorf("agent --cleanup: %w (stop the agent first: systemctl stop actorlb, or Ctrl-C)", err)
	}
	defer lock.Close()
	if !yes {
		fmt.Fprintf(c.stdout, "This detaches actorlb's datapath and removes every pin under %s (the service maps with them: services stop being load-balanced) and the socket %s.\nContinue? [y/N] ", root, c.socket)
		line, _ := bufio.NewReader(in).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(c.stdout)
			return fmt.Errorf("agent --cleanup: %w: nothing removed (answer y, or pass --yes)", errNotConfirmed)
		}
	}
	if err := packetlb.Detach(root); err != nil {
		return fmt.Errorf("agent --cleanup: %w", err)
	}
	if err := bpf.Detach(root); err != nil {
		return fmt.Errorf("agent --cleanup: %w", err)
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("agent --cleanup: remove %s: %w", root, err)
	}
	if err := removeSocket(c); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Removed actorlb from this node: datapath detached, %s and the socket removed\n", root)
	return nil
}

// removeSocket removes the agent's socket and its lock file if no agent
// holds them.
func removeSocket(c *agentConfig) error {
	lock, err := lockFile(c.socket+".lock", true, "--socket", c.socket)
	if err != nil {
		return fmt.Errorf("agent --cleanup: %w (stop the agent first)", err)
	}
	defer lock.Close()
	for _, p := range []string{c.socket, c.socket + ".lock"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("agent --cleanup: %w", err)
		}
	}
	return nil
}
