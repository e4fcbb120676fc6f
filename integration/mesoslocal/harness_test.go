package mesoslocal_test

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/integration/mesostest"
)

const executorModeEnv = "MESOSLOCAL_TEST_EXECUTOR"

// strayEnv makes this test binary a process an executor leaves behind (see executor_test.go):
// it ignores SIGTERM and SIGHUP and lives for a minute unless killed.
const strayEnv = "MESOSLOCAL_TEST_STRAY"

// codec is the scheduler and executor codec of this run of the suite: JSON, or protobuf when
// TestWholeSuiteUnderProtobuf runs the suite again.
var codec = "application/json"

func TestMain(m *testing.M) {
	if os.Getenv(strayEnv) != "" {
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	if mode := os.Getenv(executorModeEnv); mode != "" {
		os.Exit(runTestExecutor(mode))
	}
	if c := os.Getenv("MESOSLOCAL_TEST_CODEC"); c != "" {
		codec = c
	}
	os.Exit(m.Run())
}

const wait = mesostest.Wait

var media = []string{"application/json", "application/x-protobuf"}

// forEachCodec runs a wire-level test once per codec.
func forEachCodec(t *testing.T, f func(t *testing.T, media string)) {
	for _, m := range media {
		t.Run(strings.TrimPrefix(m, "application/"), func(t *testing.T) { f(t, m) })
	}
}

// Short names for the shared harness.
var (
	newCluster    = mesostest.NewCluster
	subscribe     = mesostest.Subscribe
	trySubscribe  = mesostest.TrySubscribe
	frameworkInfo = mesostest.FrameworkInfo
	paInfo        = mesostest.PAInfo
	isType        = mesostest.IsType
	updateOf      = mesostest.UpdateOf
	scalars       = mesostest.Scalars
	masterState   = mesostest.MasterState
)

type sched = mesostest.Sched

func ptrTo[T any](v T) *T { return &v }

// testExecutor is an ExecutorInfo running this test binary as an executor in the given mode.
func testExecutor(id, mode string) *mesos.ExecutorInfo {
	if codec == "application/x-protobuf" {
		mode += ",protobuf"
	}
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return &mesos.ExecutorInfo{
		ExecutorID: mesos.ExecutorID{Value: id},
		Command: &mesos.CommandInfo{Value: &exe, Shell: ptrTo(false), Arguments: []string{exe},
			Environment: &mesos.Environment{Variables: []mesos.Environment_Variable{{Name: executorModeEnv, Value: ptrTo(mode)}}}},
		Resources: scalars(0.1, 32),
	}
}

// task builds a task for the test executor; data tells the executor what to do with it.
func task(id string, o mesos.Offer, exec *mesos.ExecutorInfo, data string) mesos.TaskInfo {
	return mesos.TaskInfo{Name: id, TaskID: mesos.TaskID{Value: id}, AgentID: o.AgentID, Executor: exec,
		Resources: scalars(0.5, 64), Data: []byte(data)}
}
