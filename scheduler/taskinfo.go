package scheduler

import (
	"strconv"
	"strings"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskid"
)

// executorInfo is the ExecutorInfo of an app on an agent (SPEC §5.4): executor id
// {app}@-@{agent}, the app's URL fetched (extracted if an archive, else made executable),
// the bootstrap script as the command, the app's resources (taken from the offers), and the
// sampling count in data.
func executorInfo(frameworkID string, app config.App, agentID string, resources []mesos.Resource) mesos.ExecutorInfo {
	uri := mesos.CommandInfo_URI{Value: app.AppURL, Cache: ptr(app.AppCacheEnable)}
	if app.IsArchive() {
		uri.Extract = ptr(true)
	} else {
		uri.Executable = ptr(true)
		uri.Extract = ptr(false)
	}
	return mesos.ExecutorInfo{
		Type:        mesos.ExecutorInfo_CUSTOM,
		ExecutorID:  mesos.ExecutorID{Value: taskid.Executor{AppName: app.AppName, AgentID: agentID}.String()},
		FrameworkID: &mesos.FrameworkID{Value: frameworkID},
		Name:        ptr("ejcloud-executor " + app.AppName),
		Command:     &mesos.CommandInfo{URIs: []mesos.CommandInfo_URI{uri}, Value: ptr(app.BootstrapScript), Shell: ptr(true)},
		Resources:   resources,
		Data:        taskdata.ExecutorData{EventTraceSamplingCount: app.EventTraceSamplingCount}.Encode(),
	}
}

// taskInfo is the TaskInfo of one shard, with its resources (taken from the offers).
func taskInfo(id taskid.ID, job config.Job, exec mesos.ExecutorInfo, resources []mesos.Resource) mesos.TaskInfo {
	p := taskdata.Payload{Job: job, ShardingContext: taskdata.ShardingContext{
		TaskID: id.String(), JobName: job.JobName, ShardingTotalCount: job.ShardingTotalCount,
		JobParameter: job.JobParameter, ShardingItem: id.Item, ShardingParameter: config.ShardingItemParameter(job.ShardingItemParameters, id.Item),
	}}
	return mesos.TaskInfo{
		Name:      strings.Join([]string{job.JobName, itoa(id.Item)}, "@-@"),
		TaskID:    mesos.TaskID{Value: id.String()},
		AgentID:   mesos.AgentID{Value: id.AgentID},
		Resources: resources,
		Executor:  &exec,
		Data:      p.Encode(),
	}
}

// AttemptLabel is the TaskInfo label that carries a retry's attempt number (issue 19): 2 for a
// shard's first retry. Tasks of a fire's first run do not carry it.
const AttemptLabel = "ejcloud.attempt"

func withAttempt(t *mesos.TaskInfo, attempt int) { withLabel(t, AttemptLabel, itoa(attempt)) }

func withLabel(t *mesos.TaskInfo, key, value string) {
	if t.Labels == nil {
		t.Labels = &mesos.Labels{}
	}
	t.Labels.Labels = append(t.Labels.Labels, mesos.Label{Key: key, Value: &value})
}

func itoa(n int) string { return strconv.Itoa(n) }
