module github.com/ejcloud/ejcloud

go 1.26

require (
	github.com/Netflix/go-expect v0.0.0-20220104043353-73e0943537d2
	github.com/go-zookeeper/zk v1.0.4
	github.com/gorilla/mux v1.8.1
	github.com/hashicorp/cronexpr v1.1.3
	github.com/mesos/mesos-go v0.0.11
	github.com/sirupsen/logrus v1.10.2
	go.yaml.in/yaml/v3 v3.0.5
	golang.org/x/sys v0.13.0
)

require (
	github.com/creack/pty v1.1.17 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/pquerna/ffjson v0.0.0-20190930134022-aa0246cd15f7 // indirect
)

replace github.com/go-zookeeper/zk => ./third_party/zk
