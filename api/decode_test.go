package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeStrictReference is decodeStrict as it was before tokens: the
// syntax by json.Decoder.Decode alone, the structure read by
// json.Decoder.Token. decodeStrict must answer every body as it does.
func decodeStrictReference(body []byte, dst any, maxItems ...int) error {
	if err := syntaxError(body); err != nil {
		return err
	}
	jd := json.NewDecoder(bytes.NewReader(body))
	jd.UseNumber()
	return decodeTokens(jd, dst, maxItems...)
}

// requireSameDecoding decodes body into a ServiceSpec and into a batch
// (at most two items) with decodeStrict and with the reference, and
// requires the same error, or the same value. It returns decodeStrict's
// ServiceSpec, nil if it refused body as one.
func requireSameDecoding(t *testing.T, body []byte) *ServiceSpec {
	t.Helper()
	var spec *ServiceSpec
	for _, mk := range []func() any{func() any { return new(ServiceSpec) }, func() any { return new([]ServiceSpec) }} {
		got, want := mk(), mk()
		gerr, werr := decodeStrict(body, got, 2), decodeStrictReference(body, want, 2)
		if werr != nil {
			require.Error(t, gerr, "body %q: the reference refused it: %v", body, werr)
			require.Equal(t, werr.Error(), gerr.Error(), "body %q", body)
			require.Equal(t, reflect.TypeOf(werr), reflect.TypeOf(gerr), "body %q", body)
			continue
		}
		require.NoError(t, gerr, "body %q", body)
		require.Equal(t, want, got, "body %q", body)
		if s, ok := got.(*ServiceSpec); ok {
			spec = s
		}
	}
	return spec
}

// decodeSeeds are bodies of every kind decodeStrict meets: good ones,
// escapes and odd UTF-8 in strings, every JSON type in every field, and
// malformed ones.
var decodeSeeds = []string{
	`{"id": 1, "frontend-address": {"ip": "10.0.0.1", "port": 80, "protocol": "TCP", "scope": "external"}, "backend-addresses": [{"ip": "10.0.1.1", "port": 8080, "weight": 7, "state": "active", "nodeLocal": true}], "flags": {"type": "NodePort", "sessionAffinity": true, "sessionAffinityTimeout": 30}}`,
	`[{"id": 1, "frontend-address": {"ip": "10.0.0.1", "port": 80}}, {"id": 2}]`,
	`[{"id": 1}, {"id": 2}, {"id": 3}]`,
	`{"frontend-address": {"ip": "fe80::1\u0025eth0", "port": 1e2}}`,
	`{"frontend-address": {"ip": "\ud83d\ude00 \n\t\"\\\/ \u00e9", "port": 0}}`,
	"{\"frontend-address\": {\"ip\": \"caf\xc3\xa9 \xff\xfe\", \"port\": 80}}",
	`{"backend-addresses": [{"ip": "a", "weight": null}, {"ip": "b", "weight": -0}], "flags": null}`,
	`{"id": -9223372036854775808}`, `{"id": 9223372036854775808}`, `{"id": 1.0}`, `{"id": 1E+2}`,
	`{"flags": {"sessionAffinity": false, "type": ""}}`, `{"id": true}`, `{"id": "1"}`, `{"id": {}}`, `{"id": []}`,
	`{"id": 1, "id": 2}`, `{"idd": 1}`, `{"flags": {"active-frontend": true}}`,
	`{}`, `[]`, `null`, `true`, `1`, `"x"`, ``, ` `, `{`, `{"id": 1,}`, `{"id": 1} {}`, `{"id": 1} `, "\ufeff{}",
	`{"frontend-address": {"ip": "10.0.0.1", "port": 80}} x`, `[{"id": 1}, ]`, `{"a" 1}`, `{"id": 01}`, `{"id": .5}`,
}

func TestDecodeStrictAnswersEveryBodyAsEncodingJSONsTokensDo(t *testing.T) {
	for _, body := range decodeSeeds {
		requireSameDecoding(t, []byte(body))
	}
}

func TestTokensReadStringsAsEncodingJSONDoes(t *testing.T) {
	for _, lit := range []string{`""`, `"plain"`, `"tab\tquote\"slash\\\/"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, "\"caf\xc3\xa9\"", "\"\xff\xfe\"", `"\\"`} {
		var want string
		require.NoError(t, json.Unmarshal([]byte(lit), &want), lit)
		tk := &tokens{b: []byte(lit)}
		got, err := tk.Token()
		require.NoError(t, err, lit)
		require.Equal(t, want, got, lit)
		require.Equal(t, len(lit), tk.i, "%s: read to its end", lit)
	}
}

// FuzzDecodeStrict checks decodeStrict against the reference on any body,
// and that a body it accepts becomes a valid service or a *FieldError
// (ToService, as a PUT does), never a panic nor an invalid service.
func FuzzDecodeStrict(f *testing.F) {
	for _, body := range decodeSeeds {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		spec := requireSameDecoding(t, body)
		if spec == nil {
			return
		}
		svc, err := ToService(1, spec)
		if err != nil {
			var fe *FieldError
			require.ErrorAs(t, err, &fe, "body %q", body)
			return
		}
		require.NoError(t, svc.Validate(), "body %q: ToService made an invalid service", body)
	})
}

// BenchmarkDecodeStrictServiceSpec decodes the body of a PUT
// /v1/service/{id} of ten backends, as the server does.
func BenchmarkDecodeStrictServiceSpec(b *testing.B) {
	spec := ServiceSpec{ID: 1, FrontendAddress: &FrontendAddress{IP: "10.96.0.1", Port: 80, Protocol: "TCP"}}
	for i := range 10 {
		spec.BackendAddresses = append(spec.BackendAddresses, BackendAddress{IP: fmt.Sprintf("10.0.1.%d", i+1), Port: 8080})
	}
	body, err := json.Marshal(&spec)
	require.NoError(b, err)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var got ServiceSpec
		if err := decodeStrict(body, &got); err != nil {
			b.Fatal(err)
		}
	}
}
