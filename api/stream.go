package api

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
)

// Large answers (lists, map dumps) are written as they are encoded, one
// element at a time through a small buffer, instead of being built whole
// in memory first: an answer costs its source data plus one element.

// stream writes one JSON answer piece by piece; the first write error
// stops it (the client went away: nothing more can be said to it).
type stream struct {
	cw  countingWriter
	bw  *bufio.Writer
	enc *json.Encoder
	err error
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// startStream answers 200 with a JSON body to come.
func startStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	st := &stream{cw: countingWriter{w: w}}
	st.bw = bufio.NewWriterSize(&st.cw, 32<<10)
	st.enc = json.NewEncoder(st.bw)
	return st
}

// raw writes JSON text as it is.
func (st *stream) raw(s string) {
	if st.err == nil {
		_, st.err = st.bw.WriteString(s)
	}
}

// value writes v as JSON (followed by a newline, which JSON allows).
func (st *stream) value(v any) {
	if st.err == nil {
		st.err = st.enc.Encode(v)
	}
}

// end flushes the answer and returns its size.
func (st *stream) end() int64 {
	st.raw("\n")
	if st.err == nil {
		st.err = st.bw.Flush()
	}
	return st.cw.n
}

// streamArray writes a JSON array of n elements, the i-th being at(i).
func streamArray[T any](st *stream, n int, at func(int) T) {
	st.raw("[")
	for i := range n {
		if st.err != nil {
			return
		}
		if i > 0 {
			st.raw(",")
		}
		st.value(at(i))
	}
	st.raw("]")
}
