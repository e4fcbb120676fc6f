module github.com/ejcloud/ejcloud

go 1.26

require (
	github.com/go-zookeeper/zk v1.0.4
	github.com/hashicorp/cronexpr v1.1.3
	github.com/sirupsen/logrus v1.10.2
)

require golang.org/x/sys v0.13.0 // indirect
