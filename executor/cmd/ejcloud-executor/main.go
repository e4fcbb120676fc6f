// Command ejcloud-executor is the stock Mesos executor of ejcloud: it runs SCRIPT jobs. The
// scheduler serves it at GET /executor/ejcloud-executor for apps that use it.
package main

import "github.com/ejcloud/ejcloud/executor"

func main() { executor.Main() }
