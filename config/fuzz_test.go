package config

import (
	"errors"
	"testing"
)

// FuzzDecodeJob: any body either decodes to a valid job or fails with a FieldError; never a
// panic, never another error type (which the API would have to answer with a 500).
func FuzzDecodeJob(f *testing.F) {
	f.Add([]byte(validJob))
	f.Add([]byte(`{"jobName":"j","shardingTotalCount":"1e9"}`))
	f.Add([]byte(`{"jobProperties":{"a":null}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := DecodeJob(body, "UTC")
		var fe *FieldError
		switch {
		case err == nil:
			if verr := j.Validate(); verr != nil {
				t.Fatalf("DecodeJob(%q) accepted a job that does not validate: %v", body, verr)
			}
		case !errors.As(err, &fe) || fe.Field == "":
			t.Fatalf("DecodeJob(%q) error %T %v is not a FieldError naming a field", body, err, err)
		}
	})
}

func FuzzDecodeApp(f *testing.F) {
	f.Add([]byte(validApp))
	f.Add([]byte(`{"cpuCount":"-0","memoryMB":"Inf"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := DecodeApp(body)
		var fe *FieldError
		switch {
		case err == nil:
			if verr := a.Validate(); verr != nil {
				t.Fatalf("DecodeApp(%q) accepted an invalid app: %v", body, verr)
			}
		case !errors.As(err, &fe) || fe.Field == "":
			t.Fatalf("DecodeApp(%q) error %T %v is not a FieldError naming a field", body, err, err)
		}
	})
}
