package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// FieldError is a validation failure of one field. Its JSON form is the body of the API's 400
// answer (SPEC §3).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"error"`
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: field + " " + fmt.Sprintf(format, args...)}
}

// setter decodes one JSON value into its destination, or explains why it cannot.
type setter func(raw json.RawMessage) error

// decodeObject decodes a JSON object field by field so that each error names its field and
// unknown fields are refused. A JSON null leaves the destination as it was, as the 2.1.5
// console sends nulls for fields it leaves empty.
func decodeObject(body []byte, fields map[string]setter) error {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return &FieldError{Field: "body", Message: "body is not a JSON object: " + err.Error()}
	}
	if raw == nil {
		return &FieldError{Field: "body", Message: "body is not a JSON object"}
	}
	if dec.More() {
		return &FieldError{Field: "body", Message: "body has data after the JSON object"}
	}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names) // report the first problem deterministically
	for _, name := range names {
		set, ok := fields[name]
		switch {
		case !ok && name == "":
			return &FieldError{Field: "body", Message: `body has a field with an empty name ""`}
		case !ok:
			return fieldErr(name, "is not a known field")
		}
		v := raw[name]
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		if err := set(v); err != nil {
			return &FieldError{Field: name, Message: name + " " + err.Error()}
		}
	}
	return nil
}

func str(dst *string) setter {
	return func(raw json.RawMessage) error {
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("must be a string")
		}
		return nil
	}
}

// numberText returns the text of a JSON number, or of a string holding one (the 2.1.5 console
// sends numbers as strings).
func numberText(raw json.RawMessage) (string, bool) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return strings.TrimSpace(s), true
	}
	return "", false
}

func float(dst *float64) setter {
	return func(raw json.RawMessage) error {
		text, ok := numberText(raw)
		if !ok {
			return fmt.Errorf("must be a number")
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("must be a finite number, got %q", text)
		}
		*dst = f
		return nil
	}
}

func integer(dst *int) setter {
	return func(raw json.RawMessage) error {
		text, ok := numberText(raw)
		if !ok {
			return fmt.Errorf("must be an integer")
		}
		n, err := strconv.ParseInt(text, 10, 32)
		if err != nil {
			// Accept 3.0 from clients that only have floating point numbers.
			f, ferr := strconv.ParseFloat(text, 64)
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
				return fmt.Errorf("must be an integer, got %q", text)
			}
			n = int64(f)
		}
		*dst = int(n)
		return nil
	}
}

func boolean(dst *bool) setter {
	return func(raw json.RawMessage) error {
		if err := json.Unmarshal(raw, dst); err == nil {
			return nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			if b, err := strconv.ParseBool(strings.TrimSpace(s)); err == nil {
				*dst = b
				return nil
			}
		}
		return fmt.Errorf("must be true or false")
	}
}

func stringMap(dst *map[string]string) setter {
	return func(raw json.RawMessage) error {
		var m map[string]string
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("must be an object whose values are strings")
		}
		*dst = m
		return nil
	}
}

// retryPolicy decodes a job's retry object; a nested field's error names it ("retry: maxAttempts …").
func retryPolicy(dst **Retry) setter {
	return func(raw json.RawMessage) error {
		r := Retry{MaxAttempts: 1}
		if err := decodeObject(raw, map[string]setter{
			"maxAttempts": integer(&r.MaxAttempts),
			"backoff":     float(&r.Backoff),
			"maxBackoff":  float(&r.MaxBackoff),
		}); err != nil {
			var fe *FieldError
			switch {
			case errors.As(err, &fe) && fe.Field == "body":
				return fmt.Errorf("must be an object {maxAttempts, backoff, maxBackoff}")
			case errors.As(err, &fe):
				return errors.New(fe.Message)
			}
			return err
		}
		*dst = &r
		return nil
	}
}

func stringList(dst *[]string) setter {
	return func(raw json.RawMessage) error {
		var l []string
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("must be an array of job names")
		}
		*dst = l
		return nil
	}
}

// mark records in given that the field had a value (JSON null is no value).
func mark(given map[string]bool, name string, set setter) setter {
	return func(raw json.RawMessage) error {
		given[name] = true
		return set(raw)
	}
}

// ignored accepts any value: fields that Elastic-Job-Cloud 2.1.5 accepted and ignored.
func ignored(json.RawMessage) error { return nil }
