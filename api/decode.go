package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
	"flags.active-frontend":      "actorlb always creates the revNAT entry with the service and deletes it with it",
	"flags.direct-server-return": "direct server return is not supported",
}

// decodeStrict decodes one JSON value from body into dst (a pointer to a
// struct) and refuses malformed JSON, trailing data, duplicate and unknown
// fields, values of the wrong JSON type and integers out of their field's
// range. null is the same as an absent field. Errors are *FieldError.
func decodeStrict(body []byte, dst any) error {
	// First the syntax, with the decoder's messages and offsets.
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
	// Then the structure, token by token: the JSON is valid now.
	tokens := json.NewDecoder(bytes.NewReader(body))
	tokens.UseNumber()
	v, err := readValue(tokens, "")
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return fe
		}
		return &FieldError{Reason: "malformed JSON: " + err.Error()}
	}
	if reflect.ValueOf(dst).Elem().Kind() == reflect.Slice { // a batch
		if _, ok := v.([]any); !ok {
			return &FieldError{Reason: "want a JSON array, got " + describe(v)}
		}
	} else if _, ok := v.(map[string]any); !ok {
		return &FieldError{Reason: "want a JSON object, got " + describe(v)}
	}
	return assign(v, reflect.ValueOf(dst).Elem(), "")
}

// readValue reads one JSON value token by token, so that a field given
// twice in an object is refused rather than silently overwritten.
func readValue(dec *json.Decoder, path string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string) // the decoder guarantees a string key here
				if _, dup := obj[k]; dup {
					return nil, &FieldError{Path: join(path, k), Reason: "field given twice"}
				}
				if obj[k], err = readValue(dec, join(path, k)); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token() // '}'
			return obj, err
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := readValue(dec, fmt.Sprintf("%s[%d]", path, len(arr)))
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token() // ']'
			return arr, err
		}
		return nil, fmt.Errorf("unexpected %q", t)
	}
	return tok, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
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

// jsonFields maps the JSON names of a struct's fields to their indexes.
func jsonFields(t reflect.Type) (map[string]int, []string) {
	fields := map[string]int{}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = i
		names = append(names, name)
	}
	return fields, names
}

func assign(v any, rv reflect.Value, path string) error {
	if v == nil {
		rv.SetZero()
		return nil
	}
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			rv.Set(reflect.New(rv.Type().Elem()))
		}
		return assign(v, rv.Elem(), path)
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return typeError(path, "an object", v)
		}
		fields, names := jsonFields(rv.Type())
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			i, ok := fields[k]
			if !ok {
				reason := "unknown field (known: " + strings.Join(names, ", ") + ")"
				if hint, ok := unknownFieldHints[join(path, k)]; ok {
					reason = "unknown field (" + hint + ")"
				}
				return &FieldError{Path: join(path, k), Reason: reason}
			}
			if err := assign(obj[k], rv.Field(i), join(path, k)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return typeError(path, "an array", v)
		}
		s := reflect.MakeSlice(rv.Type(), len(arr), len(arr))
		for i, e := range arr {
			if err := assign(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		rv.Set(s)
		return nil
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			return typeError(path, "a string", v)
		}
		rv.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return typeError(path, "a boolean", v)
		}
		rv.SetBool(b)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return typeError(path, "an integer", v)
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
		n, ok := v.(json.Number)
		if !ok {
			return typeError(path, "an integer", v)
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
