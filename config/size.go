package config

import (
	"encoding/json"
	"fmt"
)

// StoredSize is how large c, an App or a Job, is as stored JSON (json.Marshal of it, as the
// state layer writes it), and which of its fields takes the most of that, with the size of
// that field's value. encoding/json writes each '<', '>' and '&' as 6 bytes (\u003c), so a
// config may take up to 6 times its request body.
func StoredSize(c any) (total int, field string, fieldSize int) {
	data, err := json.Marshal(c)
	if err != nil {
		return 0, "", 0
	}
	var fields map[string]json.RawMessage
	json.Unmarshal(data, &fields)
	for name, v := range fields {
		if len(v) > fieldSize || len(v) == fieldSize && name < field {
			field, fieldSize = name, len(v)
		}
	}
	return len(data), field, fieldSize
}

// CheckStoredSize refuses c, an App or a Job, when its stored JSON is over most bytes (the
// state layer's bound on one config: Store.MaxConfigBytes), naming the field that takes the
// most of it. A config that is not refused here could not be written at all: ZooKeeper takes
// at most jute.maxbuffer in one write, and refuses more, whatever is in it.
func CheckStoredSize(c any, most int) error {
	total, field, size := StoredSize(c)
	if total <= most {
		return nil
	}
	return fieldErr(field, "is too large to store: the %s's config would be %d bytes as stored JSON, %d of them %s"+
		" (JSON writes each <, > and & as 6 bytes), and ZooKeeper holds at most %d bytes of a config in one write; shorten %s",
		kindOf(c), total, size, field, most, field)
}

// TooLargeToWrite is the error of a write of c, an App or a Job, that ZooKeeper could not take
// though c passed CheckStoredSize: what the write carries beside the config (a job's writes
// carry its app's config, and an update the job's fire ledger and the restart list of its
// running tasks) left no room for it. Nothing was written. It names the field that takes the
// most of c.
func TooLargeToWrite(c any) error {
	total, field, size := StoredSize(c)
	beside := ""
	if kindOf(c) == "job" {
		beside = ", with what its write carries beside it (its app's config, its fire ledger, the restart list of its running tasks),"
	}
	return fieldErr(field, "is too large to store: the %s's config, %d bytes as stored JSON (%d of them %s)%s is more than"+
		" ZooKeeper takes in one write (jute.maxbuffer); nothing changed; shorten %s", kindOf(c), total, size, field, beside, field)
}

// kindOf is "app" or "job", for messages.
func kindOf(c any) string {
	switch c.(type) {
	case App, *App:
		return "app"
	case Job, *Job:
		return "job"
	}
	return fmt.Sprintf("%T", c)
}
