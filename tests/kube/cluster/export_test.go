package cluster

// PIDs returns the process ids of c's running processes.
func PIDs(c *Cluster) []int { return c.pids() }
