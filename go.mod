module github.com/ejcloud/ejcloud

go 1.26

require github.com/hashicorp/cronexpr v1.1.3

require (
	github.com/go-zookeeper/zk v1.0.4 // indirect
	github.com/sirupsen/logrus v1.10.2 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/sys v0.13.0 // indirect
)
