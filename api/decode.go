package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// FieldError is one problem with a request: the JSON path of the field, the
// offending value as text and the reason. Path "" means the body as a
// whole.
type FieldError struct {
	// Path is like "frontend-address.port" or "backend-addresses[2].ip".
	Path   string
	Value  string
	Reason string
}

// Error formats the error as `invalid PATH "VALUE": REASON`.
func (e *FieldError) Error() string {
	switch {
	case e.Path == "":
		return "invalid request body: " + e.Reason
	case e.Value == "":
		return fmt.Sprintf("invalid %s: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Path, e.Value, e.Reason)
}

// unknownFieldHints explain fields of older upstream versions that actorlb
// refuses on purpose.
var unknownFieldHints = map[string]string{
	"flags.active-frontend": "actorlb always creates the revNAT entry with the service and deletes it with it",
}

// TooManyError is the refusal of a batch with more items than its limit
// (413): decoding stops at the first item over it, so that a large body
// of tiny items costs no more than the limit.
type TooManyError struct {
	// Limit is the most items one request may hold.
	Limit int
}

// Error says what the limit is and what to do.
func (e *TooManyError) Error() string {
	return fmt.Sprintf("invalid request body: more than %d services in one request (the limit of PUT /v1/services; split the batch)", e.Limit)
}

// decodeStrict decodes one JSON value from body into dst (a pointer to a
// struct, or to a slice for a batch) and refuses malformed JSON, trailing
// data, duplicate and unknown fields, values of the wrong JSON type and
// integers out of their field's range. null is the same as an absent
// field. A batch (dst a slice) of more than maxItems elements is refused
// with *TooManyError (maxItems <= 0: no limit). Other errors are
// *FieldError.
//
// The value is decoded token by token straight into dst: no intermediate
// tree of the whole body is built, so a request costs about what it
// decodes to. The tokens are read by tokens (below), over a body that
// json.Valid accepted, rather than by json.Decoder.Token, which builds
// an error value for every number it reads (a third of a PUT's CPU).
func decodeStrict(body []byte, dst any, maxItems ...int) error {
	// First the syntax, with the decoder's messages and offsets.
	if !json.Valid(body) {
		if err := syntaxError(body); err != nil {
			return err
		}
		return &FieldError{Reason: "malformed JSON"} // json.Valid and the decoder disagree: not seen
	}
	// Then the structure, token by token: the JSON is valid now.
	return decodeTokens(&tokens{b: body}, dst, maxItems...)
}

// decodeTokens decodes the value tr reads into dst, as decodeStrict says.
func decodeTokens(tr tokenReader, dst any, maxItems ...int) error {
	d := &decoder{dec: tr}
	if len(maxItems) > 0 {
		d.maxItems = maxItems[0]
	}
	rv := reflect.ValueOf(dst).Elem()
	tok, err := d.dec.Token()
	if err != nil {
		return &FieldError{Reason: "malformed JSON: " + err.Error()}
	}
	if rv.Kind() == reflect.Slice { // a batch
		if tok != json.Delim('[') {
			return &FieldError{Reason: "want a JSON array, got " + describe(tok)}
		}
		d.top = true
	} else if tok != json.Delim('{') {
		return &FieldError{Reason: "want a JSON object, got " + describe(tok)}
	}
	if err := d.assign(tok, rv, ""); err != nil {
		var fe *FieldError
		var tm *TooManyError
		if errors.As(err, &fe) || errors.As(err, &tm) {
			return err
		}
		return &FieldError{Reason: "malformed JSON: " + err.Error()}
	}
	return nil
}

// syntaxError is what encoding/json's decoder says of body, with the
// offset it gives: nil if it reads one JSON value and nothing after it.
func syntaxError(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(new(json.RawMessage)); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return &FieldError{Reason: "body is empty, want a JSON object"}
		case errors.Is(err, io.ErrUnexpectedEOF):
			return &FieldError{Reason: "malformed JSON: unexpected end of input"}
		case errors.As(err, &se):
			return &FieldError{Reason: fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, se.Error())}
		}
		return &FieldError{Reason: "malformed JSON: " + err.Error()}
	}
	rest := body[dec.InputOffset():]
	if trimmed := bytes.TrimLeft(rest, " \t\r\n"); len(trimmed) > 0 {
		return &FieldError{Reason: fmt.Sprintf("malformed JSON: unexpected data after the JSON value at byte %d", len(body)-len(trimmed))}
	}
	return nil
}

// tokens reads the tokens of a JSON text that json.Valid accepted, as
// json.Decoder.Token does with UseNumber: json.Delim for the brackets,
// string, json.Number (the literal as written), bool and nil; commas and
// colons are skipped. It trusts the text's validity: on any other text
// its tokens are meaningless (it never reads out of bounds: it returns
// io.ErrUnexpectedEOF at the end).
type tokens struct {
	b []byte
	i int
}

// skip moves past white space, commas and colons.
func (t *tokens) skip() {
	for t.i < len(t.b) {
		switch t.b[t.i] {
		case ' ', '\t', '\r', '\n', ',', ':':
			t.i++
		default:
			return
		}
	}
}

// More reports whether the array or object being read has another
// element.
func (t *tokens) More() bool {
	t.skip()
	return t.i < len(t.b) && t.b[t.i] != ']' && t.b[t.i] != '}'
}

// Token returns the next token.
func (t *tokens) Token() (json.Token, error) {
	t.skip()
	if t.i >= len(t.b) {
		return nil, io.ErrUnexpectedEOF
	}
	switch c := t.b[t.i]; c {
	case '{', '}', '[', ']':
		t.i++
		return json.Delim(c), nil
	case '"':
		return t.str()
	case 't':
		t.i += len("true")
		return true, nil
	case 'f':
		t.i += len("false")
		return false, nil
	case 'n':
		t.i += len("null")
		return nil, nil
	}
	j := t.i
	for j < len(t.b) && strings.IndexByte("+-.eE0123456789", t.b[j]) >= 0 {
		j++
	}
	n := json.Number(t.b[t.i:j])
	t.i = j
	return n, nil
}

// str reads the string at t.i (its opening quote). One without escapes
// whose bytes are valid UTF-8 is taken as it is; any other goes through
// json.Unmarshal, which decodes the escapes and replaces invalid UTF-8
// as json.Decoder does.
func (t *tokens) str() (json.Token, error) {
	plain := true
	for j := t.i + 1; j < len(t.b); j++ {
		switch c := t.b[j]; {
		case c == '\\':
			plain = false
			j++ // the escaped byte is not the closing quote
		case c == '"':
			lit := t.b[t.i : j+1]
			t.i = j + 1
			if plain && utf8.Valid(lit) {
				return string(lit[1 : len(lit)-1]), nil
			}
			var s string
			if err := json.Unmarshal(lit, &s); err != nil {
				return nil, err
			}
			return s, nil
		}
	}
	t.i = len(t.b)
	return nil, io.ErrUnexpectedEOF
}

// tokenReader is what decoder reads: tokens, or (in the tests, as the
// reference) a json.Decoder with UseNumber.
type tokenReader interface {
	Token() (json.Token, error)
	More() bool
}

// decoder assigns the tokens of a JSON value to Go values by reflection.
type decoder struct {
	dec tokenReader
	// top is true until the top-level array has been entered: maxItems
	// bounds that array only.
	top      bool
	maxItems int
}

// value reads the next value into rv.
func (d *decoder) value(rv reflect.Value, path string) error {
	tok, err := d.dec.Token()
	if err != nil {
		return err
	}
	return d.assign(tok, rv, path)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(v any) string {
	switch v {
	case json.Delim('['):
		return "an array"
	case json.Delim('{'):
		return "an object"
	}
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// literal returns v as text for an error message: scalars as they were
// written, composite values as "".
func literal(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 64 {
			return x[:64] + "..."
		}
		return x
	case json.Number:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

func typeError(path, want string, v any) error {
	return &FieldError{Path: path, Value: literal(v), Reason: "want " + want + ", got " + describe(v)}
}

// structFields are the JSON names of a struct's fields and their indexes.
type structFields struct {
	index map[string]int
	names []string
}

var fieldCache sync.Map // reflect.Type -> *structFields

// jsonFields maps the JSON names of a struct's fields to their indexes.
func jsonFields(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{index: map[string]int{}}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		f.index[name] = i
		f.names = append(f.names, name)
	}
	fieldCache.Store(t, f)
	return f
}

// assign decodes the value that begins with tok into rv.
func (d *decoder) assign(tok json.Token, rv reflect.Value, path string) error {
	if tok == nil {
		rv.SetZero()
		return nil
	}
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			rv.Set(reflect.New(rv.Type().Elem()))
		}
		return d.assign(tok, rv.Elem(), path)
	case reflect.Struct:
		if tok != json.Delim('{') {
			return typeError(path, "an object", tok)
		}
		fields := jsonFields(rv.Type())
		var seen uint64 // by field index; the wire types have fewer than 64 fields
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return err
			}
			k := kt.(string) // the decoder guarantees a string key here
			i, ok := fields.index[k]
			if !ok {
				reason := "unknown field (known: " + strings.Join(fields.names, ", ") + ")"
				if hint, ok := unknownFieldHints[join(path, k)]; ok {
					reason = "unknown field (" + hint + ")"
				}
				return &FieldError{Path: join(path, k), Reason: reason}
			}
			if seen&(1<<i) != 0 {
				return &FieldError{Path: join(path, k), Reason: "field given twice"}
			}
			seen |= 1 << i
			if err := d.value(rv.Field(i), join(path, k)); err != nil {
				return err
			}
		}
		_, err := d.dec.Token() // '}'
		return err
	case reflect.Slice:
		if tok != json.Delim('[') {
			return typeError(path, "an array", tok)
		}
		limit := 0
		if d.top {
			d.top, limit = false, d.maxItems
		}
		rv.Set(reflect.MakeSlice(rv.Type(), 0, 0))
		zero := reflect.Zero(rv.Type().Elem())
		for n := 0; d.dec.More(); n++ {
			if limit > 0 && n >= limit {
				return &TooManyError{Limit: limit}
			}
			rv.Set(reflect.Append(rv, zero))
			if err := d.value(rv.Index(n), fmt.Sprintf("%s[%d]", path, n)); err != nil {
				return err
			}
		}
		_, err := d.dec.Token() // ']'
		return err
	case reflect.String:
		s, ok := tok.(string)
		if !ok {
			return typeError(path, "a string", tok)
		}
		rv.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := tok.(bool)
		if !ok {
			return typeError(path, "a boolean", tok)
		}
		rv.SetBool(b)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			return typeError(path, "an integer", tok)
		}
		bits := rv.Type().Bits()
		lo, hi := int64(-1)<<(bits-1), int64(math.MaxInt64>>(64-bits))
		x, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || x < lo || x > hi {
			return &FieldError{Path: path, Value: string(n), Reason: fmt.Sprintf("want an integer between %d and %d", lo, hi)}
		}
		rv.SetInt(x)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return typeError(path, "an integer", tok)
		}
		hi := uint64(math.MaxUint64) >> (64 - rv.Type().Bits())
		x, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil || x > hi {
			return &FieldError{Path: path, Value: string(n), Reason: fmt.Sprintf("want an integer between 0 and %d", hi)}
		}
		rv.SetUint(x)
		return nil
	}
	return &FieldError{Path: path, Reason: "unsupported field type " + rv.Type().String()}
}

// DecodeStrict decodes body into dst (a pointer to a ServiceSpec, a slice
// of them, or another struct of this package) as strictly as the server
// decodes request bodies: malformed JSON, trailing data, duplicate and
// unknown fields, wrong JSON types and out-of-range integers are refused
// with a *FieldError naming the JSON path. Clients use it to refuse
// locally what the agent would refuse.
func DecodeStrict(body []byte, dst any) error { return decodeStrict(body, dst) }
