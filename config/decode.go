package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
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

// Fields splits a request body holding one JSON object into its members, each error a
// *FieldError: a body that is not one object, or has anything but white space after it, or a
// member named "", names "body"; a member given twice names the member (encoding/json would keep the last one
// silently, and a client sending two appNames would not know which app it made).
func Fields(body []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		msg := "body is not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, &FieldError{Field: "body", Message: msg}
	}
	broken := func(err error) error { // within the object: a syntax error, or its end
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return &FieldError{Field: "body", Message: "body is not a JSON object: " + err.Error()}
	}
	raw := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, broken(err)
		}
		name, ok := t.(string) // json.Decoder gives a member's name here, or an error
		if !ok {
			return nil, &FieldError{Field: "body", Message: "body is not a JSON object"}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, broken(err)
		}
		if name == "" { // no field to name
			return nil, &FieldError{Field: "body", Message: `body has a field with an empty name ""`}
		}
		if _, dup := raw[name]; dup {
			return nil, &FieldError{Field: name, Message: name + " is given more than once"}
		}
		raw[name] = v
	}
	if _, err := dec.Token(); err != nil { // the object's '}'
		return nil, broken(err)
	}
	// Token, not More: More is false before a stray '}' or ']' too.
	if _, err := dec.Token(); err != io.EOF {
		return nil, &FieldError{Field: "body", Message: "body has data after the JSON object"}
	}
	return raw, nil
}

// decodeObject decodes a JSON object field by field so that each error names its field and
// unknown fields are refused. A JSON null leaves the destination as it was, as the 2.1.5
// console sends nulls for fields it leaves empty.
func decodeObject(body []byte, fields map[string]setter) error {
	raw, err := Fields(body)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names) // report the first problem deterministically
	for _, name := range names {
		set, ok := fields[name]
		if !ok {
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
// sends numbers as strings). A string must hold a number in JSON's grammar, as a JSON number
// is: Go's own syntax ("0x10p0", "5.", "+5", "1_000", "Inf") is no number here. what ("a
// number") and example ("12.5") are for the error.
func numberText(raw json.RawMessage, what, example string) (string, error) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil && jsonNumber.MatchString(n.String()) {
		return n.String(), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("must be %s", what)
	}
	if t := strings.TrimSpace(s); jsonNumber.MatchString(t) {
		return t, nil
	}
	return "", fmt.Errorf("must be %s (a JSON number, or a string holding one such as %q), got %q", what, example, s)
}

// jsonNumber is the grammar of a JSON number (RFC 8259 §6).
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func float(dst *float64) setter {
	return func(raw json.RawMessage) error {
		text, err := numberText(raw, "a number", "12.5")
		if err != nil {
			return err
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
		text, err := numberText(raw, "an integer", "3")
		if err != nil {
			return err
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
