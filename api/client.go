package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// DefaultSocket is where the agent listens unless told otherwise.
const DefaultSocket = "/var/run/actorlb/actorlb.sock"

// DefaultHost is the client's default -H: the agent's default socket.
const DefaultHost = "unix://" + DefaultSocket

// DefaultClientTimeout bounds one request of the client (more than the
// server's DefaultCallTimeout).
const DefaultClientTimeout = 45 * time.Second

// Client talks to an agent's API. It is safe for concurrent use.
type Client struct {
	host  string
	addr  string // the socket path or HOST:PORT dialled
	base  string
	http  *http.Client
	token string
	batch int
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithToken makes the client send token as its bearer token, which the
// agent's TCP listener requires (its unix socket ignores it).
func WithToken(token string) ClientOption {
	return func(c *Client) { c.token = strings.TrimSpace(token) }
}

// WithBatchSize makes PutServices send at most n specs per request
// (DefaultMaxBatchSpecs by default, the agent's limit).
func WithBatchSize(n int) ClientOption {
	return func(c *Client) {
		if n > 0 {
			c.batch = n
		}
	}
}

// ReadTokenFile reads an API token from path: the first line, trimmed. It
// refuses an empty token and a file that every user may read.
func ReadTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return "", fmt.Errorf("read token file %s: every user may read it (mode %s; chmod o-rwx %s)", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	token := strings.TrimSpace(line)
	if token == "" {
		return "", fmt.Errorf("read token file %s: empty token", path)
	}
	return token, nil
}

// ParseHost checks a -H value: unix:///PATH (or an absolute PATH) for the
// agent's socket, or http://HOST:PORT. It returns the network ("unix" or
// "tcp") and the address to dial.
func ParseHost(host string) (network, addr string, err error) {
	switch {
	case strings.HasPrefix(host, "unix://"):
		p := strings.TrimPrefix(host, "unix://")
		if !strings.HasPrefix(p, "/") {
			return "", "", fmt.Errorf("invalid host %q: want unix:///ABSOLUTE/PATH (three slashes)", host)
		}
		return "unix", p, nil
	case strings.HasPrefix(host, "/"):
		return "unix", host, nil
	case strings.HasPrefix(host, "http://"):
		u, err := url.Parse(host)
		if err != nil || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return "", "", fmt.Errorf("invalid host %q: want http://IP:PORT", host)
		}
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("invalid host %q: want unix:///PATH or http://IP:PORT", host)
}

// NewClient returns a client for the agent at host (see ParseHost; ""
// means DefaultHost).
func NewClient(host string, opts ...ClientOption) (*Client, error) {
	if host == "" {
		host = DefaultHost
	}
	network, addr, err := ParseHost(host)
	if err != nil {
		return nil, fmt.Errorf("new api client: %w", err)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	base := "http://actorlb"
	if network == "tcp" {
		base = "http://" + addr
	}
	c := &Client{host: host, addr: addr, base: base, http: &http.Client{Transport: tr, Timeout: DefaultClientTimeout}, batch: DefaultMaxBatchSpecs}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// NewRequest returns a request for path on the agent, with the client's
// token, for raw requests with HTTPClient.
func (c *Client) NewRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL(path), body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// Host returns the host the client talks to.
func (c *Client) Host() string { return c.host }

// URL returns the URL of path on the agent, for raw requests with
// HTTPClient.
func (c *Client) URL(path string) string { return c.base + path }

// HTTPClient returns the HTTP client that dials the agent.
func (c *Client) HTTPClient() *http.Client { return c.http }

// Close closes idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// maxBusyRetries bounds how often a request the agent answered 429 (busy)
// is sent again, each after the Retry-After the agent gave.
const maxBusyRetries = 20

// do sends a request and decodes a 2xx JSON answer into out (if not nil).
// It returns the status code. A 429 (the agent serves its limit of large
// requests) is retried after its Retry-After, while ctx allows.
func (c *Client) do(ctx context.Context, what, method, path string, in, out any) (int, error) {
	var payload []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("%s: encode request: %w", what, err)
		}
		payload = b
	}
	for attempt := 0; ; attempt++ {
		code, wait, err := c.once(ctx, what, method, path, payload, out)
		if code != http.StatusTooManyRequests || attempt >= maxBusyRetries {
			return code, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return code, err
		case <-t.C:
		}
	}
}

// once sends one request; for a 429 it also returns how long to wait.
func (c *Client) once(ctx context.Context, what, method, path string, payload []byte, out any) (int, time.Duration, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := c.NewRequest(ctx, method, path, body)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", what, err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		// The URL is the client's own ("http://actorlb/..."): say what was
		// dialled instead.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return 0, 0, fmt.Errorf("%s: %w: permission denied on %s: the agent's socket is readable and writable by root and its group only (mode 0660); run as root (sudo), or as a member of the socket's group (see ls -l %s)",
				what, ErrUnreachable, c.addr, c.addr)
		}
		return 0, 0, fmt.Errorf("%s: %w at %s: %v (is the agent running? start it with 'actorlb agent', or point -H at it)", what, ErrUnreachable, c.host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		wait := time.Second
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n >= 0 && n <= 60 {
			wait = time.Duration(n) * time.Second
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, wait, fmt.Errorf("%s: %w", what, &StatusError{Code: resp.StatusCode, Message: "agent busy (429)"})
	}
	code, err := c.decode(what, resp, out)
	return code, 0, err
}

// decode reads an answer: a 2xx JSON answer into out (if not nil), an
// error answer into a *StatusError.
func (c *Client) decode(what string, resp *http.Response, out any) (int, error) {
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s: read answer: %w", what, err)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Code: resp.StatusCode}
		var msg string
		if json.Unmarshal(data, &msg) == nil {
			se.Message = msg
		} else {
			se.Message = strings.TrimSpace(string(data))
		}
		// Some answers (503 from healthz) carry a document; decode it too.
		if out != nil && resp.StatusCode == http.StatusServiceUnavailable {
			_ = json.Unmarshal(data, out)
		}
		return resp.StatusCode, fmt.Errorf("%s: %w", what, se)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: decode answer: %w", what, err)
		}
	}
	return resp.StatusCode, nil
}

// ListServices returns every service, sorted by ID.
func (c *Client) ListServices(ctx context.Context) ([]*Service, error) {
	var out []*Service
	_, err := c.do(ctx, "list services", http.MethodGet, "/v1/service", nil, &out)
	return out, err
}

// GetService returns the service with id; errors.Is(err, ErrNotFound)
// when there is none.
func (c *Client) GetService(ctx context.Context, id lb.ServiceID) (*Service, error) {
	var out Service
	if _, err := c.do(ctx, "get service "+id.String(), http.MethodGet, "/v1/service/"+id.String(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutService creates or updates the service with id and returns it as
// stored, and whether it was created.
func (c *Client) PutService(ctx context.Context, id lb.ServiceID, spec *ServiceSpec) (*Service, bool, error) {
	var out Service
	code, err := c.do(ctx, "put service "+id.String(), http.MethodPut, "/v1/service/"+id.String(), spec, &out)
	if err != nil {
		return nil, false, err
	}
	return &out, code == http.StatusCreated, nil
}

// PutServices creates or updates many services (each spec with its ID),
// in requests of at most the agent's batch limit (see WithBatchSize); the
// results say, in order, what each got. If a request fails as a whole,
// the results of the requests before it are returned with the error.
func (c *Client) PutServices(ctx context.Context, specs []ServiceSpec) ([]BatchResult, error) {
	out := make([]BatchResult, 0, len(specs))
	for start := 0; ; start += c.batch {
		chunk := specs[start:min(start+c.batch, len(specs))]
		var rs []BatchResult
		if _, err := c.do(ctx, fmt.Sprintf("put %d services", len(chunk)), http.MethodPut, "/v1/services", chunk, &rs); err != nil {
			return out, err
		}
		out = append(out, rs...)
		if start+len(chunk) >= len(specs) {
			return out, nil
		}
	}
}

// DeleteService deletes the service with id; errors.Is(err, ErrNotFound)
// when there is none.
func (c *Client) DeleteService(ctx context.Context, id lb.ServiceID) error {
	_, err := c.do(ctx, "delete service "+strconv.Itoa(int(id)), http.MethodDelete, "/v1/service/"+id.String(), nil, nil)
	return err
}

// RevNAT returns every revNAT entry, sorted by ID.
func (c *Client) RevNAT(ctx context.Context) ([]RevNATEntry, error) {
	var out []RevNATEntry
	_, err := c.do(ctx, "list revNAT", http.MethodGet, "/v1/lb/revnat", nil, &out)
	return out, err
}

// Maps returns the decoded content of the six maps.
func (c *Client) Maps(ctx context.Context) (*MapsDump, error) {
	var out MapsDump
	if _, err := c.do(ctx, "dump maps", http.MethodGet, "/v1/lb/maps", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Health returns the agent's status. When the agent answers 503 it returns
// the status it sent with an error matching ErrUnavailable.
// Reconcile asks the agent to compare every map with what it wrote (and
// every pin with its map) and to repair what differs. It returns what was
// found per map, also when a map could not be repaired (then with an
// error).
func (c *Client) Reconcile(ctx context.Context) ([]MapDrift, error) {
	var out []MapDrift
	_, err := c.do(ctx, "reconcile", http.MethodPost, "/v1/lb/reconcile", nil, &out)
	return out, err
}

func (c *Client) Health(ctx context.Context) (*Status, error) {
	var out Status
	_, err := c.do(ctx, "health", http.MethodGet, "/v1/healthz", nil, &out)
	if err != nil && !errors.Is(err, ErrUnavailable) {
		return nil, err
	}
	return &out, err
}

// Config returns the agent's configuration (GET /v1/config): its node
// addresses and node port range among others.
func (c *Client) Config(ctx context.Context) (*DaemonConfiguration, error) {
	var out DaemonConfiguration
	if _, err := c.do(ctx, "config", http.MethodGet, "/v1/config", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DefaultChunkBytes bounds the body of one request of the chunked batch
// calls: half the server's default limit, so that a chunk fits with room.
const DefaultChunkBytes = DefaultMaxBodyBytes / 2

// chunked sends items (each already JSON) as JSON arrays of at most
// maxBytes and maxItems items (the agent's batch limit) in order, through
// send; a chunk the agent refuses as too large
// (413: its limit is lower) is split in two and sent again. progress, if
// not nil, is told how many items are done after each chunk.
func chunked(ctx context.Context, items []json.RawMessage, maxBytes, maxItems int, send func(ctx context.Context, body json.RawMessage, n int) ([]BatchResult, error), progress func(done int)) ([]BatchResult, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultChunkBytes
	}
	out := make([]BatchResult, 0, len(items))
	var sendChunk func(part []json.RawMessage) error
	sendChunk = func(part []json.RawMessage) error {
		var body bytes.Buffer
		body.WriteByte('[')
		for i, it := range part {
			if i > 0 {
				body.WriteByte(',')
			}
			body.Write(it)
		}
		body.WriteByte(']')
		rs, err := send(ctx, body.Bytes(), len(part))
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusRequestEntityTooLarge && len(part) > 1 {
			if err := sendChunk(part[:len(part)/2]); err != nil {
				return err
			}
			return sendChunk(part[len(part)/2:])
		}
		if err != nil {
			return err
		}
		if len(rs) != len(part) {
			return fmt.Errorf("agent answered %d results for %d items", len(rs), len(part))
		}
		out = append(out, rs...)
		if progress != nil {
			progress(len(out))
		}
		return nil
	}
	start, size := 0, 2
	for i, it := range items {
		if i > start && (size+len(it)+1 > maxBytes || i-start >= maxItems) {
			if err := sendChunk(items[start:i]); err != nil {
				return out, err
			}
			start, size = i, 2
		}
		size += len(it) + 1
	}
	if start < len(items) {
		if err := sendChunk(items[start:]); err != nil {
			return out, err
		}
	}
	return out, nil
}

// PutServicesChunked is PutServices for any number of services: they go
// in requests of at most maxBytes (DefaultChunkBytes if 0), in order, each
// a batch of its own. progress, if not nil, is told how many are done.
// On an error the results so far are returned with it.
func (c *Client) PutServicesChunked(ctx context.Context, specs []ServiceSpec, maxBytes int, progress func(done int)) ([]BatchResult, error) {
	items := make([]json.RawMessage, len(specs))
	for i := range specs {
		b, err := json.Marshal(&specs[i])
		if err != nil {
			return nil, fmt.Errorf("put %d services: encode: %w", len(specs), err)
		}
		items[i] = b
	}
	return chunked(ctx, items, maxBytes, c.batch, func(ctx context.Context, body json.RawMessage, n int) ([]BatchResult, error) {
		var out []BatchResult
		_, err := c.do(ctx, fmt.Sprintf("put %d services", n), http.MethodPut, "/v1/services", body, &out)
		return out, err
	}, progress)
}

// DeleteServices deletes the services with ids with one call per
// maxBytes of IDs (DefaultChunkBytes if 0: one call up to some 90000
// IDs); the results say, in order, what each got (200 deleted, 404 none).
func (c *Client) DeleteServices(ctx context.Context, ids []lb.ServiceID, maxBytes int, progress func(done int)) ([]BatchResult, error) {
	items := make([]json.RawMessage, len(ids))
	for i, id := range ids {
		items[i] = json.RawMessage(strconv.Itoa(int(id)))
	}
	return chunked(ctx, items, maxBytes, c.batch, func(ctx context.Context, body json.RawMessage, n int) ([]BatchResult, error) {
		var out []BatchResult
		_, err := c.do(ctx, fmt.Sprintf("delete %d services", n), http.MethodDelete, "/v1/services", body, &out)
		return out, err
	}, progress)
}
