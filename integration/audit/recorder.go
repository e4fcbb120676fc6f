package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/taskdata"
)

// Recorder collects status updates; its Observe is mesoslocal.Options.OnStatusUpdate.
type Recorder struct {
	mu      sync.Mutex
	updates []Update
	w       *json.Encoder // also writes each update as a JSON line, if set
	werr    error
	now     func() time.Time
}

// NewRecorder returns a Recorder that also writes every update to w as a JSON line (w may be
// nil), so that another process can audit them (mesos-local --record-updates).
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{now: time.Now}
	if w != nil {
		r.w = json.NewEncoder(w)
	}
	return r
}

// Observe records one update, stamped with the time it is taken.
func (r *Recorder) Observe(_ string, st mesos.TaskStatus) {
	u := Update{TaskID: st.TaskID.Value, State: st.GetState().String(), At: r.now()}
	if u.State == mesos.TASK_FAILED.String() {
		d, _ := taskdata.DecodeStatus(st.Data)
		u.JobFailed = d.JobFailed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, u)
	if r.w != nil && r.werr == nil {
		r.werr = r.w.Encode(u)
	}
}

// Updates returns a copy of what was recorded so far.
func (r *Recorder) Updates() []Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Update(nil), r.updates...)
}

// Err reports the first error writing the JSON lines.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.werr
}

// ReadFile reads the JSON lines a Recorder wrote. A last line cut short (the writer was
// killed mid-line) is ignored.
func ReadFile(path string) ([]Update, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	var out []Update
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var u Update
		if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("audit: %s line %d: %w", path, line, err)
		}
		out = append(out, u)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit: reading %s: %w", path, err)
	}
	return out, nil
}
