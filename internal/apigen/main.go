// Command apigen generates, from api/coffer/v1/wallet.proto, the Go
// messages and gRPC service (by running protoc-gen-go and
// protoc-gen-go-grpc as plugins, from go.mod's tool list) and the OpenAPI
// document of the HTTP/JSON routes. It needs no protoc: the .proto is
// compiled in-process. Run it with `go generate ./api`; a test fails when
// the committed output is stale.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	_ "google.golang.org/genproto/googleapis/api/annotations" // registers google/api/*.proto
	_ "google.golang.org/genproto/googleapis/rpc/status"      // registers google/rpc/status.proto
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// protoFile is the contract, relative to the import root api/.
const protoFile = "coffer/v1/wallet.proto"

func main() {
	root, err := moduleRoot()
	if err == nil {
		var out map[string][]byte
		if out, err = generate(root); err == nil {
			err = write(root, out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apigen:", err)
		os.Exit(1)
	}
}

// moduleRoot is the directory of go.mod, from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// generate returns every generated file by its path from root.
func generate(root string) (map[string][]byte, error) {
	file, err := compile(root)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, plugin := range []string{"protoc-gen-go", "protoc-gen-go-grpc"} {
		files, err := runPlugin(root, plugin, file)
		if err != nil {
			return nil, err
		}
		for name, content := range files {
			out[filepath.Join("api", name)] = content
		}
	}
	doc, err := openAPI(file)
	if err != nil {
		return nil, err
	}
	out[filepath.Join("api", "openapi.json")] = doc
	out[filepath.Join("docs", "openapi.json")] = doc
	return out, nil
}

func write(root string, files map[string][]byte) error {
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// compile parses and links the contract. google/protobuf imports come with
// the compiler; google/api and google/rpc ones from the Go packages
// linked in.
func compile(root string) (linker.File, error) {
	linked := protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			return protocompile.SearchResult{}, err
		}
		return protocompile.SearchResult{Desc: fd}, nil
	})
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(protocompile.CompositeResolver{
			&protocompile.SourceResolver{ImportPaths: []string{filepath.Join(root, "api")}},
			linked,
		}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := c.Compile(context.Background(), protoFile)
	if err != nil {
		return nil, err
	}
	return files[0], nil
}

// runPlugin runs a protoc plugin on the contract and returns its files.
func runPlugin(root, plugin string, file linker.File) (map[string][]byte, error) {
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: []string{protoFile},
		Parameter:      proto.String("paths=source_relative"),
		ProtoFile:      withDependencies(file),
	}
	in, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "tool", plugin)
	cmd.Dir = root
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", plugin, err, strings.TrimSpace(stderr.String()))
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("%s: %w", plugin, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("%s: %s", plugin, resp.GetError())
	}
	out := map[string][]byte{}
	for _, f := range resp.File {
		out[f.GetName()] = []byte(f.GetContent())
	}
	return out, nil
}

// withDependencies lists file and everything it imports, dependencies
// first, as a CodeGeneratorRequest wants them.
func withDependencies(file protoreflect.FileDescriptor) []*descriptorpb.FileDescriptorProto {
	var out []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var visit func(fd protoreflect.FileDescriptor)
	visit = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			visit(fd.Imports().Get(i).FileDescriptor)
		}
		out = append(out, protodesc.ToFileDescriptorProto(fd))
	}
	visit(file)
	return out
}
