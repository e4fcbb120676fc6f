module github.com/ejcloud/ejcloud

go 1.26

require github.com/hashicorp/cronexpr v1.1.3

require github.com/stretchr/testify v1.12.1 // indirect
