// Module images builds the imagebuild tool (see main.go). It is kept apart from the
// product's go.mod so the product's dependency graph stays small.
module github.com/edgepool/edgepool/hack/tools/images

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
