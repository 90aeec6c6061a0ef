module github.com/geolimit/geolimit

go 1.26.8

require github.com/vmihailenco/msgpack/v5 v5.4.1

require (
	github.com/stretchr/testify v1.12.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)
